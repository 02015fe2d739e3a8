"""The cluttered page's attack-ensemble rows for the other architectures: each pair measured on
its own number of images (fewer for the costlier networks), each fine-tune judged against the
natural model of its architecture and seed measured by the same protocol on the same images,
never against another pair's or another image count's."""

from __future__ import annotations

from experiments.cluttered import EXPLAINERS, table_rows, targets_table


def result(label: str, protocol: str, images: int, sal: float) -> dict:
    return {
        "label": label,
        "stamp": {"explainers": list(EXPLAINERS), "protocol": protocol, "images": images},
        "accuracy": 0.95,
        "n_attacked": images,
        "mask_area": 0.05,
        "attack/saliency/topk/topk_intersection": sal,
        "attack/grad_cam/topk/topk_intersection": 0.5,
        "attack/input_reference/topk/topk_intersection": 0.4,
    }


def named(table: dict) -> list[dict]:
    return [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]


RESULTS = [
    # the small CNN at 10 images, the VGG-BN (prefix max_, seeds 1 and 2) at 5, the ResNet-18 at 3
    result("cnn/natural", "ensemble", 10, 0.1),
    result("cnn/em_w3_r8_e16", "ensemble", 10, 0.6),
    result("vgg_bn/max_natural_s1", "ensemble", 5, 0.2),
    result("vgg_bn/max_natural_s1", "fast", 5, 0.4),
    result("vgg_bn/max_natural_s1", "fast", 40, 0.46),
    result("vgg_bn/max_em_r8_teacher_s1", "ensemble", 5, 0.5),  # +0.30 on its ensemble natural
    result("vgg_bn/max_em_r8_teacher_s1", "fast", 5, 0.6),  # +0.20 on its fast natural
    result("vgg_bn/max_em_r8_teacher_s1", "fast", 40, 0.61),
    result("vgg_bn/max_natural_s2", "fast", 40, 0.0),  # seed 2's only natural row
    result("vgg_bn/max_em_r8_teacher_s2", "ensemble", 5, 0.9),  # no ensemble natural: no row
    result("resnet18/e12_natural_s0", "ensemble", 3, 0.3),
    result("resnet18/e12_em_r8_teacher_e3_s0", "ensemble", 3, 0.5),  # +0.20
    result("resnet18/e12_em_r8_teacher_e3_s0", "ensemble", 10, 0.9),  # no natural at 10: no row
]


def test_each_pair_is_judged_on_its_own_protocol_and_images():
    rows = named(targets_table(RESULTS))
    found = [(r["model"], r["against"], r["protocol"]) for r in rows]
    assert found == [
        ("cnn/em_w3_r8_e16", "cnn/natural", "ensemble, first 10 images"),
        ("resnet18/e12_em_r8_teacher_e3_s0", "resnet18/e12_natural_s0", "ensemble, first 3 images"),
        ("vgg_bn/max_em_r8_teacher_s1", "vgg_bn/max_natural_s1", "fast, first 40 images"),
        ("vgg_bn/max_em_r8_teacher_s1", "vgg_bn/max_natural_s1", "fast, first 5 images"),
        ("vgg_bn/max_em_r8_teacher_s1", "vgg_bn/max_natural_s1", "ensemble, first 5 images"),
    ]
    gain = [r["saliency top-k >= natural + 0.25"] for r in rows]
    assert gain == ["yes", "no", "no", "no", "yes"]  # 0.5 vs 0.2 under the ensemble, 0.6 vs 0.4


def test_the_ensemble_table_keeps_each_pair_and_its_image_count():
    table = named(table_rows(RESULTS, with_protocol=True)["measures"])
    vgg = [(r["protocol"], r["map"]) for r in table if r["model"] == "vgg_bn/max_natural_s1"]
    assert [p for p, m in vgg if m == "saliency"] == [
        "fast, first 40 images",
        "fast, first 5 images",
        "ensemble, first 5 images",
    ]
    resnet = [r for r in table if r["model"] == "resnet18/e12_natural_s0"]
    assert [r["map"] for r in resnet] == ["saliency", "grad_cam", "map = input"]
    assert resnet[0]["top-k under attack"] == "0.300"
