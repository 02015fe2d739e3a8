"""The leaderboard's columns: every model of a column (each method and seed) measured on the same
test images, their count printed under the table; blank-map and Grad-CAM fidelity columns; cached
results without per-image values still load (each model's own images, marked `own`); a changed
measure makes exactly the jobs it changes stale."""

from __future__ import annotations

import math

import torch

from experiments import leaderboard as lb
from experiments import leaderboard_methods as methods
from experiments import leaderboard_report as report

KEY = "attack/grad_cam/topk/topk_intersection"


def _results(per_image: bool) -> dict:
    """Two methods x two seeds; the grad_cam group's tests attack different test images."""
    tests = {
        ("natural", 0): ([0, 1, 2, 3], [0.1, None, 0.3, 0.4]),
        ("natural", 1): ([0, 1, 2, 4], [0.2, 0.2, 0.2, 0.9]),
        ("gradnorm", 0): ([1, 2, 3, 4], [0.5, 0.6, 0.7, 0.8]),
        ("gradnorm", 1): ([0, 2, 3, 4], [0.0, 1.0, None, 1.0]),
    }
    jobs = []
    for (method, seed), (indices, values) in tests.items():
        finite = [v for v in values if v is not None]
        test = {"accuracy": 0.9, "n_images": 4, KEY: sum(finite) / len(finite)}
        test["fragility/grad_cam/blank_map"] = 0.25
        if per_image:
            test["indices"], test["per_image"] = indices, {KEY: values}
        jobs.append(
            {"kind": "eval", "method": method, "seed": seed, "group": "grad_cam", "test": test}
        )
        jobs.append({"kind": "fit", "method": method, "seed": seed, "seconds": 1.0,
                     "final_loss": 0.1, "cpu_s": 1.0})  # fmt: skip
    return {
        "names": ["natural", "gradnorm"],
        "chosen": {"natural": None, "gradnorm": 1.0},
        "plan": {**vars(methods.quick_plan()), "seeds": [0, 1]},
        "jobs": jobs,
    }


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_a_column_compares_every_model_on_the_images_all_of_them_measured() -> None:
    cells = report.column_cells(_results(per_image=True))[("grad_cam", KEY)]
    # measured everywhere: image 2 only (0: gradnorm s0 lacks it, 1: natural s0 NaN, 3, 4 ...)
    assert cells[("images", 0)] == 1
    assert cells[("natural", 0)] == 0.3 and cells[("natural", 1)] == 0.2
    assert cells[("gradnorm", 0)] == 0.6 and cells[("gradnorm", 1)] == 1.0
    rows = {r["method"]: r for r in report.table_rows(_results(per_image=True))}
    column = [k for _, k, _, _ in report.columns({})].index(KEY)
    assert rows["natural"]["cells"][column] == "0.250 ± 0.071"
    lines = report._table_lines(_results(per_image=True))
    counts = _cells(next(line for line in lines if line.startswith("| images (every model) |")))
    assert counts[2:4] == ["-", "-"]  # accuracy and saliency: no saliency job here
    heads = [h for _, _, h, _ in report.columns({})]
    assert "Grad-CAM fidelity" in heads and "Grad-CAM blank" in heads and "LRP blank" in heads
    assert counts[2 + heads.index("Grad-CAM top-k ∩ attack")] == "1"
    assert counts[2 + heads.index("Grad-CAM blank")] == "own"


def test_results_stored_without_per_image_values_still_load_with_their_own_images() -> None:
    old = _results(per_image=False)
    cells = report.column_cells(old)[("grad_cam", KEY)]
    assert cells[("images", 0)] == -1
    assert math.isclose(cells[("gradnorm", 0)], 0.65)  # the stored mean
    lines = report._table_lines(old)
    counts = _cells(next(line for line in lines if line.startswith("| images (every model) |")))
    heads = [h for _, _, h, _ in report.columns({})]
    assert counts[2 + heads.index("Grad-CAM top-k ∩ attack")] == "own"


def test_eval_jobs_record_each_images_value() -> None:
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3), torch.nn.Softplus(),
                                torch.nn.Linear(3, 3))  # fmt: skip
    x, y = torch.rand(4, 1, 8, 8), torch.tensor([0, 1, 2, 0])
    settings = lb.attack_settings(methods.quick_plan(), ("saliency",), "test", 4)
    settings = type(settings)(**{**vars(settings), "k": 8, "measure_k": 8})
    out = lb._measures(model, x, y, settings)
    values = out["per_image"]["attack/saliency/topk/topk_intersection"]
    assert len(values) == 4 and all(v is None or 0 <= v <= 1 for v in values)
    assert "n_attacked" not in out["per_image"]  # counts are not per-image means


def test_a_changed_measure_makes_the_jobs_it_changes_stale() -> None:
    job = methods.Job
    assert job("eval", "e", "natural", group="fidelity").settings()["measure_version"] == 3
    assert job("cv", "c", "finetune_smoothness", value=10.0).settings()["measure_version"] == 2
    assert job("cv", "c", "finetune_lrp", value=10.0).settings()["measure_version"] == 3
    fit = job("fit", "f", "finetune_grad_cam", value=10.0).settings()
    assert fit["explainer_layer"] == "features.5"  # the Grad-CAM penalty's layer
    assert "explainer_layer" not in job("fit", "f", "gradnorm", value=3.0).settings()
