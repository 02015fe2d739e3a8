"""A diverging fit: one warning, a count per epoch, a monitor that goes on.

The case: SGD with lr 1e6 and `on_nonfinite="skip"`. It must warn once (not once per batch, and
not advising to set the option already set), and the robustness monitor must not stop the fit
(no `ValueError: maps holds N non-finite value(s)`).
"""

from __future__ import annotations

import csv
import warnings
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from robust_train import RobustClassifier
from robust_train.callbacks import RobustnessMonitor
from robust_train.models import SmallCNN
from robust_train.regularizers import PenaltyTerm
from tests.support.helpers import TinyCNN, digits_tensors

TRAINER = dict(
    accelerator="cpu",
    devices=1,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    num_sanity_val_steps=0,
    log_every_n_steps=1,
)


class ExplodingPenalty(PenaltyTerm):
    double_backprop = False
    default_name = "boom"

    def penalty(self, model, inputs, target, logits):
        return torch.full((inputs.shape[0],), float("nan")) + 0 * logits.sum()


def _loaders(n_train: int = 192, n_val: int = 64):
    x, y = digits_tensors()
    train = DataLoader(TensorDataset(x[:n_train], y[:n_train]), batch_size=64, shuffle=True)
    val = DataLoader(TensorDataset(x[1400 : 1400 + n_val], y[1400 : 1400 + n_val]), batch_size=64)
    return train, val


def _rows(logger: CSVLogger) -> list[dict[str, str]]:
    with open(Path(logger.log_dir) / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _nonfinite_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "non-finite" in str(w.message)]


def test_skip_warns_once_and_logs_a_count_per_epoch(tmp_path):
    train, _ = _loaders()
    module = RobustClassifier(TinyCNN(), penalties=[ExplodingPenalty()], on_nonfinite="skip")
    logger = CSVLogger(tmp_path)
    trainer = pl.Trainer(max_epochs=2, logger=logger, limit_val_batches=0, **TRAINER)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, train)
    messages = _nonfinite_warnings(caught)
    assert len(messages) == 1, messages  # 6 skipped steps, one warning
    assert not [w for w in caught if "returned `None`" in str(w.message)]  # Lightning's, on purpose
    assert "step skipped" in messages[0] and "penalty/boom" in messages[0]
    assert "set on_nonfinite" not in messages[0]  # it is already set
    counts = [
        float(r["train/skipped_steps"]) for r in _rows(logger) if r.get("train/skipped_steps")
    ]
    assert counts == [3.0, 3.0]  # 192 images / 64 per batch, every step skipped, both epochs


def test_raise_names_the_part_and_advises_skip():
    train, _ = _loaders()
    module = RobustClassifier(TinyCNN(), penalties=[ExplodingPenalty()])
    trainer = pl.Trainer(max_epochs=1, logger=False, limit_val_batches=0, **TRAINER)
    with pytest.raises(FloatingPointError, match=r"penalty/boom.*on_nonfinite='skip'"):
        trainer.fit(module, train)


def test_no_count_is_logged_when_nothing_was_skipped(tmp_path):
    train, _ = _loaders()
    logger = CSVLogger(tmp_path)
    trainer = pl.Trainer(max_epochs=1, logger=logger, limit_val_batches=0, **TRAINER)
    trainer.fit(RobustClassifier(TinyCNN(), on_nonfinite="skip"), train)
    counts = [
        float(r["train/skipped_steps"]) for r in _rows(logger) if r.get("train/skipped_steps")
    ]
    assert counts == [0.0]


def test_sgd_lr_1e6_with_the_monitor_finishes_and_logs_the_nonfinite_count(tmp_path):
    """SGD at lr 1e6: the fit ends, the monitor logs a count and no robustness."""
    train, val = _loaders()
    torch.manual_seed(1)  # lr 1e6 overflows this model's logits and maps from the first epoch
    module = RobustClassifier(
        SmallCNN(width=8), on_nonfinite="skip", optimizer=lambda p: torch.optim.SGD(p, lr=1e6)
    )
    monitor = RobustnessMonitor(
        n_samples=8, n_images=0, max_overhead=None, n_steps=1, lipschitz_samples=2, fidelity_steps=4
    )
    logger = CSVLogger(tmp_path)
    trainer = pl.Trainer(max_epochs=3, logger=logger, callbacks=[monitor], **TRAINER)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, train, val)
    assert trainer.current_epoch == 3 and monitor.evaluated_epochs == [0, 1, 2]
    rows = _rows(logger)
    nonfinite = {
        int(r["epoch"]): float(r["robustness/nonfinite"])
        for r in rows
        if r.get("robustness/nonfinite")
    }
    diverged = [e for e, n in nonfinite.items() if n > 0]
    assert set(nonfinite) == {0, 1, 2} and diverged, nonfinite
    for row in rows:  # an epoch that met non-finite values logs no robustness number
        if row.get("robustness/nonfinite") and int(row["epoch"]) in diverged:
            assert not row.get("robustness/attack/saliency/topk/topk_intersection"), row
    monitor_warnings = [m for m in _nonfinite_warnings(caught) if "RobustnessMonitor" in m]
    assert len(monitor_warnings) == 1, monitor_warnings
    assert all("set on_nonfinite" not in m for m in _nonfinite_warnings(caught))
    # Each place that warns during the evaluations (the attack meeting a dead or diverged model,
    # at every epoch and for every objective) is heard once.
    places = [(w.filename, w.lineno) for w in caught if "robust_train" in w.filename]
    assert len(places) == len(set(places)), places


def test_a_monitor_on_nan_weights_reports_only_the_count(tmp_path):
    """Direct: weights holding NaN give `robustness/nonfinite` = their count, nothing else."""
    module = RobustClassifier(TinyCNN(), on_nonfinite="skip")
    with torch.no_grad():
        module.model.net[0].weight[0, 0, 0, :2] = float("nan")
    x, y = digits_tensors()
    monitor = RobustnessMonitor(
        n_samples=8, inputs=x[:8], targets=y[:8], log_images=False, max_overhead=None
    )
    trainer = pl.Trainer(
        max_epochs=1,
        logger=False,
        limit_train_batches=1,
        limit_val_batches=0,
        callbacks=[monitor],
        **TRAINER,
    )
    train, _ = _loaders(n_train=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, train)  # NaN weights: every step is skipped
    assert monitor.last_report is not None
    scalars = monitor.last_report.scalars
    assert scalars["robustness/nonfinite"] >= 2
    assert not any(
        k.startswith(("robustness/topk", "robustness/lipschitz", "fidelity/")) for k in scalars
    )


def test_a_part_that_meets_nonfinite_values_keeps_the_other_parts(monkeypatch):
    """RobustnessMonitor: the Lipschitz part stops on NaN maps; fragility and fidelity are kept."""
    from robust_train.evaluation.parts import LipschitzPart

    def diverged(self, model, inputs, labels, predictions):
        raise ValueError("`values` holds 5 non-finite value(s) (NaN or inf)")

    monkeypatch.setattr(LipschitzPart, "run", diverged)
    x, y = digits_tensors()
    monitor = RobustnessMonitor(
        n_samples=8,
        inputs=x[:8],
        targets=y[:8],
        log_images=False,
        max_overhead=None,
        attacks=["topk"],
        n_steps=1,
        fidelity_steps=4,
    )
    trainer = pl.Trainer(
        max_epochs=1,
        logger=False,
        limit_train_batches=2,
        limit_val_batches=0,
        callbacks=[monitor],
        **TRAINER,
    )
    train, _ = _loaders(n_train=128)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(RobustClassifier(TinyCNN()), train)
    scalars = monitor.last_report.scalars  # type: ignore[union-attr]
    assert scalars["robustness/nonfinite"] == 5.0
    assert "robustness/lipschitz/saliency/lipschitz" not in scalars
    assert (
        "robustness/attack/saliency/topk/topk_intersection" in scalars
        and "robustness/fidelity/saliency/fidelity" in scalars
    )
    assert "robustness/seconds/lipschitz" in scalars
    assert (
        len([w for w in caught if "RobustnessMonitor: epoch 0: 5 non-finite" in str(w.message)])
        == 1
    )
