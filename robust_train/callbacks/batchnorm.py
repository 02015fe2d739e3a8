"""BatchNormRecalibration: BatchNorm running statistics kept in step with the weights.

A penalty whose forwards run in eval mode (`model_mode="eval"`) normalises with the running
statistics, and those follow the weights only through the exponential average of the clean
training batches (momentum 0.1): at a high learning rate they lag, and the penalty, validation
and the saved checkpoint all see statistics of an older model. This callback re-estimates every
BatchNorm's running statistics from training batches, as an exact cumulative average (the same
estimate as `torch.optim.swa_utils.update_bn`), before each validation of the fit, at the end of
each training epoch when the weights moved since, and every `every_n_steps` optimizer steps if
asked.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from itertools import islice
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.types import STEP_OUTPUT
from torch import Tensor, nn
from typing_extensions import override

from robust_train.callbacks._diverged import evaluated_model
from robust_train.core.runtime import batchnorm_layers, check_optional_positive, modes_restored
from robust_train.core.validation import check_bool, check_positive

__all__ = ["BatchNormRecalibration", "batchnorm_layers", "recalibrate_batchnorm"]


def _inputs(batch: Any) -> Tensor:
    """The input tensor of a batch: the batch itself or the first item of a tuple/list."""
    inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
    if not isinstance(inputs, Tensor):
        raise TypeError(
            f"BatchNormRecalibration needs batches that are a tensor or a (inputs, ...) tuple, "
            f"got {type(batch).__name__}"
        )
    return inputs


def recalibrate_batchnorm(model: nn.Module, batches: Iterable[Any]) -> int:
    """Replace the running statistics of `model`'s BatchNorms by the average over `batches`.

    Each layer's running mean and variance become the plain (cumulative) average of the batch
    means and unbiased batch variances that its input has over the given batches, as in
    `torch.optim.swa_utils.update_bn`; the forwards run without gradients, with only the
    BatchNorm layers in training mode (dropout and the like stay off). Weights, momenta and every
    submodule's train/eval flag are as before on return.

    Args:
        model: the classifier; its BatchNorms (`batchnorm_layers`) are re-estimated.
        batches: input tensors, or tuples/lists whose first item is the input tensor; moved to the
            device of the model's first parameter.

    Returns:
        The number of batches used.

    Raises:
        ValueError: if `model` has no BatchNorm with running statistics, or `batches` is empty
            (the statistics are then left as they were).

    Examples:
        >>> net = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2), nn.Dropout(0.5))
        >>> data = [torch.randn(8, 3) for _ in range(4)]
        >>> recalibrate_batchnorm(net, data)
        4
        >>> means = torch.stack([net[0](x).mean(0) for x in data]).mean(0)
        >>> torch.allclose(net[1].running_mean, means.detach(), atol=1e-6)
        True
    """
    layers = batchnorm_layers(model)
    if not layers:
        raise ValueError(
            "`model` has no BatchNorm layer with running statistics: nothing to recalibrate"
        )
    device = next(iter(model.parameters()), torch.empty(0)).device
    stored = [(bn, bn.momentum, [b.clone() for b in _buffers(bn)]) for bn in layers]
    for bn in layers:
        bn.reset_running_stats()
        bn.momentum = None  # a cumulative average
    used = 0
    try:
        with modes_restored(model), torch.no_grad():
            model.eval()
            for bn in layers:
                bn.train()
            for batch in batches:
                model(_inputs(batch).to(device))
                used += 1
    finally:
        for bn, momentum, buffers in stored:
            bn.momentum = momentum
            if not used:  # nothing seen (or the first batch failed): the old statistics
                for old, new in zip(buffers, _buffers(bn), strict=True):
                    new.copy_(old)
    if not used:
        raise ValueError("`batches` is empty: no statistics to recalibrate from")
    return used


def _buffers(bn: nn.Module) -> list[Tensor]:
    names = ("running_mean", "running_var", "num_batches_tracked")
    return [b for b in (getattr(bn, n, None) for n in names) if isinstance(b, Tensor)]


class BatchNormRecalibration(pl.Callback):
    """Re-estimate every BatchNorm's running statistics from training batches during a fit.

    Before each validation of the fit (not the sanity check), at the end of each training epoch
    if the weights changed since the last re-estimate, and, with `every_n_steps`, after every
    `every_n_steps`-th optimizer step, the running statistics of the trained classifier
    (`pl_module.model` when it is a module, else `pl_module`; a teacher inside a penalty is left
    alone) are replaced by their exact average over `n_batches` batches of the training loader
    (`recalibrate_batchnorm`). Validation, an eval-mode penalty and every checkpoint then see
    statistics of the current weights. The loader's shuffling and any augmentation draw from a
    forked random state, so the fit's own random stream is as without the callback. The CPU
    seconds spent are kept in `seconds` and logged as `bn_recalibration/seconds` at epoch end.

    Args:
        n_batches: training batches per re-estimate (> 0); fewer if the loader is shorter.
        every_n_steps: re-estimate after every this many optimizer steps (> 0), or None for only
            before validation and at epoch end.
        before_validation: re-estimate before each validation of the fit.

    Raises:
        ValueError: for an argument out of range (naming it and the value), or, when the fit
            starts, if the classifier has no BatchNorm with running statistics.

    Examples:
        >>> callback = BatchNormRecalibration(n_batches=16, every_n_steps=10)
        >>> callback.n_batches, callback.every_n_steps, callback.before_validation
        (16, 10, True)
        >>> BatchNormRecalibration(n_batches=0)
        Traceback (most recent call last):
        ...
        ValueError: `n_batches` must be > 0, got 0
    """

    def __init__(
        self,
        n_batches: int = 32,
        every_n_steps: int | None = None,
        before_validation: bool = True,
    ) -> None:
        check_positive(n_batches, "n_batches", integer=True)
        check_optional_positive(every_n_steps, "every_n_steps", integer=True)
        check_bool(before_validation, "before_validation")
        self.n_batches = n_batches
        self.every_n_steps = every_n_steps
        self.before_validation = before_validation
        self.seconds = 0.0
        self.count = 0
        self._last_step = -1

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not batchnorm_layers(evaluated_model(pl_module)):
            raise ValueError(
                "BatchNormRecalibration: the model has no BatchNorm layer with running "
                "statistics; remove the callback"
            )

    @override
    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: STEP_OUTPUT,
        batch: Any,
        batch_idx: int,
    ) -> None:
        step = trainer.global_step
        if self.every_n_steps and step > 0 and step % self.every_n_steps == 0:
            self._recalibrate(trainer, pl_module)

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.before_validation and trainer.training and not trainer.sanity_checking:
            self._recalibrate(trainer, pl_module)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._recalibrate(trainer, pl_module)
        pl_module.log("bn_recalibration/seconds", self.seconds)

    def _recalibrate(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Re-estimate once per optimizer step at most."""
        if trainer.global_step == self._last_step:
            return
        loader = trainer.train_dataloader
        if loader is None:
            raise RuntimeError("BatchNormRecalibration found no training loader on the trainer")
        start = time.process_time()
        with torch.random.fork_rng(devices=[]):
            recalibrate_batchnorm(evaluated_model(pl_module), islice(loader, self.n_batches))
        self.seconds += time.process_time() - start
        self.count += 1
        self._last_step = trainer.global_step

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "count": self.count, "last_step": self._last_step}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.seconds = float(state_dict.get("seconds", 0.0))
        self.count = int(state_dict.get("count", 0))
        self._last_step = int(state_dict.get("last_step", -1))
