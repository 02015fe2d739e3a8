"""The ensemble_maps experiment's LENS table: each map's LENS under the ensemble beside LENS's own
chance levels (a random map's, "map = input"'s on the same images), and no table from jobs that
never kept LENS."""

from __future__ import annotations

import json

import scipy.stats

from experiments import ensemble_maps as em


def _job(model: str, name: str, lens: list[float], ref: list[float] | None = None) -> dict:
    index = list(range(len(lens)))
    per_image = {
        em.TOPK.format(m=name): [v / 2 for v in lens],
        em.RANDOM.format(m=name): [0.1] * len(lens),
        em.LENS.format(m=name): lens,
        em.RANDOM_LENS.format(m=name): [0.25 + 0.01 * i for i in index],
    }
    if ref is not None:
        per_image[em.REFERENCE] = [v / 2 for v in ref]
        per_image[em.REFERENCE_LENS] = ref
    members = [{"name": "search", "worst_on": 1, "gradient_steps": 0, "maps": 7}]
    cost = {"members": members, "cpu_seconds": 1.0, "seconds": 1.0, "images": len(lens),
            "gradient_steps_per_image": 0, "cpu_seconds_per_image": 1.0}  # fmt: skip
    return {"model": model, "explainer": name, "chunk": 0, "index": index,
            "per_image": per_image, "cpu_seconds": 1.0, "attack_cost": {f"{name}/topk": cost},
            "settings": {}, "date": "d", "machine": "m"}  # fmt: skip


def _collect(tmp_path, jobs):
    for job in jobs:
        (tmp_path / f"{job['model']}__{job['explainer']}__000.json").write_text(json.dumps(job))
    return em.collect(tmp_path, tmp_path / "out.json")["tables"]


def test_lens_levels_stand_beside_their_own_chance_levels(tmp_path):
    ref = [0.9, 0.8, 0.7]
    tables = _collect(tmp_path, [
        _job("natural", "saliency", [0.2, 0.3, 0.1], ref),
        _job("robust", "saliency", [0.95, 0.7, 0.8], ref),
        _job("natural", "grad_cam", [0.0, 0.0, 0.0]),
        _job("robust", "grad_cam", [0.4, 0.9, 0.5]),
    ])  # fmt: skip
    rows = {row[0]: row for row in tables["lens"]["rows"]}
    robust = [0.95, 0.7, 0.8]
    mean = sum(robust) / 3
    low, high = scipy.stats.t.interval(0.95, 2, loc=mean, scale=scipy.stats.sem(robust))
    assert rows["saliency"][3] == f"{mean:.3f} [{low:.3f}, {high:.3f}]"
    assert rows["saliency"][4].startswith("0.800 [")  # "map = input"'s LENS, not its top-k
    assert rows["saliency"][5].startswith("0.260 [")  # the random map's LENS
    # 0.95 > 0.9, 0.7 < 0.8, 0.8 > 0.7; Grad-CAM against the saliency job's reference.
    assert rows["saliency"][6] == "0.667 (2/3)" and rows["saliency"][7] == "0.000 (0/3)"
    assert rows["Grad-CAM"][6] == "0.333 (1/3)"
    columns = " ".join(tables["lens"]["columns"])
    assert "random map" in columns and "map = input" in columns


def test_no_lens_table_from_jobs_without_lens(tmp_path):
    jobs = [_job("natural", "saliency", [0.2, 0.3], [0.9, 0.8]),
            _job("robust", "saliency", [0.9, 0.7], [0.9, 0.8])]  # fmt: skip
    for job in jobs:
        del job["per_image"][em.LENS.format(m="saliency")]
    assert "lens" not in _collect(tmp_path, jobs)
