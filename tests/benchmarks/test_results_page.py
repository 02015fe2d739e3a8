"""benchmarks/RESULTS.md is generated from the records in benchmarks/results/, and a run stores
its record there: a full run replaces its benchmark's record, a --quick run leaves the committed
records alone."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import bench_utils as bu
from benchmarks import pages
from benchmarks.__main__ import main as benchmarks_main
from benchmarks.registry import BENCHMARKS


def test_the_committed_page_is_its_records_rendered():
    """Byte for byte: `python -m benchmarks page` rewrites the committed page unchanged."""
    records = pages.read_records(pages.RESULTS_DIR)
    assert records, "no records in benchmarks/results/"
    expected = pages.render_page(records, pages.registry_order())
    assert pages.PAGE.read_text() == expected, "run `python -m benchmarks page` and commit"
    for name, record in records.items():  # one record per registered benchmark, full runs only
        assert not record["quick"], name
        device = record.get("device", "cpu")
        assert name not in BENCHMARKS or pages.record_name(record["title"], device) == name


def _run(tmp_path, title: str, flags: list[str], section: str) -> str:
    args = bu.base_parser("x").parse_args(flags)
    record = bu.Record(title, args, torch.device("cpu"), flags)
    record.add(section)
    return record.finish()


def test_a_full_run_replaces_its_record_and_the_page_keeps_registry_order(tmp_path):
    page = tmp_path / "RESULTS.md"
    order = pages.registry_order()
    first, second = order[0], order[1]
    _run(tmp_path, second, ["--results", str(page)], "old table")
    _run(tmp_path, first, ["--results", str(page)], "first's table")
    text = _run(tmp_path, second, ["--results", str(page)], "new table")
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == sorted(
        [f"{first}.json", f"{second}.json"]
    )
    written = page.read_text()
    assert written.startswith(pages.HEADER) and written.endswith(text)
    assert "old table" not in written and written.count(f"## {second} — ") == 1
    assert written.index(f"## {first} — ") < written.index(f"## {second} — ")
    stored = json.loads((tmp_path / "results" / f"{second}.json").read_text())
    assert stored["sections"] == ["new table"] and not stored["quick"]
    assert pages.render_record(stored) == text
    gpu = {**stored, "device": "cuda", "sections": ["gpu table"]}
    assert pages.save_record(gpu, page) == tmp_path / "results" / f"{second}_cuda.json"
    written = page.read_text()  # the GPU record beside the CPU one, which stays
    assert written.index(f"## {second} — ") < written.index(f"## {second} on cuda — ")
    assert "new table" in written and written.endswith("gpu table\n")
    missing = [n for n in order if n not in (first, second)]
    assert "No full run recorded: " + ", ".join(f"`{n}`" for n in missing) + "." in written


def test_a_quick_run_never_touches_the_committed_results(tmp_path, monkeypatch, capsys):
    committed = tmp_path / "committed" / "RESULTS.md"
    monkeypatch.setattr(pages, "PAGE", committed)
    _run(tmp_path, "bench_x", ["--quick"], "table")
    _run(tmp_path, "bench_x", ["--quick", "--results", str(committed)], "table")
    assert not committed.parent.exists()
    assert "--quick: the committed results are left as they are" in capsys.readouterr().out
    _run(tmp_path, "bench_x", ["--quick", "--results", str(tmp_path / "R.md")], "table")
    assert "## bench_x (quick) — " in (tmp_path / "R.md").read_text()
    _run(tmp_path, "bench_y", ["--no-write", "--results", str(tmp_path / "R.md")], "table")
    assert not (tmp_path / "results" / "bench_y.json").exists()


def test_the_page_command_rewrites_a_page_from_its_records(tmp_path, capsys):
    page = tmp_path / "RESULTS.md"
    _run(tmp_path, "bench_x", ["--results", str(page)], "table")
    page.write_text("edited by hand\n")
    assert benchmarks_main(["page", "--page", str(page)]) == 0
    assert page.read_text().endswith("table\n") and page.read_text().startswith("# Benchmark")
    with pytest.raises(SystemExit) as stop:
        benchmarks_main(["page", "--page", str(tmp_path / "elsewhere" / "RESULTS.md")])
    assert stop.value.code == 2
    assert "argument --page: no records folder" in capsys.readouterr().err
