"""The "certified" evaluation part: per-image certificate and L2 attack on the same smoothed
explainer, equal to calling `robust_train.certify` directly, skipped images NaN, the bracket
ordered (certified <= attacked); tests/cli/test_evaluate_certified.py runs it from the CLI."""

from __future__ import annotations

import math

import pytest
import torch

from robust_train.certify import SmoothingOptions, attack_certificate, certify_explanations
from robust_train.evaluation.engine import run_parts, summarize
from robust_train.evaluation.parts import CertifiedPart
from robust_train.evaluation.settings import EvaluationSettings

CHEAP = dict(
    parts=("certified",), certify_samples=200, certify_sigma=0.25, certify_attack_steps=4, k=8
)
KEYS = [
    "certified/saliency/certified_overlap",
    "certified/saliency/smoothed_attack_overlap",
    "certified/saliency/certified_radius_half",
]


@pytest.fixture(scope="module")
def batch(trained_digits):
    model, x, y = trained_digits
    return model, x[:12], y[:12]


def test_values_equal_a_direct_certificate_and_attack(batch) -> None:
    model, x, y = batch
    evaluation = run_parts(model, x, y, EvaluationSettings(**CHEAP))
    assert set(KEYS) <= set(evaluation.values)
    predictions = model(x).argmax(1)
    keep = predictions == y
    options = SmoothingOptions(sigma=0.25, n_samples=200, k=8, seed=0)
    cert = certify_explanations(model, x[keep], predictions[keep], radii=[0.25], options=options)
    attacked = attack_certificate(model, x[keep], cert, radius=0.25, n_steps=4, seed=0)
    got = {k: v[keep] for k, v in evaluation.values.items()}
    torch.testing.assert_close(got[KEYS[0]], cert.certified_overlap[:, 0].double())
    torch.testing.assert_close(got[KEYS[1]], attacked.overlap.double())
    torch.testing.assert_close(got[KEYS[2]], cert.certified_radius(0.5).double())
    assert torch.isnan(evaluation.values[KEYS[0]][~keep]).all()
    # the bracket: a certified lower bound never exceeds a measured point (up to MC error)
    assert (got[KEYS[0]] <= got[KEYS[1]] + 0.15).all()


def test_misclassified_images_are_not_measured_and_summary_counts_them(batch) -> None:
    model, x, _ = batch
    wrong = (model(x).argmax(1) + 1) % 10  # every label wrong: nothing is certified
    evaluation = run_parts(model, x, wrong, EvaluationSettings(**CHEAP))
    assert all(torch.isnan(evaluation.values[k]).all() for k in KEYS)
    summary = summarize(evaluation)
    assert all(summary["counts"][k] == 0 for k in KEYS)
    assert all(math.isnan(summary["measures"][k]) for k in KEYS)


def test_keys_follow_the_attacked_explainers() -> None:
    s = EvaluationSettings(**CHEAP, explainers=("saliency", "grad_cam"))
    part = CertifiedPart(s.resolved(8, 8))
    assert [k.split("/")[1] for k in part.keys()] == ["saliency"] * 3 + ["grad_cam"] * 3


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"certify_sigma": 0.0}, "certify_sigma"),
        ({"certify_alpha": 1.5}, "certify_alpha"),
        ({"certify_samples": 0}, "certify_samples"),
        ({"certify_attack_steps": -1}, "certify_attack_steps"),
        ({"certify_radius": -0.1}, "certify_radius"),
    ],
)
def test_bad_settings_name_the_argument(bad, match) -> None:
    with pytest.raises(ValueError, match=match):
        EvaluationSettings(**bad)
