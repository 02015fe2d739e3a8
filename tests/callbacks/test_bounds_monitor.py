"""BoundsMonitor: the logged value equals a direct certify_topk call on the same images; no
correct image logs NaN; bad settings are refused by name."""

from __future__ import annotations

import math

import pytest

from robust_train.callbacks.bounds import BoundsMonitor
from robust_train.certify import certify_topk
from tests.support.monitor_helpers import CHEAP

KEY = "robustness/bounds/saliency/topk_overlap_linf0.002"


def test_logged_value_equals_a_direct_certificate(trained_digits) -> None:
    model, x, y = trained_digits
    monitor = BoundsMonitor(**CHEAP, epsilon=0.002, k=8)
    xs, ys = x[:12], y[:12]
    pred = model(xs).argmax(1)
    report = monitor.evaluate(model, xs, ys, pred)
    ok = pred == ys
    cert = certify_topk(model, xs[ok], ys[ok], epsilons=[0.002], k=8)
    assert report.scalars[KEY] == pytest.approx(cert.certified_overlap[:, 0].mean().item(), 1e-6)
    assert 0 < report.scalars[KEY] <= 1
    stable = report.scalars["robustness/bounds/saliency/stable_relus_linf0.002"]
    assert stable == pytest.approx(cert.stable_share[:, 0].mean().item(), 1e-6)


def test_no_correct_image_logs_nan(trained_digits) -> None:
    model, x, y = trained_digits
    wrong = (model(x[:4]).argmax(1) + 1) % 10
    report = BoundsMonitor(**CHEAP).evaluate(model, x[:4], wrong, model(x[:4]).argmax(1))
    assert math.isnan(report.scalars["robustness/bounds/saliency/topk_overlap_linf0.01"])


def test_bad_settings_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="`method`"):
        BoundsMonitor(method="lp")
    with pytest.raises(ValueError, match="`epsilon`"):
        BoundsMonitor(epsilon=-0.1)
