"""CertifiedMonitor: the logged value equals a direct certify_explanations call on the same images,
and a short real fit with a CSVLogger logs the key at every scheduled epoch."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger

from robust_train.callbacks import CertifiedMonitor
from robust_train.certify import certify_explanations
from tests.support.monitor_helpers import CHEAP, TRAINER

KEY = "robustness/certified/saliency/topk_overlap_r0.05"
CHEAP_CERTIFIED = dict(CHEAP, certify_samples=60, sigma=0.1, radius=0.05)


def test_logged_value_equals_a_direct_certificate(trained_digits) -> None:
    model, x, y = trained_digits
    monitor = CertifiedMonitor(**CHEAP_CERTIFIED, seed=4)
    xs, ys = x[:12], y[:12]
    pred = model(xs).argmax(1)
    report = monitor.evaluate(model, xs, ys, pred)
    ok = pred == ys
    cert = certify_explanations(
        model, xs[ok], ys[ok], sigma=0.1, n_samples=60, radii=[0.05], seed=4
    )
    assert report.scalars[KEY] == pytest.approx(cert.certified_overlap[:, 0].mean().item(), 1e-6)
    half = report.scalars["robustness/certified/saliency/radius_half"]
    assert half == pytest.approx(cert.certified_radius(0.5).mean().item(), 1e-5)
    assert 0 < report.scalars[KEY] <= 1


def test_no_correct_image_logs_nan_not_a_perfect_score(trained_digits) -> None:
    model, x, y = trained_digits
    monitor = CertifiedMonitor(**CHEAP_CERTIFIED)
    wrong = (model(x[:8]).argmax(1) + 1) % 10
    report = monitor.evaluate(model, x[:8], wrong, model(x[:8]).argmax(1))
    assert math.isnan(report.scalars[KEY])


def test_fit_with_csv_logger_logs_the_key_each_epoch(tmp_path, module, data) -> None:
    logger = CSVLogger(tmp_path)
    trainer = pl.Trainer(
        max_epochs=2,
        logger=logger,
        callbacks=[CertifiedMonitor(**CHEAP_CERTIFIED)],
        default_root_dir=tmp_path,
        enable_checkpointing=False,
        **TRAINER,
    )
    trainer.fit(module, datamodule=data)
    with open(Path(logger.log_dir) / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    epochs = {int(r["epoch"]): float(r[KEY]) for r in rows if r.get(KEY)}
    assert sorted(epochs) == [0, 1]
    assert all(0 <= v <= 1 for v in epochs.values())
    assert any(r.get("robustness/seconds/certified") for r in rows)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"sigma": 0.0}, "`sigma` must be > 0"),
        ({"sigma": 3.0}, "`sigma` must be <= 1"),
        ({"alpha": 1.0}, "`alpha` must lie strictly between 0 and 1"),
        ({"certify_samples": 0}, "`certify_samples` must be > 0"),
        ({"radius": -1.0}, "`radius` must be > 0"),
        ({"explainer": "nope"}, "Unknown `explainer` 'nope'"),
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        CertifiedMonitor(**kwargs)


def test_a_radius_beyond_the_image_box_is_refused(trained_digits) -> None:
    model, x, y = trained_digits
    monitor = CertifiedMonitor(radius=9.0, certify_samples=5)
    with pytest.raises(ValueError, match=r"`radius` 9.0 exceeds sqrt\(64\)"):
        monitor.evaluate(model, x[:4], y[:4], model(x[:4]).argmax(1))
    assert torch.is_grad_enabled()
