"""The random map's LENS level beside the leaderboard's cheap-protocol table: measured per image
on the table's own models (experiments/leaderboard_chance.py), averaged over each column's
common images, and refused on a model that is not the one a job measured."""

from __future__ import annotations

import gzip
import json
import statistics

import pytest

from experiments import leaderboard_chance as chance
from experiments import leaderboard_report as report
from experiments.chance import random_topk_expectation

KEY = "attack/lrp/topk/lens_topk"


def _results(levels: dict[int, list], attacked: dict[int, list]) -> dict:
    jobs = [{"kind": "eval", "method": "natural", "seed": s, "group": "lrp",
             "id": f"eval_lrp_natural_s{s}",
             "test": {"indices": [4, 7, 9], "per_image": {KEY: attacked[s]}}}
            for s in attacked]  # fmt: skip
    stored = {f"eval_lrp_natural_s{s}": {"indices": [4, 7, 9], "fragility/lrp/random_lens": v}
              for s, v in levels.items()}  # fmt: skip
    return {"names": ["natural", "adversarial"], "chosen": {"natural": None}, "jobs": jobs,
            "chance": {"levels": stored}}  # fmt: skip


def test_the_measured_cell_is_over_the_columns_common_images_then_the_models() -> None:
    attacked = {0: [0.5, None, 0.4], 1: [0.6, 0.7, float("nan")], 2: [0.1, 0.2, 0.3]}
    levels = {0: [0.30, 0.99, 0.99], 1: [0.20, None, 0.99], 2: [0.40, 0.5, 0.6]}
    # image 4 alone is measured by every model: its levels 0.3, 0.2, 0.4
    want = f"{statistics.mean([0.3, 0.2, 0.4]):.3f} ± {statistics.stdev([0.3, 0.2, 0.4]):.3f}"
    assert report.measured_random_cell(_results(levels, attacked), "lrp", KEY) == want
    assert report.measured_random_cell(_results(levels, attacked), "lrp", "accuracy") is None
    levels[1][0] = None  # a model without a level on a common image: no measured cell
    assert report.measured_random_cell(_results(levels, attacked), "lrp", KEY) is None
    del levels[2]  # a model of the column with no stored levels at all
    levels[1][0] = 0.2
    assert report.measured_random_cell(_results(levels, attacked), "lrp", KEY) is None
    no_file = {**_results(levels, attacked), "chance": None}
    assert report.measured_random_cell(no_file, "lrp", KEY) is None
    assert report.random_label(measured=False) == report.random_label()
    assert "LENS: measured" in report.random_label(measured=True)


def test_the_stored_levels_cover_every_map_job_and_their_topk_level_is_k_over_n() -> None:
    """Every map job of the page's job file has a level on each of its images (None only where
    its attack measured nothing), and the seeded random maps' top-k level, measured beside the
    LENS one, averages the expectation k/N on every job (16 draws x 200 images)."""
    meta = json.loads((chance.FOLDER / "page.json").read_text())
    stored = json.loads((chance.FOLDER / meta["chance"]).read_text())
    jobs = chance.map_jobs(chance.FOLDER / meta["jobs"])
    assert stored["jobs_file"] == meta["jobs"] and {j["id"] for j in jobs} == set(stored["levels"])
    k_over_n = random_topk_expectation(100, 784)
    for job in jobs:
        got, m = stored["levels"][job["id"]], job["group"]
        assert got["indices"] == job["test"]["indices"]
        lens, topk = got[f"fragility/{m}/random_lens"], got[f"fragility/{m}/random_topk"]
        attacked = job["test"]["per_image"][f"attack/{m}/topk/lens_topk"]
        assert all(v is not None for v, a in zip(lens, attacked, strict=True) if a is not None)
        values = [v for v in topk if v is not None]
        assert statistics.mean(values) == pytest.approx(k_over_n, abs=0.01), job["id"]
        assert all(t <= v for t, v in zip(topk, lens, strict=True) if v is not None)


def test_a_model_that_is_not_the_jobs_is_refused() -> None:
    """The identity check of the stored job's model: its first correct images and accuracy."""
    path = chance.FOLDER / json.loads((chance.FOLDER / "page.json").read_text())["jobs"]
    with gzip.open(path, "rt") as f:
        job = next(j for line in f if (j := json.loads(line)).get("id") == "eval_lrp_natural_s0")
    test = job["test"]
    n = round(test["accuracy"] * 1000)
    rest = [i for i in range(1000) if i not in set(test["indices"])]
    correct = sorted([*test["indices"], *rest[-(n - len(test["indices"])) :]])
    assert chance.is_the_jobs_model(correct, 1000, test)
    assert not chance.is_the_jobs_model(correct[:-1], 1000, test)  # one image fewer correct
    swapped = sorted([*correct[1:], rest[0]])  # its first image wrong, another right
    assert not chance.is_the_jobs_model(swapped, 1000, test)
