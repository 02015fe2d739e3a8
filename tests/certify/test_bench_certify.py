"""benchmarks/bench_certify.py still runs (--quick, its record written to a temporary file)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.slow
def test_bench_certify_quick_writes_its_record(tmp_path) -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        bench = importlib.import_module("bench_certify")
    finally:
        sys.path.remove(str(BENCHMARKS))
    results = tmp_path / "CERTIFY.md"
    text = bench.main(["--quick", "--results", str(results)])
    written = results.read_text()
    assert "## bench_certify (quick)" in written and text in written
    assert "plug-in limit" in written and "SmallCNN 64x64" in written
    assert "- command: `python benchmarks/bench_certify.py --quick" in written
