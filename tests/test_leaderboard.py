"""benchmarks/leaderboard.py --quick: the whole pipeline on tiny sizes (sweep, seeds, test
evaluation, fine-tuning row, report and plot)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module():
    if "leaderboard" in sys.modules:
        return sys.modules["leaderboard"]
    path = ROOT / "benchmarks" / "leaderboard.py"
    spec = importlib.util.spec_from_file_location("leaderboard", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["leaderboard"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _report():
    _module()  # puts benchmarks/ on sys.path; the report imports the method table from it
    import leaderboard_report

    return leaderboard_report


def test_quick_leaderboard_writes_table_sweeps_and_plot(tmp_path: Path):
    lb = _module()
    assert (
        lb.main(["--quick", "--workers", "1", "--methods", "adversarial", "--out", str(tmp_path)])
        == 0
    )
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["failed"] == [] and results["skipped"] == []
    methods = sorted({(r["method"], r["seed"]) for r in results["rows"]})
    assert methods == [
        ("adversarial", 0),
        ("adversarial", 1),
        ("finetune", 0),
        ("finetune", 1),
        ("natural", 0),
        ("natural", 1),
    ]
    assert len(results["sweeps"]["adversarial"]) == 2
    assert results["best"] == "adversarial"
    for row in results["rows"]:
        assert 0.0 <= row["test"]["accuracy"] <= 1.0 and math.isfinite(row["final_loss"])
    text = (tmp_path / "LEADERBOARD.md").read_text()
    assert "QUICK SMOKE RUN" in text and "| adversarial | epsilon=" in text
    assert "| finetune (adversarial) |" in text and "## Weight sweeps" in text
    assert (tmp_path / "leaderboard_pareto.png").stat().st_size > 1000


def test_weight_rule_prefers_robustness_within_one_point():
    lb = _module()

    def run(acc: float, rob: float) -> dict:
        return {"val": {"accuracy": acc, "sal/topk/topk_intersection": rob}}

    runs = [run(0.97, 0.3), run(0.965, 0.5), run(0.90, 0.9)]
    assert lb.choose(runs, natural_val_acc=0.97) is runs[1]
    assert (
        lb.choose([run(0.8, 0.9), run(0.85, 0.1)], natural_val_acc=0.97)["val"]["accuracy"] == 0.85
    )
    assert (
        lb.choose([run(0.97, float("nan")), run(0.97, 0.2)], 0.97)["val"][
            "sal/topk/topk_intersection"
        ]
        == 0.2
    )


def test_quick_leaderboard_fine_tunes_from_each_seeds_natural_model(tmp_path: Path):
    """A fine-tuned method starts from the natural model of its own seed, is swept on val like
    the others, can be the shipped robust pick, and its cost counts the natural training."""
    lb = _module()
    assert (
        lb.main(
            [
                "--quick",
                "--workers",
                "1",
                "--methods",
                "finetune_smoothness",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["failed"] == [] and results["skipped"] == []
    natural = {r["seed"]: r["ckpt"] for r in results["rows"] if r["method"] == "natural"}
    tuned = [r for r in results["rows"] if r["method"] == "finetune_smoothness"]
    assert sorted(r["seed"] for r in tuned) == [0, 1]
    for r in tuned:
        assert r["init"] == natural[r["seed"]] and r["epochs"] == results["plan"]["finetune_epochs"]
    assert len(results["sweeps"]["finetune_smoothness"]) == len(
        lb.METHODS["finetune_smoothness"][3]
    )
    assert all(r["init"] == natural[0] for r in results["sweeps"]["finetune_smoothness"])
    # No method trained from scratch: no generic fine-tuning row; the pick is the fine-tuned one.
    assert results["best"] is None and results["robust"] == "finetune_smoothness"
    row = next(
        r
        for r in _report().table_rows(
            {**results, "step_ms": {"natural": 10.0, "finetune_smoothness": 50.0}}
        )
        if r["method"] == "finetune_smoothness"
    )
    plan = results["plan"]
    assert row["cost"] == pytest.approx(1 + plan["finetune_epochs"] / plan["epochs"] * 5.0)
