"""benchmarks/bench_certify.py still runs (--quick, its record written to a temporary file)."""

from __future__ import annotations

import pytest

from benchmarks import bench_certify as bench


@pytest.mark.slow
def test_bench_certify_quick_writes_its_record(tmp_path) -> None:
    results = tmp_path / "RESULTS.md"  # the page a full run rewrites (benchmarks/RESULTS.md)
    text = bench.main(["--quick", "--results", str(results)])
    written = results.read_text()
    assert "## bench_certify (quick)" in written and text in written
    assert "plug-in limit" in written and "SmallCNN 64x64" in written
    assert "- command: `python -m benchmarks run bench_certify --quick" in written
