"""experiments/baselines.py: job order, resume from stored job results, and the page's means over
the images every model measured (the same images for every row), from job files written here."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from experiments import baselines as bl


def _job(out: Path, row: str, explainer: str, values: list[float | None], acc: float) -> None:
    keys = [f"attack/{explainer}/{a}/{m}" for a, m, _ in bl.COLUMNS]
    if row == "natural/s0" and explainer == bl.MAPS[0]:
        keys += [f"attack/input_reference/{a}/{m}" for a, m, _ in bl.COLUMNS]
    job = {
        "row": row, "explainer": explainer, "indices": [5, 6, 7], "n_images": 3,
        "cpu_s": 6.0, "accuracy": acc, "measures": {},
        "per_image": {k: values for k in keys},
    }  # fmt: skip
    (out / "jobs" / f"{bl._job_id(row, explainer)}.json").write_text(json.dumps(job))


def _folder(tmp_path: Path) -> Path:
    (tmp_path / "jobs").mkdir()
    meta = {"chosen": {"natural": None, "adversarial": 0.05, "gaussian_noise": 0.12},
            "indices": [5, 6, 7]}  # fmt: skip
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    return tmp_path


def test_order_puts_seed_zero_and_the_shipped_pair_first_on_every_map():
    order = bl.rows_in_order()
    assert len(order) == len(bl.MAPS) * (len(bl.SHIPPED) + len(bl.METHODS) * len(bl.SEEDS))
    first = len(bl.SHIPPED) + len(bl.METHODS)
    assert {ex for _, ex in order[:first]} == {"saliency"}
    assert {ex for _, ex in order[first : 2 * first]} == {"grad_cam"}
    assert all(row.endswith("/s0") or row in bl.SHIPPED for row, _ in order[: 2 * first])
    assert all(not row.endswith("/s0") for row, _ in order[2 * first :])


def test_a_restarted_run_skips_the_stored_jobs(tmp_path):
    out = _folder(tmp_path)
    assert len(bl.pending(out)) == len(bl.rows_in_order())
    _job(out, "shipped robust", "saliency", [0.5, 0.6, 0.7], 0.97)
    todo = bl.pending(out)
    assert ("shipped robust", "saliency") not in todo
    assert len(todo) == len(bl.rows_in_order()) - 1


def test_every_row_is_averaged_over_the_images_all_models_measured(tmp_path):
    out = _folder(tmp_path)
    _job(out, "natural/s0", "saliency", [0.1, 0.2, 0.3], 0.97)
    _job(out, "natural/s1", "saliency", [0.3, None, 0.5], 0.96)  # image 6 not measured
    _job(out, "shipped robust", "saliency", [0.5, 0.9, 0.7], 0.98)
    table = bl.tables(out)["main"]
    rows = {r[0]: r for r in table["rows"]}
    col = table["columns"].index("saliency top-k ∩ ensemble")
    natural = [statistics.mean([0.1, 0.3]), statistics.mean([0.3, 0.5])]  # images 5 and 7
    expected = f"{statistics.mean(natural):.3f} ± {statistics.stdev(natural):.3f} (2 of 3)"
    assert rows["natural"][col] == expected
    assert rows["shipped robust"][col] == "0.600 (1 model)"  # not 0.7: image 6 left out
    assert rows["adversarial"][col] == "not run"
    assert rows["natural"][2] == f"{statistics.mean([0.97, 0.96]):.3f} ± 0.007 (2 of 3)"
    assert rows["natural"][col + 3] == "not run"  # Grad-CAM: no job
    assert rows["map = input (reference)"][col] == "0.200 (1 model)"
    assert rows["images (every row)"][col] == "2"
    assert rows["images (every row)"][table["columns"].index("grad_cam LENS ensemble")] == "0"
    assert rows["gaussian_noise"][1] == "sigma=0.12" and rows["adversarial"][1] == "epsilon=0.05"
