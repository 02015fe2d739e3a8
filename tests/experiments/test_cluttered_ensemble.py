"""The cluttered page under the attack ensemble: the ensemble keeps the 64 x 64 image's k and a
step scaled to the 8/255 budget (not the MNIST protocol's), its fine-tunes are judged against the
natural model measured by the same protocol, and the random map's chance level stands beside."""

from __future__ import annotations

import argparse
import json

from experiments import cluttered
from experiments.cluttered import EPSILON, EXPLAINERS, settings_for, table_rows, targets_table
from robust_train.attacks.options import default_step_size
from robust_train.evaluation import PROTOCOLS


def args(protocol: str, **extra: object) -> argparse.Namespace:
    given = {"protocol": protocol, "epsilon": EPSILON, "explainers": list(EXPLAINERS)}
    return argparse.Namespace(**{**given, "images": 10, **extra})


def test_the_ensemble_keeps_the_image_size_k_and_a_step_scaled_to_the_budget():
    fast = settings_for(args("fast"), "cnn").resolved(64, 64)
    ensemble = settings_for(args("ensemble"), "cnn").resolved(64, 64)
    assert PROTOCOLS["ensemble"].attack.k == 100  # MNIST's, what the page must not use
    assert ensemble.ensemble and not fast.ensemble
    assert ensemble.attack.k == ensemble.attack.measure_k == fast.attack.k == 64 * 64 // 8
    assert ensemble.attack.epsilon == fast.attack.epsilon == EPSILON
    assert ensemble.attack.step_size == default_step_size(EPSILON, 40)
    assert ensemble.attack.n_restarts == 3 and ensemble.search_queries == 1000
    assert fast.attack.step_size == default_step_size(EPSILON, fast.attack.n_steps)


def result(label: str, protocol: str, sal: float, **extra: object) -> dict:
    r = {
        "label": label,
        "stamp": {"explainers": list(EXPLAINERS), "protocol": protocol, "images": 10},
        "accuracy": 0.86,
        "n_attacked": 8,
        "mask_area": 0.06,
        "attack/saliency/topk/topk_intersection": sal,
        "attack/grad_cam/topk/topk_intersection": 0.9,
        "attack/input_reference/topk/topk_intersection": 0.1,
    }
    return {**r, **extra}


def named(table: dict) -> list[dict]:
    """The rows of a page table as {column: cell}."""
    return [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]


def test_an_ensemble_fine_tune_is_judged_against_the_ensemble_natural_model():
    rows = targets_table(
        [
            result("cnn/natural", "fast", 0.2),
            result("cnn/natural", "ensemble", 0.05),
            result("cnn/tuned", "ensemble", 0.32),  # +0.27 on the ensemble's natural, not fast's
            result("cnn/tuned", "fast", 0.46),
            result("vgg_bn/tuned", "ensemble", 0.9),  # no ensemble natural VGG-BN: no row
            result("vgg_bn/natural", "fast", 0.1),
        ]
    )
    assert [(r[0], r[2]) for r in rows["rows"]] == [
        ("cnn/tuned", "fast, first 10 images"),
        ("cnn/tuned", "ensemble, first 10 images"),
    ]
    fast, ensemble = named(rows)
    assert fast["saliency top-k >= natural + 0.25"] == "yes"  # 0.46 vs 0.2
    assert ensemble["saliency top-k >= natural + 0.25"] == "yes"  # 0.32 vs 0.05
    assert ensemble["accuracy within 1 point"] == "yes" and ensemble["cost <= 2x"] == "-"
    lower = targets_table([result("cnn/natural", "fast", 0.2), result("cnn/t", "ensemble", 0.3)])
    assert lower["rows"] == []  # never against another protocol's natural model


def test_the_random_map_stands_beside_each_map_and_not_map_equals_input():
    measured = result("cnn/natural", "ensemble", 0.2, **{"fragility/saliency/random_topk": 0.1249})
    tables = table_rows([measured])
    rows = {r["map"]: r for r in named(tables["measures"])}
    assert rows["saliency"]["top-k of a random map"] == "0.125"
    assert rows["grad_cam"]["top-k of a random map"] == "-"  # not measured
    assert rows["map = input"]["top-k of a random map"] == "-"


def test_the_table_command_puts_the_other_runs_rows_with_their_fit_cost(tmp_path, monkeypatch):
    fast, fast10, ensemble = tmp_path / "fast", tmp_path / "fast10", tmp_path / "ensemble"
    jobs = {
        fast: [
            result("cnn/natural", "fast", 0.2, images=40),
            result("cnn/tuned", "fast", 0.5, images=40),
        ],
        fast10: [result("cnn/natural", "fast", 0.2), result("cnn/tuned", "fast", 0.4)],
        ensemble: [result("cnn/natural", "ensemble", 0.1), result("cnn/tuned", "ensemble", 0.2)],
    }
    for folder, results in jobs.items():
        (folder / "jobs").mkdir(parents=True)
        for r in results:
            if "images" in r:  # the fast runs on 40 images
                r["stamp"]["images"] = r.pop("images")
            (folder / "jobs" / (r["label"].replace("/", "_") + ".json")).write_text(json.dumps(r))
    times = tmp_path / "times.json"
    times.write_text(json.dumps({"cnn/natural": 400.0, "cnn/tuned": 100.0}))
    monkeypatch.setattr(cluttered, "RESULTS", tmp_path)
    others = ["--ensemble-out", str(fast10), str(ensemble)]
    cluttered.main(["table", "--out", str(fast), "--fit-times", str(times), *others])
    tables = json.loads((tmp_path / "cluttered.json").read_text())["tables"]
    targets = named(tables["targets"])
    protocols = ["fast, first 40 images", "fast, first 10 images", "ensemble, first 10 images"]
    assert [t["protocol"] for t in targets] == protocols
    assert [t["cost <= 2x"] for t in targets] == ["yes"] * 3  # (400 + 100) / 400 for each
    saliency = [t["saliency top-k >= natural + 0.25"] for t in targets]
    assert saliency == ["yes", "no", "no"]  # 0.5 vs 0.2, 0.4 vs 0.2, 0.2 vs 0.1 (its own run's)
    rows = named(tables["ensemble"])
    assert [(r["model"], r["protocol"], r["map"]) for r in rows][:4] == [
        ("cnn/natural", "fast, first 10 images", "saliency"),
        ("cnn/natural", "fast, first 10 images", "grad_cam"),
        ("cnn/natural", "fast, first 10 images", "map = input"),
        ("cnn/natural", "ensemble, first 10 images", "saliency"),
    ]
    assert rows[3]["top-k under attack"] == "0.100" and len(rows) == 12


def test_each_seed_is_compared_with_the_natural_model_of_its_seed():
    with_fits = [
        {**result("cnn/natural", "fast", 0.2), "fit_cpu_seconds": 400.0},
        {**result("cnn/natural_s1", "fast", 0.6), "fit_cpu_seconds": 500.0},
        {**result("cnn/tuned", "fast", 0.5), "fit_cpu_seconds": 100.0},
        {**result("cnn/tuned_s1", "fast", 0.5), "fit_cpu_seconds": 100.0},
    ]
    targets = {t["model"]: t for t in named(targets_table(with_fits))}
    assert targets["cnn/tuned"]["against"] == "cnn/natural"
    assert targets["cnn/tuned_s1"]["against"] == "cnn/natural_s1"
    assert targets["cnn/tuned_s1"]["saliency top-k >= natural + 0.25"] == "no"  # 0.5 < 0.85
    cost = {r["model"]: r["cost x natural"] for r in named(table_rows(with_fits)["cost"])}
    assert cost["cnn/tuned"] == "1.25" and cost["cnn/tuned_s1"] == "1.20"  # 500 / 400, 600 / 500
