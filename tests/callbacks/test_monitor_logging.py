"""Monitors under a real Trainer with a CSVLogger: scalars in metrics.csv, PNG files, failures."""

from __future__ import annotations

import csv
import math
import warnings
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger

from robust_train.callbacks import (
    FidelityMonitor,
    FragilityMonitor,
    LipschitzMonitor,
    RobustnessMonitor,
)
from tests.support.monitor_helpers import (
    CHEAP,
    CHEAP_FIDELITY,
    CHEAP_FRAGILITY,
    CHEAP_LIPSCHITZ,
    TRAINER,
)

ATTACK_KEYS = [
    f"robustness/attack/saliency/{a}/{m}"
    for a in ("random_sign", "topk", "mass_center")
    for m in ("topk_intersection", "spearman", "kendall", "center_shift")
]
LIPSCHITZ_KEYS = [
    "robustness/lipschitz/saliency/lipschitz",
    "robustness/lipschitz/input_x_gradient/lipschitz",
]
FIDELITY_KEYS = [f"robustness/fidelity/saliency/{m}" for m in ("mif_auc", "lif_auc", "fidelity")]
SECONDS_KEYS = [f"robustness/seconds/{m}" for m in ("fragility", "lipschitz", "fidelity")]


def read_csv(logger: CSVLogger) -> list[dict[str, str]]:
    with open(Path(logger.log_dir) / "metrics.csv") as f:
        return list(csv.DictReader(f))


def per_epoch(rows: list[dict[str, str]], key: str) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for row in rows:
        if row.get(key):
            out.setdefault(int(row["epoch"]), []).append(float(row[key]))
    return out


def check_ranges(values: dict[str, float]) -> None:
    for key, v in values.items():
        assert math.isfinite(v), key
        if key.endswith(("topk_intersection",)):
            assert 0 <= v <= 1, key
        elif key.endswith(("spearman", "kendall")):
            assert -1 <= v <= 1, key
        elif "seconds" in key or "lipschitz" in key:
            assert v > 0, key
        elif key.endswith("center_shift"):
            assert v >= 0, key


def test_csv_logger_gets_every_scalar_each_epoch_and_pngs(tmp_path, module, data):
    monitors = [
        FragilityMonitor(**CHEAP_FRAGILITY),
        LipschitzMonitor(explainers=["saliency", "input_x_gradient"], **CHEAP_LIPSCHITZ),
        FidelityMonitor(**CHEAP_FIDELITY),
    ]
    logger = CSVLogger(tmp_path)
    trainer = pl.Trainer(
        max_epochs=2,
        logger=logger,
        callbacks=monitors,
        default_root_dir=tmp_path,
        enable_checkpointing=False,
        **TRAINER,
    )
    trainer.fit(module, datamodule=data)
    rows = read_csv(logger)
    keys = ATTACK_KEYS + LIPSCHITZ_KEYS + FIDELITY_KEYS + SECONDS_KEYS + ["robustness/n_attacked"]
    for key in keys:
        epochs = per_epoch(rows, key)
        assert sorted(epochs) == [0, 1], key
        assert all(len(v) == 1 for v in epochs.values()), key
        for values in epochs.values():
            check_ranges({key: values[0]})
    assert per_epoch(rows, "robustness/n_attacked")[1][0] >= 1  # the trained model gets some right
    pngs = sorted(p.name for p in (Path(logger.log_dir) / "robustness").glob("*.png"))
    expected = sorted(
        f"epoch_{e:03d}_{name}.png"
        for e in (0, 1)
        for name in (
            "attack_saliency_random_sign_examples",
            "attack_saliency_topk_examples",
            "attack_saliency_mass_center_examples",
            "fidelity_saliency_curves",
        )
    )
    assert pngs == expected


def test_robustness_monitor_runs_parts_on_one_subset_and_times_them(tmp_path, module, data):
    monitor = RobustnessMonitor(
        attacks=["topk", "targeted"],
        n_steps=2,
        lipschitz_samples=2,
        fidelity_steps=4,
        log_images=False,
        **CHEAP,
    )
    logger = CSVLogger(tmp_path)
    trainer = pl.Trainer(
        max_epochs=1, logger=logger, callbacks=[monitor], enable_checkpointing=False, **TRAINER
    )
    trainer.fit(module, datamodule=data)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    expected = (
        [
            f"robustness/attack/saliency/topk/{m}"
            for m in ("topk_intersection", "spearman", "kendall", "center_shift")
        ]
        + ["robustness/lipschitz/saliency/lipschitz"]
        + FIDELITY_KEYS
        + SECONDS_KEYS
        + ["robustness/seconds/total"]
    )
    check_ranges({k: metrics[k] for k in expected})
    assert "robustness/attack/saliency/random_sign/spearman" not in metrics
    assert 0 <= metrics["robustness/attack/saliency/targeted/topk_intersection"] <= 1
    parts = sum(metrics[k] for k in SECONDS_KEYS)
    assert parts <= metrics["robustness/seconds/total"]
    assert not (Path(logger.log_dir) / "robustness").exists()  # log_images=False: no files
    # The parts were evaluated on the one shared subset.
    assert [p.name for p in monitor.parts] == ["fragility", "lipschitz", "fidelity"]
    assert monitor._subset is not None and monitor._subset[0].shape[0] == CHEAP["n_samples"]


def test_failing_image_writing_warns_once_and_training_goes_on(tmp_path, module, data):
    logger = CSVLogger(tmp_path)
    Path(logger.log_dir).mkdir(parents=True)
    (Path(logger.log_dir) / "robustness").write_text("a file where the PNG folder should be")
    monitor = FragilityMonitor(attacks=["topk"], **CHEAP_FRAGILITY)
    trainer = pl.Trainer(
        max_epochs=2, logger=logger, callbacks=[monitor], enable_checkpointing=False, **TRAINER
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, datamodule=data)
    ours = [w for w in caught if "FragilityMonitor: logging media failed" in str(w.message)]
    assert len(ours) == 1
    assert "CSVLogger" in str(ours[0].message)
    assert trainer.state.finished and trainer.current_epoch == 2
    assert monitor.evaluated_epochs == [0, 1]
    assert sorted(
        per_epoch(read_csv(logger), "robustness/attack/saliency/topk/topk_intersection")
    ) == [0, 1]


@pytest.mark.parametrize("every_n_epochs, expected", [(2, [1]), (3, [2]), (1, [0, 1, 2])])
def test_schedule_every_n_epochs(tmp_path, module, data, every_n_epochs, expected):
    monitor = LipschitzMonitor(every_n_epochs=every_n_epochs, log_images=False, **CHEAP_LIPSCHITZ)
    logger = CSVLogger(tmp_path)
    trainer = pl.Trainer(
        max_epochs=3, logger=logger, callbacks=[monitor], enable_checkpointing=False, **TRAINER
    )
    trainer.fit(module, datamodule=data)
    assert monitor.evaluated_epochs == expected
    assert (
        sorted(per_epoch(read_csv(logger), "robustness/lipschitz/saliency/lipschitz")) == expected
    )


def test_every_n_epochs_zero_evaluates_once_at_fit_end(tmp_path, module, data):
    monitor = FidelityMonitor(every_n_epochs=0, **CHEAP_FIDELITY)
    logger = CSVLogger(tmp_path)
    trainer = pl.Trainer(
        max_epochs=3, logger=logger, callbacks=[monitor], enable_checkpointing=False, **TRAINER
    )
    trainer.fit(module, datamodule=data)
    assert monitor.evaluated_epochs == [2]
    rows = [r for r in read_csv(logger) if r.get("robustness/fidelity/saliency/fidelity")]
    assert len(rows) == 1 and int(rows[0]["step"]) == trainer.global_step
    assert math.isfinite(float(rows[0]["robustness/seconds/fidelity"]))
    pngs = [p.name for p in (Path(logger.log_dir) / "robustness").glob("*.png")]
    assert pngs == ["epoch_002_fidelity_saliency_curves.png"]


def test_defaults_end_to_end_on_digits_datamodule_with_small_cnn(tmp_path):
    from robust_train import RobustClassifier
    from robust_train.data import DigitsDataModule
    from robust_train.models import SmallCNN

    # every default but the cap (16 images, 3 attack steps): under the 10 % cap this short fit
    # leaves no room for an image (tests/callbacks/test_monitor_first_pass.py)
    monitor = RobustnessMonitor(max_overhead=None)
    logger = CSVLogger(tmp_path)
    trainer = pl.Trainer(
        max_epochs=2, logger=logger, callbacks=[monitor], enable_checkpointing=False, **TRAINER
    )
    trainer.fit(RobustClassifier(SmallCNN(width=8)), datamodule=DigitsDataModule(batch_size=64))
    assert monitor.evaluated_epochs == [0, 1]
    assert monitor.held_out(trainer)[0].shape == (16, 1, 8, 8)
    rows = read_csv(logger)
    for key in ATTACK_KEYS + ["robustness/lipschitz/saliency/lipschitz"] + FIDELITY_KEYS:
        assert sorted(per_epoch(rows, key)) == monitor.evaluated_epochs, key
    assert 0 < float(trainer.callback_metrics["robustness/share/total"]) < 1


def test_grad_cam_example_grids_are_logged_beside_saliency(tmp_path, module, data):
    monitor = FragilityMonitor(
        **{**CHEAP_FRAGILITY, "explainers": ["saliency", "grad_cam"], "attacks": ["topk"]}
    )
    logger = CSVLogger(tmp_path)
    trainer = pl.Trainer(
        max_epochs=1, logger=logger, callbacks=[monitor], enable_checkpointing=False, **TRAINER
    )
    trainer.fit(module, datamodule=data)
    pngs = sorted(p.name for p in (Path(logger.log_dir) / "robustness").glob("*examples.png"))
    assert pngs == [
        "epoch_000_attack_grad_cam_topk_examples.png",
        "epoch_000_attack_saliency_topk_examples.png",
    ]


def test_monitor_runs_on_its_accelerator_and_refuses_a_missing_one(monkeypatch, module, data):
    from robust_train.callbacks import _base
    from robust_train.core import devices

    asked, seen = [], []
    monkeypatch.setattr(
        _base, "resolve_device", lambda a, d: asked.append((a, d)) or torch.device("cpu")
    )
    monitor = LipschitzMonitor(**CHEAP_LIPSCHITZ, accelerator="gpu", devices="0,")
    real = monitor.evaluate
    monitor.evaluate = lambda model, x, *rest: seen.append(x.device) or real(model, x, *rest)
    trainer = pl.Trainer(max_epochs=1, logger=False, callbacks=[monitor],
                         enable_checkpointing=False, **TRAINER)  # fmt: skip
    trainer.fit(module, datamodule=data)
    assert asked and set(asked) == {("gpu", "0,")} and seen == [torch.device("cpu")]
    monkeypatch.undo()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(devices, "_mps_available", lambda: False)
    missing = LipschitzMonitor(**CHEAP_LIPSCHITZ, accelerator="cuda")
    trainer = pl.Trainer(max_epochs=1, logger=False, callbacks=[missing],
                         enable_checkpointing=False, **TRAINER)  # fmt: skip
    with pytest.raises(ValueError, match="`accelerator` 'cuda': no CUDA GPU"):
        trainer.fit(module, datamodule=data)
    assert missing.evaluated_epochs == []
    with pytest.raises(ValueError, match="`accelerator` must be one of"):
        LipschitzMonitor(accelerator="tpu")
