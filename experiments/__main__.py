"""`python -m experiments list | run NAME [flags] | page NAME`."""

from __future__ import annotations

import os
import sys

from benchmarks import runner
from experiments.registry import EXPERIMENTS

if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(runner.main("python -m experiments", EXPERIMENTS, sys.argv[1:]))
