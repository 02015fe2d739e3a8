"""robust_train with the `lightning` package: `lightning.Trainer` fits
`robust_train.lightning.RobustClassifier` with a RobustnessMonitor and a robust_train DataModule,
and `pytorch_lightning.Trainer` fits `robust_train.RobustClassifier`: the same seeded fit gives
the same logged keys, metrics and weights both ways, and either checkpoint loads."""

from __future__ import annotations

import re
from pathlib import Path

import lightning
import pytest
import pytorch_lightning
import torch

import robust_train
import robust_train.callbacks
import robust_train.data
import robust_train.lightning as rtl
from robust_train.models import SmallCNN, load_classifier
from robust_train.regularizers import get_penalty


def _fit(package, classes, root: Path):
    """A 2-epoch seeded fit on digits with the smoothness penalty and a monitor."""
    package.seed_everything(0)
    model = classes.RobustClassifier(
        SmallCNN(in_channels=1, num_classes=10, input_size=8),
        penalties=[get_penalty("smoothness", weight=0.1, seed=0)],
    )
    trainer = package.Trainer(
        max_epochs=2,
        limit_train_batches=8,
        limit_val_batches=2,
        accelerator="cpu",
        deterministic=True,
        logger=package.loggers.CSVLogger(str(root)),
        # no cap: a timed budget would make the two runs evaluate different images
        callbacks=[
            classes.RobustnessMonitor(every_n_epochs=1, n_samples=16, seed=0, max_overhead=None)
        ],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=classes.DigitsDataModule(batch_size=32, seed=0))
    return model, trainer


class _Classic:  # robust_train's own classes, built on pytorch_lightning
    RobustClassifier = robust_train.RobustClassifier
    RobustnessMonitor = robust_train.callbacks.RobustnessMonitor
    DigitsDataModule = robust_train.data.DigitsDataModule


@pytest.mark.slow
def test_a_real_fit_both_ways_gives_the_same_run(tmp_path: Path):
    new_model, new = _fit(lightning.pytorch, rtl, tmp_path / "lightning")
    old_model, old = _fit(pytorch_lightning, _Classic, tmp_path / "pytorch_lightning")

    assert isinstance(new_model, lightning.LightningModule)
    assert isinstance(new_model, robust_train.RobustClassifier)  # still robust_train's class
    keys = set(new.callback_metrics)
    assert keys == set(old.callback_metrics)
    assert "robustness/attack/saliency/topk/topk_intersection" in keys
    assert "train/penalty/smoothness" in keys and "val/acc" in keys
    assert torch.isfinite(new.callback_metrics["robustness/attack/saliency/topk/topk_intersection"])
    for key in keys:
        a, b = new.callback_metrics[key], old.callback_metrics[key]
        if not key.startswith("robustness/s"):  # seconds and shares are timings
            assert torch.allclose(a, b, atol=1e-6, equal_nan=True), (key, a, b)
    for (name, a), (_, b) in zip(
        new_model.state_dict().items(), old_model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    paths = [new.checkpoint_callback.best_model_path, old.checkpoint_callback.best_model_path]
    x = torch.rand(4, 1, 8, 8)
    outputs = [load_classifier(path)(x) for path in paths]
    assert torch.equal(outputs[0], outputs[1])


def test_the_other_package_is_refused_by_lightning_and_on_lightning_checks_its_input():
    # Why robust_train.lightning exists: Lightning's Trainer refuses the other package's module.
    net = SmallCNN(in_channels=1, num_classes=10, input_size=8)
    trainer = lightning.Trainer(logger=False, enable_checkpointing=False, max_epochs=1)
    with pytest.raises(TypeError, match="must be a `LightningModule`"):
        trainer.fit(robust_train.RobustClassifier(net))
    assert rtl.on_lightning(robust_train.callbacks.RobustnessMonitor) is rtl.RobustnessMonitor
    assert rtl.RobustClassifier.__module__ == "robust_train.lightning"
    assert issubclass(rtl.ImageFolderDataModule, lightning.LightningDataModule)
    # every hook robust_train does not define is lightning.pytorch's, so Lightning sees no
    # override it would refuse (configure_model and the deprecated configure_sharded_model)
    for hook in ("configure_model", "configure_sharded_model", "on_train_batch_start"):
        assert getattr(rtl.RobustClassifier, hook) is getattr(lightning.LightningModule, hook)
    with pytest.raises(TypeError, match="not built on a pytorch_lightning class"):
        rtl.on_lightning(torch.nn.Linear)


def test_the_documented_example_for_lightning_runs_as_written():
    page = Path(__file__).resolve().parents[2] / "docs" / "tutorials" / "train-a-robust-model.md"
    match = re.search(r"^## `lightning` or `pytorch_lightning`\n(.*?)(?=^## )", page.read_text(),
                      re.M | re.S)  # fmt: skip
    assert match, "the training tutorial has no section on the lightning package"
    (block,) = re.findall(r"^```python\n(.*?)^```", match.group(1), flags=re.M | re.S)
    namespace: dict[str, object] = {"__name__": "docs"}
    exec(compile(block, "train-a-robust-model.md (lightning)", "exec"), namespace)
    trainer = namespace["trainer"]
    assert isinstance(trainer, lightning.Trainer) and trainer.global_step == 5
    assert "robustness/attack/saliency/topk/topk_intersection" in trainer.callback_metrics
