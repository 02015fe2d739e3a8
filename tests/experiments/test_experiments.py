"""The runner of benchmarks/ and experiments/: registries, pages generated from results and prose,
results read gzip-compressed, and the demo's claim ranges read from the demo_claims results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import runner
from benchmarks.registry import BENCHMARKS
from experiments import pages
from experiments.registry import EXPERIMENTS

ROOT = Path(__file__).resolve().parents[2]


def test_every_registered_entry_names_a_module_with_main_and_its_page() -> None:
    """Read from the source (importing every study would load all its dependencies)."""
    import ast

    for package, entries in (("benchmarks", BENCHMARKS), ("experiments", EXPERIMENTS)):
        for name, entry in entries.items():
            source = ROOT / Path(*entry.module.split(".")).with_suffix(".py")
            tree = ast.parse(source.read_text())
            assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body), name
            if entry.page:
                assert (ROOT / package / entry.page).is_file(), entry.page
    scripts = {p.stem for p in (ROOT / "benchmarks").glob("bench_*.py")} - {"bench_utils"}
    assert scripts <= set(BENCHMARKS)  # no speed benchmark left out of the registry


def test_list_and_an_unknown_name(capsys) -> None:
    assert runner.main("python -m experiments", EXPERIMENTS, ["list"]) == 0
    assert "leaderboard" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        runner.main("python -m benchmarks", BENCHMARKS, ["run", "nothing"])
    assert stop.value.code == 2 and "'nothing' is not registered" in capsys.readouterr().err


def test_run_passes_the_flags_through_and_adds_the_json_file(monkeypatch) -> None:
    seen = []
    fake = runner.Entry("json", "a module with main", json=True)
    monkeypatch.setattr("json.main", lambda argv: seen.append(argv) or 0, raising=False)
    assert runner.main("python -m benchmarks", {"x": fake}, ["run", "x", "--quick"]) == 0
    assert seen == [["--quick", "--json", str(Path("runs/benchmarks/x.json"))]]
    assert runner.main("python -m benchmarks", {"x": fake}, ["run", "x", "--help"]) == 0
    assert seen[-1] == ["--help"]  # the script's help, not the runner's
    assert runner.json_flags("benchmarks", "x", ["--no-write"]) == ["--no-write"]


def test_prose_blocks_and_tables_are_put_back_together() -> None:
    page = "# T\n\nwords\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nmore\n"
    prose, tables = pages.split_tables(page)
    assert "<!-- table: t -->" in prose and tables["t"]["rows"] == [["1", "2"]]
    assert pages.render_tables(prose, tables) == page
    with pytest.raises(KeyError, match="'other'"):
        pages.render_tables("<!-- table: other -->", tables)


TABLE_PAGES = sorted(
    {e.page for e in EXPERIMENTS.values() if e.write_page == "experiments.pages:tables_page"}
)


@pytest.mark.parametrize("page", TABLE_PAGES)
def test_a_tables_page_is_its_prose_and_its_results(page, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(pages, "HERE", tmp_path)
    written = pages.tables_page(page)
    assert written.read_text() == (ROOT / "experiments" / page).read_text()
    prose = (ROOT / "experiments" / "prose" / page).read_text()
    assert "<!-- table: " in prose and "\n|---" not in prose  # every number is in the results


def test_the_every_map_results_hold_its_tables() -> None:
    assert {"EVERY_MAP.md", "SANITY.md", "MEASUREMENTS.md"} <= set(TABLE_PAGES)
    results = json.loads((ROOT / "experiments" / "results" / "every_map.json").read_text())
    assert results["tables"]["test-split-three-seeds"]["rows"][0][0].startswith("test accuracy")


@pytest.mark.slow
def test_the_leaderboard_page_is_rebuilt_from_its_compressed_job_results(tmp_path) -> None:
    from experiments import leaderboard as lb
    from experiments.leaderboard_ensemble_report import page_lines
    from experiments.leaderboard_report import write_report

    meta = json.loads((pages.RESULTS / "leaderboard" / "page.json").read_text())
    jobs = pages.RESULTS / "leaderboard" / meta["jobs"]
    assert jobs.suffix == ".gz"
    results = lb.committed_results(tmp_path / "run")
    prose = pages.read_prose(pages.PROSE / "LEADERBOARD.md")
    ensemble = page_lines(pages.RESULTS / "leaderboard")
    page = write_report(results, tmp_path, images=tmp_path / "img", prose=prose, ensemble=ensemble)
    expected = (ROOT / "experiments" / "LEADERBOARD.md").read_text()
    assert page.read_text().replace("](img/", "](../docs/images/") == expected


def test_demo_claims_are_the_shipped_results_file() -> None:
    from experiments import demo_claims
    from robust_train.app import demo

    shipped = json.loads(demo.CLAIMS_FILE.read_text())
    assert demo.MEASURED_GAINS == shipped["gains"] and list(demo.MEASURED_SEEDS) == shipped["seeds"]
    assert demo.MEASURED_ACC_CHANGE == shipped["accuracy_change"]
    per_seed = [{"saliency": 0.45421, "accuracy": -0.011}, {"saliency": 0.53299, "accuracy": 0.0}]
    ranges = demo_claims.ranges(per_seed)
    assert ranges["saliency"] == {"mean": 0.4936, "min": 0.4542, "max": 0.533}
    assert ranges["accuracy"]["min"] <= -0.011 and ranges["accuracy"]["max"] >= 0.0
    claims = demo_claims.claims([0, 1], per_seed)
    assert set(claims) == set(shipped) and claims["seeds"] == [0, 1]
    with pytest.raises(ValueError, match="per_seed"):
        demo_claims.ranges([])
