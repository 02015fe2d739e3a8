"""python -m benchmarks.leaderboard --quick: the whole pipeline on tiny sizes (sweep, seeds, test
evaluation, fine-tuning row, report and plot), and the weight rule of leaderboard_methods."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks import leaderboard as lb
from benchmarks import leaderboard_methods as methods
from benchmarks import leaderboard_report as report


def test_quick_leaderboard_writes_table_sweeps_and_plot(tmp_path: Path):
    assert (
        lb.main(["--quick", "--workers", "1", "--methods", "adversarial", "--out", str(tmp_path)])
        == 0
    )
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["failed"] == [] and results["skipped"] == []
    assert all(isinstance(r["test"], dict) and "accuracy" in r["test"] for r in results["rows"])
    assert all("test" not in r for r in results["sweeps"]["adversarial"])  # swept: val only
    rows = sorted({(r["method"], r["seed"]) for r in results["rows"]})
    assert rows == [
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
    # Notes written by hand below the marker survive a rewrite of the same run's report, and
    # are dropped for another run's.
    page = tmp_path / "LEADERBOARD.md"
    marker = report.hand_written_marker(results)
    assert marker in text and text.rstrip().endswith(marker)
    page.write_text(text + "\n## Findings\n\n- seen by hand\n")
    assert lb.main(["--report", str(tmp_path), "--md", str(tmp_path)]) == 0
    rewritten = page.read_text()
    assert rewritten.count(marker) == 1 and rewritten.endswith("- seen by hand\n")
    assert "| finetune (adversarial) |" in rewritten
    report.write_report({**results, "out": "elsewhere"}, tmp_path, quick=True)
    assert "seen by hand" not in page.read_text()


def test_jobs_say_whether_to_test_and_results_hold_the_test_metrics():
    """A job's `run_test` (bool) and a result's `test` (metrics) are distinct names; a result
    rebuilds the job that made it; the method table is read by field."""
    plan = methods.quick_plan()
    job = methods.TrainJob(
        id="gradnorm_weight1_s0", method="gradnorm", penalty="gradnorm", seed=0, plan=plan,
        out="/tmp", epochs=1, kwargs={"weight": 1.0}, value=1.0, run_test=True,
    )  # fmt: skip
    row = job.record()
    assert row["run_test"] is True and "test" not in row and "plan" not in row
    result = {**row, "seconds": 1.0, "test": {"accuracy": 0.5}}
    again = methods.TrainJob.of(result, plan, id="gradnorm_chosen_s1", seed=1)
    assert (again.seed, again.kwargs, again.run_test, again.plan) == (
        1,
        {"weight": 1.0},
        True,
        plan,
    )
    with pytest.raises(AttributeError):
        methods.METHODS["gradnorm"].values = (3.0,)  # frozen
    assert methods.FINETUNED == {n for n, m in methods.METHODS.items() if m.finetuned}
    assert methods.METHODS["adversarial"].record()["values"] == [0.1, 0.3]  # JSON: a list


def test_weight_rule_prefers_robustness_within_one_point():

    def run(acc: float, rob: float) -> dict:
        return {"val": {"accuracy": acc, "sal/topk/topk_intersection": rob}}

    runs = [run(0.97, 0.3), run(0.965, 0.5), run(0.90, 0.9)]
    assert methods.choose(runs, natural_val_acc=0.97) is runs[1]
    assert (
        methods.choose([run(0.8, 0.9), run(0.85, 0.1)], natural_val_acc=0.97)["val"]["accuracy"]
        == 0.85
    )
    assert (
        methods.choose([run(0.97, float("nan")), run(0.97, 0.2)], 0.97)["val"][
            "sal/topk/topk_intersection"
        ]
        == 0.2
    )


def test_weight_rule_allows_for_the_noise_of_the_val_split():
    natural = [1] * 500

    def run(n_wrong: int, rob: float) -> dict:
        correct = [0] * n_wrong + [1] * (500 - n_wrong)
        return {
            "val": {"accuracy": sum(correct) / 500, "correct": correct},
            "sal/topk/topk_intersection": rob,
        }

    # 8 more errors (1.6 points) is within 1 point + 1.645 paired standard errors; 12 (2.4) not.
    for n_wrong, expected in ((5, True), (8, True), (12, False), (20, False)):
        r = run(n_wrong, 0.5)
        d = np.array(natural) - np.array(r["val"]["correct"])
        margin = 0.01 + 1.645 * d.std(ddof=1) / np.sqrt(d.size)
        assert bool(n_wrong / 500 <= margin) is expected
        assert methods.eligible(r, 1.0, natural) is expected
        assert methods.eligible(r, 1.0) is (n_wrong <= 5)  # no per-image results: exactly 1 point
    # identical per-image results: no noise allowance beyond the point
    same = {"val": {"accuracy": 0.96, "correct": [1] * 480 + [0] * 20}}
    assert not methods.eligible(same, 0.975, [1] * 480 + [0] * 20)
    runs = [run(4, 0.3), run(8, 0.6), run(12, 0.9)]
    for r in runs:
        r["val"]["sal/topk/topk_intersection"] = r.pop("sal/topk/topk_intersection")
    assert methods.choose(runs, 1.0, natural) is runs[1]
    assert methods.choose(runs, 1.0) is runs[0]


def test_quick_leaderboard_fine_tunes_from_each_seeds_natural_model(tmp_path: Path):
    """A fine-tuned method starts from the natural model of its own seed, is swept on val like
    the others, can be the shipped robust pick, and its cost counts the natural training."""
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
        methods.METHODS["finetune_smoothness"].values
    )
    assert all(r["init"] == natural[0] for r in results["sweeps"]["finetune_smoothness"])
    # No method trained from scratch: no generic fine-tuning row; the pick is the fine-tuned one.
    assert results["best"] is None and results["robust"] == "finetune_smoothness"
    row = next(
        r
        for r in report.table_rows(
            {**results, "step_ms": {"natural": 10.0, "finetune_smoothness": 50.0}}
        )
        if r["method"] == "finetune_smoothness"
    )
    plan = results["plan"]
    assert row["cost"] == pytest.approx(1 + plan["finetune_epochs"] / plan["epochs"] * 5.0)


def test_pareto_labels_overlap_neither_each_other_nor_the_axes_edge():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    # crowded points, one at the right edge (where a label to its right would be cut off)
    points = [(1.0, 0.0), (2.4, 0.04), (2.6, 0.05), (2.7, 0.06), (4.2, 0.09), (4.8, 0.08)]
    points += [(25.0, 0.16)]
    ax.scatter(*zip(*points, strict=True))
    ax.set_xscale("log")
    fig.tight_layout()
    items = [(x, y, f"method_{i} (acc 0.970)") for i, (x, y) in enumerate(points)]
    report._place_labels(fig, ax, items)
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    assert len(boxes) == len(points)
    inside = ax.get_window_extent(renderer)
    for i, box in enumerate(boxes):
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1 + 0.5, ax.texts[i].get_text()
        for other in boxes[i + 1 :]:
            assert not box.overlaps(other)
    plt.close(fig)
