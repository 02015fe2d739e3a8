"""RobustClassifier: a LightningModule that adds penalties on explanations to the task loss."""

from __future__ import annotations

import time
import warnings
from typing import Any, cast

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.cli import LRSchedulerCallable, OptimizerCallable
from pytorch_lightning.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from robust_train.core.history import History
from robust_train.core.validation import (
    check_choice,
    check_images,
    check_non_negative,
    check_positive,
)
from robust_train.models.head import find_head
from robust_train.models.loading import checkpoint_safe
from robust_train.models.softplus import softplus
from robust_train.regularizers.base import PenaltyTerm, check_declared
from robust_train.training.module_metadata import (
    infer_num_classes,
    try_datamodule_config,
    try_model_config,
)
from robust_train.training.precision import check_precision, penalty_value

NONFINITE_ADVICE = (
    "lower the penalty weight or the learning rate, or use bf16 rather than 16-mixed precision"
)


def _default_optimizer(params: Any) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=1e-3)


class RobustClassifier(pl.LightningModule):
    """Any image classifier, trained with cross-entropy plus weighted penalties on its explanations.

    loss = CE(model(x), y) + sum_k w_k(epoch) * mean_i penalty_k(x_i)

    Every part is logged: `train/ce`, `train/loss`, `train/penalty/<name>` (the unweighted mean),
    `train/acc`, `val/loss`, `val/acc`, `test/loss`, `test/acc`. The clean forward pass is shared by
    the task loss and the penalties (which take gradients from it with create_graph=True), and no
    penalty calls .backward() itself, so the module works under DDP.

    Args:
        model: a classifier nn.Module mapping [0, 1] images (B, C, H, W) to logits (B, K);
            normalisation is a layer inside it.
        penalties: penalty terms (robust_train.regularizers), each with its own weight.
        num_classes: K; inferred from the last nn.Linear of the model when None.
        optimizer: optimizer factory (LightningCLI: `optimizer: {class_path:
            torch.optim.Adam, ...}`).
        lr_scheduler: optional scheduler factory.
        softplus_beta: replace every ReLU by Softplus(beta) before training (Dombrowski et al.
            2019).
        penalty_warmup_epochs: weights rise linearly from 0 to their value over this many epochs.
        freeze_backbone_epochs: train only the head for this many epochs (fine-tuning).
        head: attribute path of the head module (e.g. "fc", "backbone.fc"); default: last nn.Linear.
        init_checkpoint: weights to start from: a .ckpt written by `robust-train fit` or a
            state_dict file (fine-tuning a user checkpoint). Read tensors-only.
        trust_init_checkpoint: also load an `init_checkpoint` that holds Python objects beyond
            tensors and plain values (full unpickling). RISK: that runs any code the file
            carries; only for files whose maker you trust.
        on_nonfinite: "raise" stops with an error naming the term when a loss part is NaN/inf;
            "skip" skips that optimisation step (one warning per fit, `train/skipped_steps` per
            epoch; one process only: refused under DDP).
        label_smoothing: passed to the cross-entropy.
        lr_scheduler_interval: "epoch" steps `lr_scheduler` after every epoch, "step" after every
            optimisation step (e.g. `CosineAnnealingLR` with `T_max` = the fit's total steps).

    Examples:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
        >>> RobustClassifier(net).num_classes
        10
    """

    def __init__(
        self,
        model: nn.Module,
        penalties: list[PenaltyTerm] | None = None,
        num_classes: int | None = None,
        optimizer: OptimizerCallable = _default_optimizer,
        lr_scheduler: LRSchedulerCallable | None = None,
        softplus_beta: float | None = None,
        penalty_warmup_epochs: float = 0.0,
        freeze_backbone_epochs: int = 0,
        head: str | None = None,
        init_checkpoint: str | None = None,
        trust_init_checkpoint: bool = False,
        on_nonfinite: str = "raise",
        label_smoothing: float = 0.0,
        lr_scheduler_interval: str = "epoch",
    ) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"`model` must be an nn.Module, got {type(model).__name__}")
        # Factories and modules stay out of hparams: checkpoints then load with
        # torch.load(weights_only=True).
        self.save_hyperparameters(ignore=["model", "penalties", "optimizer", "lr_scheduler"])
        check_non_negative(penalty_warmup_epochs, "penalty_warmup_epochs")
        check_non_negative(freeze_backbone_epochs, "freeze_backbone_epochs", integer=True)
        check_choice(on_nonfinite, "on_nonfinite", ("raise", "skip"))
        check_choice(lr_scheduler_interval, "lr_scheduler_interval", ("epoch", "step"))
        if softplus_beta is not None:
            check_positive(softplus_beta, "softplus_beta")
        penalties = list(penalties or [])
        for i, term in enumerate(penalties):
            if not isinstance(term, PenaltyTerm):
                raise TypeError(
                    f"`penalties[{i}]` must be a robust_train.regularizers.PenaltyTerm, "
                    f"got {term!r}"
                )
            check_declared(term)
        names = [t.name for t in penalties]
        if len(set(names)) != len(names):
            raise ValueError(f"`penalties` must have distinct names (set `name=`), got {names}")
        if init_checkpoint is not None:
            from robust_train.models import load_classifier

            model = load_classifier(
                init_checkpoint,
                model=model,
                trusted=trust_init_checkpoint,
                opt_in="set `trust_init_checkpoint: true` in the model section",
            ).train()
        self.model = (
            softplus(model, softplus_beta, inplace=True) if softplus_beta is not None else model
        )
        self.penalties = nn.ModuleList(penalties)
        # hparams hold constructor arguments only (LightningCLI feeds them back to its parser on
        # --ckpt_path); descriptions of the model and penalties live in `run_config()`.
        self.num_classes = num_classes or infer_num_classes(model)
        self.optimizer_factory = optimizer
        self.scheduler_factory = lr_scheduler
        self.train_acc = MulticlassAccuracy(self.num_classes, average="micro")
        self.val_acc = MulticlassAccuracy(self.num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(self.num_classes, average="micro")
        self._head = find_head(self.model, head).module if freeze_backbone_epochs else None
        self._seconds_before = 0.0  # training time of earlier runs this one resumed from
        self._fit_start: float | None = None
        self._skipped: list[tuple[int, dict[str, float]]] = []  # this epoch's skipped steps
        self._skip_warned = False
        self._val_history = History()

    def run_config(self) -> dict[str, Any]:
        """Readable descriptions of this run for loggers, beside the hyper-parameters.

        Not constructor arguments, so kept out of `self.hparams` (LightningCLI feeds hparams back
        to its parser when a fit resumes). `on_fit_start` sends them to every logger
        (`log_hyperparams`), and checkpoints store them under `checkpoint["robust_train"]`.

        Examples:
            >>> net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
            >>> RobustClassifier(net).run_config()
            {'model_class': 'Sequential', 'penalty_terms': []}
        """
        return {
            "model_class": type(self.model).__name__,
            "penalty_terms": [repr(t) for t in self.penalties],
        }

    @property
    def terms(self) -> list[PenaltyTerm]:
        """The penalty terms (`self.penalties`, an nn.ModuleList, typed)."""
        return [cast(PenaltyTerm, t) for t in self.penalties]

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    # ----------------------------------------------------------------------------------- training
    def penalty_scale(self, batch_idx: int = 0) -> float:
        """Linear warm-up factor in [0, 1] for the penalty weights at this point of training."""
        warmup = self.hparams["penalty_warmup_epochs"]
        if not warmup:
            return 1.0
        n_batches = (
            getattr(self.trainer, "num_training_batches", 1) if self._trainer is not None else 1
        )
        n_batches = n_batches if isinstance(n_batches, int) and n_batches > 0 else 1
        return min(1.0, (self.current_epoch + batch_idx / n_batches) / warmup)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor | None:
        x, y = batch
        check_images(x, "batch images")
        scale = self.penalty_scale(batch_idx)
        logits, x, parts, loss = self._loss_parts(x, y, scale)
        bad = {k: float(v.detach()) for k, v in parts.items() if not torch.isfinite(v.detach())}
        if bad:
            if self.hparams["on_nonfinite"] == "raise":
                raise FloatingPointError(
                    f"non-finite loss part(s) {bad} at epoch {self.current_epoch}, batch "
                    f"{batch_idx}; {NONFINITE_ADVICE}, or set on_nonfinite='skip'"
                )
            self._note_skipped(batch_idx, bad)
            return None
        self.train_acc(logits.detach(), y)
        self._log_train(parts, loss, scale, x.shape[0])
        return loss

    def _loss_parts(
        self, x: Tensor, y: Tensor, scale: float
    ) -> tuple[Tensor, Tensor, dict[str, Tensor], Tensor]:
        """The clean forward, every active term's value and the loss (logits, inputs, parts,
        loss). A term that replaces the task loss (adversarial training, IG-SUM-NORM) carries its
        own cross-entropy: the natural CE is then logged but not optimised; when every active
        term does, no term reuses the clean forward, which then runs without a graph."""
        active = [t for t in self.terms if t.weight * scale > 0]
        replaced = any(t.replaces_task_loss for t in active)
        only_replacing = replaced and all(t.replaces_task_loss for t in active)
        if any(t.reuses_clean_forward for t in active) and not only_replacing:
            x = x.detach().requires_grad_(True)
        with torch.set_grad_enabled(torch.is_grad_enabled() and not only_replacing):
            logits = self.model(x)
            ce = F.cross_entropy(logits, y, label_smoothing=self.hparams["label_smoothing"])
        parts = {"ce": ce}
        loss = ce.detach() * 0.0 if replaced else ce
        for term in active:  # float32 where a term needs it: robust_train.training.precision
            value = penalty_value(term, self.model, x, y, logits).mean()
            parts[f"penalty/{term.name}"] = value
            loss = loss + term.weight * scale * value
        return logits, x, parts, loss

    def _log_train(self, parts: dict[str, Tensor], loss: Tensor, scale: float, n: int) -> None:
        """train/<part> (step and epoch), train/loss, train/acc and the warm-up scale."""
        for key, value in {**parts, "loss": loss}.items():
            self.log(
                f"train/{key}",
                value.detach(),
                on_step=True,
                on_epoch=True,
                prog_bar=key == "loss",
                batch_size=n,
                sync_dist=True,
            )
        if self.hparams["penalty_warmup_epochs"]:
            self.log("train/penalty_scale", scale, on_step=True, on_epoch=False, batch_size=n)
        self.log(
            "train/acc", self.train_acc, on_step=False, on_epoch=True, prog_bar=True, batch_size=n
        )

    def _eval_step(
        self, batch: tuple[Tensor, Tensor], stage: str, metric: MulticlassAccuracy
    ) -> Tensor:
        x, y = batch
        check_images(x, "batch images")
        logits = self.model(x)
        loss = F.cross_entropy(logits, y)
        metric(logits, y)
        self.log(
            f"{stage}/loss",
            loss,
            on_epoch=True,
            prog_bar=stage == "val",
            batch_size=x.shape[0],
            sync_dist=True,
        )
        self.log(
            f"{stage}/acc", metric, on_epoch=True, prog_bar=stage == "val", batch_size=x.shape[0]
        )
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._eval_step(batch, "val", self.val_acc)

    def on_validation_epoch_end(self) -> None:
        """Keep val/acc per epoch in the history that checkpoints carry (`history`)."""
        trainer = self._trainer
        if trainer is None or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        value = trainer.callback_metrics.get("val/acc")
        if value is not None:
            self._val_history.add("val/acc", self.current_epoch, float(value))

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._eval_step(batch, "test", self.test_acc)

    def predict_step(self, batch: Any, batch_idx: int) -> Tensor:
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        return self.model(x).softmax(-1)

    # ------------------------------------------------------------------------ skipped steps
    def _note_skipped(self, batch_idx: int, bad: dict[str, float]) -> None:
        """on_nonfinite='skip': count the step; warn once per fit, at the first one."""
        self._skipped.append((batch_idx, bad))
        if not self._skip_warned:
            self._skip_warned = True
            rank_zero_warn(
                f"non-finite loss part(s) {bad} at epoch {self.current_epoch}, batch {batch_idx}: "
                f"step skipped (on_nonfinite='skip'); {NONFINITE_ADVICE}. Later skipped steps "
                "are counted once per epoch (train/skipped_steps)"
            )

    def on_train_epoch_end(self) -> None:
        """Log `train/skipped_steps` and report this epoch's skipped steps in one line."""
        if self.hparams["on_nonfinite"] != "skip":
            return
        n = len(self._skipped)
        self.log("train/skipped_steps", float(n), on_step=False, on_epoch=True, batch_size=1)
        if n:
            total = getattr(self.trainer, "num_training_batches", None)
            of = f" of {total}" if isinstance(total, int) else ""
            first, parts = self._skipped[0]
            rank_zero_info(
                f"epoch {self.current_epoch}: {n}{of} optimisation steps skipped for non-finite "
                f"loss parts (first at batch {first}: {sorted(parts)})"
            )
        self._skipped = []

    # ------------------------------------------------------------------------------- fine-tuning
    def on_train_epoch_start(self) -> None:
        self._skipped = []
        if self._head is None:
            return
        frozen = self.current_epoch < self.hparams["freeze_backbone_epochs"]
        head_params = {id(p) for p in self._head.parameters()}
        for p in self.model.parameters():
            p.requires_grad_(not frozen or id(p) in head_params)

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer_factory(self.parameters())
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(optimizer)
        self._check_cosine_period(scheduler)
        config = {"scheduler": scheduler, "interval": self.hparams["lr_scheduler_interval"]}
        return {"optimizer": optimizer, "lr_scheduler": config}

    def _check_cosine_period(self, scheduler: Any) -> None:
        """Warn when a cosine decay's period is not the fit's length: past `T_max` the rate of
        `CosineAnnealingLR` climbs back up, which a short fine-tune never means to do."""
        if not isinstance(scheduler, torch.optim.lr_scheduler.CosineAnnealingLR):
            return
        trainer = self._trainer
        if trainer is None:
            return
        per_step = self.hparams["lr_scheduler_interval"] == "step"
        try:
            total = int(trainer.estimated_stepping_batches) if per_step else trainer.max_epochs
        except Exception:  # an infinite or not yet known length: nothing to compare with
            return
        if total is None or total <= 0 or total >= 2**31 or scheduler.T_max == total:
            return
        unit = "optimisation steps" if per_step else "epochs"
        rank_zero_warn(
            f"`CosineAnnealingLR` has T_max={scheduler.T_max} but this fit runs {total} {unit}: "
            + (
                "the learning rate climbs back up after T_max"
                if scheduler.T_max < total
                else "the learning rate never reaches eta_min"
            )
            + f"; set T_max: {total} to decay over the whole fit"
        )

    # ------------------------------------------------------------------------------- checkpoints
    def on_fit_start(self) -> None:
        check_precision(self.trainer, self, self.penalties)  # 16-mixed / torch.compile refusals
        if self.hparams["on_nonfinite"] == "skip" and self.trainer.world_size > 1:
            raise ValueError(
                "`on_nonfinite` 'skip' cannot work under distributed training: Lightning stops a "
                "training_step that returns None on any rank; use on_nonfinite='raise'"
            )
        self._fit_start = time.perf_counter()
        self._skip_warned = False
        if self.hparams["on_nonfinite"] == "skip":  # skipping is on purpose: our warning says it
            warnings.filterwarnings("ignore", message=r"`training_step` returned `None`")
        for logger in self.loggers:  # descriptions beside the hparams in each run's config
            logger.log_hyperparams(self.run_config())

    @property
    def training_seconds(self) -> float:
        """Wall time spent in `fit` so far, including the runs this one resumed from."""
        running = time.perf_counter() - self._fit_start if self._fit_start is not None else 0.0
        return self._seconds_before + running

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        meta = checkpoint.get("robust_train") or {}
        self._seconds_before = float(meta.get("training_seconds") or 0.0)
        points = (meta.get("history") or {}).get("val/acc") or []
        self._val_history = History.from_state({"val/acc": points})

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Record what `load_classifier` and `robust-train evaluate` need to rebuild the model
        and data, and the run's descriptions (`run_config`). The hyper-parameters of the module
        and the datamodule are stored as plain values (paths as strings, any other object as its
        repr), so every checkpoint loads tensors-only, without `--trust-checkpoint`."""
        for key in ("hyper_parameters", "datamodule_hyper_parameters"):
            if key in checkpoint:
                checkpoint[key] = checkpoint_safe(checkpoint[key])
        checkpoint["robust_train"] = {
            "model": try_model_config(self.model),
            "softplus_beta": self.hparams["softplus_beta"],
            "num_classes": self.num_classes,
            "datamodule": try_datamodule_config(self._trainer),
            "penalties": [repr(t) for t in self.penalties],
            "model_class": type(self.model).__name__,
            "training_seconds": self.training_seconds,
            "history": self.history(),
        }

    def history(self) -> dict[str, list[list[float]]]:
        """Per-epoch values logged during the fit: `val/acc` and every monitor's scalars,
        key -> [[epoch, value], ...] (what `robust-train compare` plots per epoch)."""
        callbacks = getattr(self._trainer, "callbacks", None) or []
        kept = [getattr(c, "history", None) for c in callbacks]
        return History.merged(
            [self._val_history, *(h for h in kept if isinstance(h, dict))]
        ).state()
