"""Grad-CAM numbers a reviewer can read: the share of blank (constant) clean maps beside every
attacked explainer, Grad-CAM's fidelity beside its attacks, and tables that put models side by
side computed on the images every model measured (with their count); references written out
from the definitions."""

from __future__ import annotations

import math
import warnings

import pytest

from robust_train.app.report import summary_table
from robust_train.evaluation import EvaluationSettings, evaluate_classifier
from robust_train.evaluation.measures import measure_of
from robust_train.explain import get_explainer, grad_cam, importance_map
from robust_train.metrics.functional import fidelity_curves, fidelity_estimate
from tests.support.paths import DATA

FORMER = "features.3"  # the last Conv2d: Grad-CAM's former default layer, many blank maps


@pytest.fixture(scope="module")
def pair():
    from robust_train.data import MNIST5kDataModule
    from robust_train.models import load_classifier

    dm = MNIST5kDataModule(seed=0)
    dm.setup()
    x, y = dm.test_set.tensors
    # "robust": a Softplus(2) input x gradient fine-tune of the baseline whose Grad-CAM maps at
    # the last Conv2d are mostly blank (tests/support/data), the case the blank share is for
    fixture = DATA / "mnist5k_ixg_softplus.ckpt"
    models = {"baseline": load_classifier("checkpoints/mnist5k_baseline.ckpt"),
              "robust": load_classifier(fixture)}  # fmt: skip
    return models, x[:24], y[:24]


def _settings(**kwargs):
    return EvaluationSettings(
        ensemble=False,
        parts=("fragility",), attacks=("random_sign",), epsilon=0.3, k=100, noise_draws=2,
        fidelity_steps=5, **kwargs,
    )  # fmt: skip


def _evaluate(model, x, y, settings):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # blank maps are unmeasured, with a warning
        return evaluate_classifier(model, x, y, settings, progress=False)


def test_the_blank_share_counts_the_constant_clean_maps(pair) -> None:
    models, x, y = pair
    model = models["robust"]
    former = get_explainer("grad_cam", layer=FORMER)
    result = _evaluate(model, x, y, _settings(explainers=(former, "saliency")))
    correct = model(x).argmax(1) == y
    cam = importance_map(grad_cam(model, x[correct], y[correct], layer=FORMER)).flatten(1)
    blank = (cam.amax(1) == cam.amin(1)).float()
    assert result["measures"]["fragility/grad_cam/blank_map"] == pytest.approx(float(blank.mean()))
    assert float(blank.mean()) > 0.3  # most of the robust model's maps at the last Conv2d
    assert result["measures"]["fragility/saliency/blank_map"] == 0.0
    unmeasured = result["measures"]["attack/grad_cam/random_sign/n_unmeasured"]
    assert unmeasured == float(blank.sum())  # the blank maps are the unmeasured ones
    assert measure_of("fragility/grad_cam/blank_map").higher_is_better is False


def test_grad_cams_fidelity_sits_beside_its_attacks(pair) -> None:
    models, x, y = pair
    model = models["baseline"]
    result = _evaluate(model, x, y, _settings(explainers=("grad_cam", "saliency")))
    correct = model(x).argmax(1) == y
    maps = importance_map(grad_cam(model, x[correct], y[correct]))
    curves = fidelity_curves(model, x[correct], y[correct], maps, n_steps=5, seed=0)
    expected = float(fidelity_estimate(curves).mean())
    assert result["measures"]["fragility/grad_cam/fidelity"] == pytest.approx(expected, abs=1e-6)
    assert "fragility/saliency/fidelity" not in result["measures"]  # a layer explainer's only
    keys = list(result["measures"])
    first = keys.index("attack/grad_cam/random_sign/topk_intersection")
    assert keys.index("fragility/grad_cam/fidelity") < keys.index(
        "attack/saliency/random_sign/topk_intersection"
    )
    assert first < keys.index("fragility/grad_cam/fidelity")
    rows = [line for line in summary_table({"m": result}).splitlines() if "grad_cam" in line]
    assert any("fragility/grad_cam/fidelity" in row for row in rows)


def _common_mean(per_image: dict[str, list[float]], key: str) -> tuple[dict[str, float], int]:
    """Reference: the images whose value is finite for every model, and each model's mean."""
    names = list(per_image)
    n = len(per_image[names[0]])
    common = [i for i in range(n) if all(math.isfinite(per_image[m][i]) for m in names)]
    return {m: sum(per_image[m][i] for i in common) / len(common) for m in names}, len(common)


def test_a_side_by_side_table_compares_the_models_on_the_same_images(pair) -> None:
    models, x, y = pair
    former = get_explainer("grad_cam", layer=FORMER)
    results = {
        name: _evaluate(model, x, y, _settings(explainers=(former,)))
        for name, model in models.items()
    }
    key = "attack/grad_cam/random_sign/topk_intersection"
    per_image = {name: r["per_image"][key] for name, r in results.items()}
    expected, n = _common_mean(per_image, key)
    own = {name: r["measures"][key] for name, r in results.items()}
    assert 0 < n < min(r["counts"][key] for r in results.values())  # the sets differ
    assert any(abs(own[m] - expected[m]) > 1e-3 for m in own)  # and so do the means
    table = summary_table(results).splitlines()
    assert table[0] == "| measure | baseline | robust | images (every model) |"
    row = next(line for line in table if f"`{key}`" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:] == [f"{expected['baseline']:.3f}", f"{expected['robust']:.3f}", str(n)]
    blank = next(line for line in table if "blank_map" in line)
    assert blank.endswith("| own |")  # each model's own share
    # results evaluated on other images are not lined up
    other = _evaluate(models["robust"], x.flip(0), y.flip(0), _settings(explainers=(former,)))
    mixed = summary_table({"a": results["baseline"], "b": other}).splitlines()
    assert next(line for line in mixed if f"`{key}`" in line).endswith("| own |")
