"""The cluttered page's targets table: each fine-tune against its own architecture's natural
model, one verdict per target ("yes", "no", "-" where a value is missing) and the count met."""

from __future__ import annotations

from experiments.cluttered import EXPLAINERS, targets_table


def result(label: str, accuracy: float, sal: float, cam: float, **extra: float) -> dict:
    r = {
        "label": label,
        "stamp": {"explainers": list(EXPLAINERS)},
        "accuracy": accuracy,
        "attack/saliency/topk/topk_intersection": sal,
        "attack/grad_cam/topk/topk_intersection": cam,
        "attack/input_reference/topk/topk_intersection": 0.4,
        "attack/saliency/topk/relevance_mass": 0.2,
        "attack/grad_cam/topk/relevance_mass": 0.1,
        "localisation/saliency/relevance_mass": 0.2,
        "localisation/grad_cam/relevance_mass": 0.25,
        "fidelity/grad_cam/fidelity": 0.5,
    }
    r.update({k.replace("__", "/"): v for k, v in extra.items()})
    return r


def verdicts(table: dict, label: str) -> dict[str, str]:
    row = next(r for r in table["rows"] if r[0] == label)
    return dict(zip(table["columns"], row, strict=True))


def test_targets_against_the_architecture_natural_model():
    natural = result("cnn/natural", 0.86, 0.2, 0.1)
    good = result("cnn/good", 0.85, 0.45, 0.5, cost=1.5)  # +0.25 exactly on saliency
    bad = result("cnn/bad", 0.84, 0.44, 0.3, fidelity__grad_cam__fidelity=0.1, cost=2.5)
    other = result("resnet18/natural", 0.5, 0.0, 0.0)  # another architecture: never compared
    table = targets_table([natural, good, bad, other])
    assert [r[0] for r in table["rows"]] == ["cnn/bad", "cnn/good"]
    g, b = verdicts(table, "cnn/good"), verdicts(table, "cnn/bad")
    assert g["against"] == "cnn/natural" and b["against"] == "cnn/natural"
    assert g["accuracy within 1 point"] == "yes" and b["accuracy within 1 point"] == "no"
    assert g["cost <= 2x"] == "yes" and b["cost <= 2x"] == "no"
    assert g["saliency top-k >= natural + 0.25"] == "yes"
    assert b["saliency top-k >= natural + 0.25"] == "no"
    assert g["saliency top-k > map = input"] == "yes" and b["Grad-CAM top-k > map = input"] == "no"
    assert g["Grad-CAM fidelity >= natural"] == "yes" and b["Grad-CAM fidelity >= natural"] == "no"
    assert g["Grad-CAM attacked rel. mass >= natural clean"] == "no"  # 0.1 < 0.25
    assert g["saliency attacked rel. mass >= natural clean"] == "yes"  # 0.2 >= 0.2
    assert g["met"] == "9/10" and b["met"] == "3/10"
    assert len(table["columns"]) == len(table["rows"][0])


def test_a_missing_value_or_natural_model_gives_no_verdict():
    natural = result("cnn/natural", 0.86, 0.2, 0.1)
    tuned = result("cnn/tuned", 0.86, 0.5, 0.5)  # no cost known
    del tuned["fidelity/grad_cam/fidelity"]
    lonely = result("vgg_bn/tuned", 0.5, 0.9, 0.9, cost=1.0)  # no natural VGG-BN measured
    row = verdicts(targets_table([natural, tuned, lonely]), "cnn/tuned")
    assert row["cost <= 2x"] == "-" and row["Grad-CAM fidelity >= natural"] == "-"
    assert row["met"] == "7/10"
    assert [r[0] for r in targets_table([natural, tuned, lonely])["rows"]] == ["cnn/tuned"]
