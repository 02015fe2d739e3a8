"""The cluttered page with two natural models of one architecture and seed (a first variant and
its fix): each fine-tune is compared with, and costed against, the natural model of its own
variant, the kind's longest natural prefix."""

from __future__ import annotations

from experiments.cluttered import EXPLAINERS, natural_of, table_rows, targets_table


def result(label: str, accuracy: float, seconds: float) -> dict:
    return {
        "label": label,
        "stamp": {"explainers": list(EXPLAINERS), "images": 40},
        "accuracy": accuracy,
        "n_attacked": 30,
        "mask_area": 0.05,
        "fit_cpu_seconds": seconds,
    }


def test_a_variant_natural_serves_its_own_fine_tunes_only():
    naturals = ["vgg_bn/natural_s0", "vgg_bn/gp_natural_s0", "vgg_bn/natural_s1", "cnn/natural"]
    assert natural_of("vgg_bn/gp_every_map_s0", naturals) == "vgg_bn/gp_natural_s0"
    assert natural_of("vgg_bn/em_teacher_s0", naturals) == "vgg_bn/natural_s0"
    assert natural_of("vgg_bn/em_teacher_s1", naturals) == "vgg_bn/natural_s1"
    assert natural_of("cnn/em_w3", naturals) == "cnn/natural"
    assert natural_of("vgg_bn/em_s2", naturals) is None  # no natural model of seed 2
    assert natural_of("resnet18/em", naturals) is None


def test_targets_and_cost_use_the_variant_natural_model():
    results = [
        result("vgg_bn/gp_natural_s0", 0.57, 200.0),
        result("vgg_bn/gp_every_map_s0", 0.56, 100.0),
        result("vgg_bn/natural_s0", 0.88, 400.0),
        result("vgg_bn/em_s0", 0.875, 300.0),
    ]
    targets = {row[0]: row for row in targets_table(results)["rows"]}
    assert targets["vgg_bn/gp_every_map_s0"][1] == "vgg_bn/gp_natural_s0"
    assert targets["vgg_bn/em_s0"][1] == "vgg_bn/natural_s0"
    assert targets["vgg_bn/gp_every_map_s0"][3] == "yes"  # 0.56 within a point of 0.57
    assert targets["vgg_bn/em_s0"][3] == "yes"  # 0.875 within a point of 0.88, not of 0.57
    costs = {row[0]: row[4] for row in table_rows(results)["cost"]["rows"]}
    assert costs == {
        "vgg_bn/em_s0": "1.75",  # (400 + 300) / 400
        "vgg_bn/gp_every_map_s0": "1.50",  # (200 + 100) / 200
        "vgg_bn/gp_natural_s0": "-",
        "vgg_bn/natural_s0": "-",
    }
