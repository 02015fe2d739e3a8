"""`python -m benchmarks list | run NAME [--quick] [flags] | page`."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from benchmarks import pages, runner
from benchmarks.registry import BENCHMARKS


def main(argv: Sequence[str]) -> int:
    """`page [--page PATH]` rewrites the results page from the records; the rest is the runner."""
    if list(argv[:1]) == ["page"]:
        return pages.main(argv[1:])
    return runner.main("python -m benchmarks", BENCHMARKS, argv)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main(sys.argv[1:]))
