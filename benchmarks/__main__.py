"""`python -m benchmarks list | run NAME [--quick] [flags]`."""

from __future__ import annotations

import os
import sys

from benchmarks import runner
from benchmarks.registry import BENCHMARKS

if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(runner.main("python -m benchmarks", BENCHMARKS, sys.argv[1:]))
