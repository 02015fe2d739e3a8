"""The ensemble_maps experiment's results: every map on the images both models finished, beside
the random-map and "map = input" levels of the same images, with the members' cost summed over
the job chunks."""

from __future__ import annotations

import json

import pytest
import scipy.stats

from experiments import ensemble_maps as em

NAN = float("nan")


def _job(model: str, name: str, chunk: int, values: list[float], ref: list[float] | None = None):
    index = [10 * chunk + i for i in range(len(values))]
    per_image = {
        em.TOPK.format(m=name): values,
        em.RANDOM.format(m=name): [0.1 + 0.01 * i for i in index],
    }
    if ref is not None:
        per_image[em.REFERENCE] = ref
    members = [{"name": "k100", "worst_on": chunk + 1, "gradient_steps": 40, "maps": 40},
               {"name": "search", "worst_on": 1, "gradient_steps": 0, "maps": 7}]  # fmt: skip
    cost = {"members": members, "cpu_seconds": 3.0, "seconds": 3.0, "images": len(values),
            "gradient_steps_per_image": 40, "cpu_seconds_per_image": 3.0 / len(values)}  # fmt: skip
    return {"model": model, "explainer": name, "chunk": chunk, "index": index,
            "per_image": per_image, "cpu_seconds": 3.0, "attack_cost": {f"{name}/topk": cost},
            "settings": {"protocol": "x"}, "date": "d", "machine": "m"}  # fmt: skip


@pytest.fixture
def results(tmp_path):
    jobs = [
        _job("natural", "saliency", 0, [0.1, 0.2], ref=[0.6, 0.5]),
        _job("natural", "saliency", 1, [0.0, NAN], ref=[0.7, 0.6]),
        _job("robust", "saliency", 0, [0.7, 0.4], ref=[0.6, 0.5]),
        _job("robust", "saliency", 1, [0.5, 0.9], ref=[0.7, 0.6]),
        _job("natural", "grad_cam", 0, [0.0, 0.0]),
        _job("robust", "grad_cam", 0, [0.3, 0.6]),
        _job("robust", "grad_cam", 1, [0.9, 0.9]),  # the natural model has not finished it
        _job("robust", "lrp", 0, [0.8, 0.8]),  # nor this one
    ]
    for job in jobs:
        name = f"{job['model']}__{job['explainer']}__{job['chunk']:03d}.json"
        (tmp_path / name).write_text(json.dumps(job))
    return em.collect(tmp_path, tmp_path / "out.json")


def test_each_map_on_the_images_both_models_finished(results):
    rows = {row[0]: row for row in results["tables"]["maps"]["rows"]}
    assert set(rows) == {"saliency", "Grad-CAM"}  # LRP: no chunk finished by both
    assert rows["saliency"][1] == "4" and rows["Grad-CAM"][1] == "2"
    assert results["jobs"]["robust/grad_cam"]["index"] == [0, 1]
    assert results["jobs"]["robust/saliency"]["index"] == [0, 1, 10, 11]


def test_levels_beside_the_random_map_and_map_equals_input(results):
    rows = {row[0]: row for row in results["tables"]["maps"]["rows"]}
    robust = [0.7, 0.4, 0.5, 0.9]
    mean = sum(robust) / 4
    low, high = scipy.stats.t.interval(0.95, 3, loc=mean, scale=scipy.stats.sem(robust))
    assert rows["saliency"][3] == f"{mean:.3f} [{low:.3f}, {high:.3f}]"
    assert rows["saliency"][4].startswith("0.600 [")  # map = input on the same four images
    assert rows["saliency"][5].startswith(f"{(0.1 + 0.11 + 0.2 + 0.21) / 4:.3f}")
    # Above "map = input": robust 0.7 > 0.6, 0.4 < 0.5, 0.5 < 0.7, 0.9 > 0.6; the natural
    # model's unmeasured image is left out.
    assert rows["saliency"][6] == "0.500 (2/4)" and rows["saliency"][7] == "0.000 (0/3)"
    # Grad-CAM's reference is the saliency job's "map = input" on the same images.
    assert rows["Grad-CAM"][4].startswith("0.550 [") and rows["Grad-CAM"][6] == "0.500 (1/2)"


def test_cost_sums_the_chunks(results):
    cost = {(row[0], row[1]): row for row in results["tables"]["cost"]["rows"]}
    saliency = cost[("robust", "saliency")]
    assert saliency[2:6] == ["2", "1.5", "40", "7"]  # members, CPU s / image, steps, queries
    assert saliency[6] == "k100 3, search 2"  # 1 + 2 images, 1 + 1 images
    assert cost[("robust", "Grad-CAM")][6] == "k100 1, search 1"


def test_collect_refuses_an_empty_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="--runs"):
        em.collect(tmp_path, tmp_path / "out.json")


def test_merged_chunks_sum_the_search_starts_where_the_jobs_have_them():
    chunks = {c: _job("robust", "saliency", c, [0.5, 0.6]) for c in (0, 1)}
    for c, job in chunks.items():
        job["attack_cost"]["saliency/topk"]["members"][0]["best_before_search"] = c + 2
    members = em.merged(chunks, [0, 1])["attack_cost"]["saliency/topk"]["members"]
    assert members[0]["best_before_search"] == 5 and members[0]["worst_on"] == 3
    assert "best_before_search" not in members[1]  # older jobs: not invented
