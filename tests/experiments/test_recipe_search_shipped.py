"""The recipe search after the re-shipping: the shipped config is the search's `corner_gcp2_r04`,
the candidates still change the recipe the search started from, and the before -> after table
pairs the two shipped robust models on the same images beside their chance levels."""

from __future__ import annotations

import json

import yaml

from experiments import ensemble_maps as em
from experiments import recipe_search as rs
from robust_train.core.resources import shipped_config


def test_the_shipped_config_is_the_candidate_shipped_now_and_the_search_keeps_its_base():
    config = yaml.safe_load(shipped_config("mnist5k_finetune_every_map").read_text())
    (penalty,) = config["model"]["penalties"]
    now = rs.recipe(rs.SHIPPED_NOW)
    assert {k: now[k] for k in penalty["init_args"]} == penalty["init_args"]
    assert now["start"] == "corner" and now["radius"] == 0.4
    before = rs.recipe("shipped")
    assert (before["start"], before["radius"], before["map_powers"]) == ("uniform", 0.3, None)
    assert before["weight"] == now["weight"] == 3.0


def _job(model: str, name: str, values: list[float], ref: list[float] | None = None) -> dict:
    per_image = {em.TOPK.format(m=name): values, em.RANDOM.format(m=name): [0.125] * len(values)}
    if ref is not None:
        per_image[em.REFERENCE] = ref
    cost = {"members": [], "cpu_seconds": 1.0, "seconds": 1.0, "images": len(values)}
    return {"model": model, "explainer": name, "chunk": 0, "index": list(range(len(values))),
            "per_image": per_image, "cpu_seconds": 2.0,
            "attack_cost": {f"{name}/topk": cost}}  # fmt: skip


def test_before_after_table_pairs_the_two_models_on_the_same_images(tmp_path):
    before, after = tmp_path / "before", tmp_path / "runs" / "full" / f"{rs.SHIPPED_NOW_FILE}_s0"
    ref = [0.6, 0.6, 0.6]
    jobs = {before: [("natural", [0.1, 0.0, 0.2]), ("robust", [0.5, 0.7, 0.4])],
            after: [("robust", [0.7, 0.8, 0.5])]}  # fmt: skip
    for folder, models in jobs.items():
        folder.mkdir(parents=True)
        for model, values in models:
            job = _job(model, "saliency", values, ref)
            (folder / f"{model}__saliency__000.json").write_text(json.dumps(job))
    found = {("natural_file", 0): {"test_acc": 0.971}, ("shipped_before", 0): {"test_acc": 0.966},
             (rs.SHIPPED_NOW_FILE, 0): {"test_acc": 0.970},
             ("natural", 0): {"epoch_cpu_s": [1.0, 1.0]},
             ("shipped", 0): {"epoch_cpu_s": [3.0, 3.0]},
             (rs.SHIPPED_NOW, 0): {"epoch_cpu_s": [2.0, 4.0]}}  # fmt: skip
    table = rs.shipped_table(found, tmp_path / "runs", before)
    rows = {row[0].split(" ")[0]: row for row in table["rows"]}
    assert rows["test"][1:5] == ["0.971", "0.966", "0.970", "+0.004"]
    assert rows["recipe"][1:4] == ["1x", "2.00x", "2.00x"]  # (6 + 6) / 6 for both
    saliency = rows["saliency"]
    assert saliency[2].startswith("0.533 [") and saliency[3].startswith("0.667 [")
    assert saliency[4].startswith("+0.133 [")  # paired: +0.2, +0.1, +0.1
    assert saliency[5].startswith("0.600 [") and "/ 0.600 [" in saliency[5]
    assert saliency[7] == "0.333 (1/3) / 0.667 (2/3)"  # 0.7 > 0.6; then 0.7 and 0.8 > 0.6
    columns = " ".join(table["columns"])
    assert "random map" in columns and "map = input" in columns
    assert len(table["columns"]) == len(table["align"].split("|")) - 2 == len(saliency)
