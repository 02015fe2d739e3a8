"""RobustnessCallback: the schedule, held-out subset, modes and logging all monitors share."""

from __future__ import annotations

import copy
import os
import time
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor, nn
from typing_extensions import override

from robust_train.callbacks._budget import OverheadBudget
from robust_train.callbacks._diverged import (
    NONFINITE_KEY,
    count_nonfinite,
    evaluated_model,
    guarded,
    warnings_once,
)
from robust_train.callbacks._first_pass import step_seconds
from robust_train.callbacks._logger_media import MediaWriter
from robust_train.callbacks._subset import SPLITS, from_tensors, from_trainer, select, shard
from robust_train.callbacks.figures import Report
from robust_train.core.devices import check_device_choice, parse_devices, resolve_device
from robust_train.core.history import History
from robust_train.core.runtime import modes_restored, predict
from robust_train.core.validation import check_choice, check_non_negative, check_positive

__all__ = ["RobustnessCallback"]

STAGES = ("train", "validation")
DEFAULT_N_SAMPLES = 16
INFERENCE_MODE_ERROR = (
    "{name}(stage='validation') computes input gradients, which torch.inference_mode forbids, and "
    "this Trainer runs validation under inference mode: build the Trainer with "
    "`inference_mode=False`, or use stage='train' (runs in on_train_epoch_end, after validation)"
)


class RobustnessCallback(Callback):
    """Base of the robustness monitors: when to run, on which images, and how results are logged.

    Schedule: after training epoch `e` when `(e + 1) % every_n_epochs == 0` (0: once, when fit
    ends), unless that would take the monitor over `max_overhead` of the fit's wall time (see
    `OverheadBudget`): an evaluation takes only the images of the subset that fit in the room
    left (`robustness/images/<name>` logs how many); the first one is planned like any other
    from an estimate of its cost per image (one timed attack step times the evaluation's work
    per image; a monitor that cannot estimate times one image first), the last epoch when an
    image fits; the first skip is logged as info. So short fits are evaluated at few epochs
    and longer fits or larger datasets at more (or all); on large images the evaluations shrink
    (the design notes give the cost on digits). Pass `max_overhead=None` for every scheduled
    epoch on every image.
    With `stage="train"` (default) it runs in `on_train_epoch_end`, where gradients exist and that
    epoch's validation has already run; with `stage="validation"` in `on_validation_epoch_end` of
    the scheduled epochs (Lightning validates under no_grad during fit, which the callback lifts; it
    also runs on every `trainer.validate()`, where a loop under `torch.inference_mode`, the Trainer
    default, is refused in `setup`). Never during the sanity check.

    Images: a subset of `n_samples` images drawn once with `seed` from `trainer.datamodule`'s
    `val`/`test` dataloader (else the LightningModule's or the Trainer's), or from `inputs` and
    `targets`. Under DDP each rank evaluates `subset[rank::world_size]` and the torchmetrics
    states are reduced across ranks, so every rank logs the same values.

    Every evaluation puts the module in eval mode and restores each submodule's own flag after,
    takes gradients with `torch.autograd.grad` w.r.t. inputs only (parameter `.grad` is never
    touched), logs its scalars with `LightningModule.log` (any logger, `trainer.callback_metrics`)
    and `robustness/seconds/<name>`, and its figures through `MediaWriter` (never fatal).
    `state_dict` keeps the epochs already evaluated, the subset seed and the time budget, so a
    resumed run keeps the same images, schedule and budget.

    Args:
        every_n_epochs: evaluate every n-th epoch; 0 evaluates once, at the end of fit.
        max_overhead: cap on the monitor's share of the fit's wall time (0.1: 10 %); None runs
            every scheduled epoch.
        n_samples: size of the held-out subset (attacks use its correctly classified images).
        split: "val" or "test": the dataloader the subset comes from.
        stage: "train" or "validation" (see above).
        inputs, targets: held-out images (B, C, H, W) in [0, 1] and labels (B,), instead of the
            datamodule.
        seed: seed of the subset and of every random draw of the evaluations; None draws one
            (kept in the checkpoint).
        log_images: log figures (example grids, curves) besides scalars.
        n_images: images shown in the example grids.
        internal_batch_size: largest batch of the attacks' and metrics' inner computations.
        accelerator: where the evaluations run, in Lightning's names ("cpu", "gpu"/"cuda",
            "mps", "auto"); None (default): the trained module's device. Another device
            evaluates a copy of the model there (the training model is not moved).
        devices: which device of `accelerator` ("auto"/1: the first, or one index "1,"),
            resolved with `robust_train.core.devices.resolve_device`.
    """

    name = "robustness"

    def __init__(
        self,
        *,
        every_n_epochs: int = 1,
        n_samples: int = DEFAULT_N_SAMPLES,
        split: str = "val",
        stage: str = "train",
        inputs: Tensor | None = None,
        targets: Tensor | None = None,
        seed: int | None = 0,
        log_images: bool = True,
        n_images: int = 4,
        internal_batch_size: int | None = None,
        max_overhead: float | None = 0.1,
        accelerator: str | None = None,
        devices: int | str | list[int] = "auto",
    ) -> None:
        super().__init__()
        if accelerator is not None:
            check_device_choice(accelerator)
            parse_devices(devices)
        self.accelerator, self.devices = accelerator, devices
        check_non_negative(every_n_epochs, "every_n_epochs", integer=True)
        check_positive(n_samples, "n_samples", integer=True)
        check_choice(split, "split", SPLITS)
        check_choice(stage, "stage", STAGES)
        check_non_negative(n_images, "n_images", integer=True)
        if seed is not None:
            check_non_negative(seed, "seed", integer=True)
        if internal_batch_size is not None:
            check_positive(internal_batch_size, "internal_batch_size", integer=True)
        if (inputs is None) != (targets is None):
            raise ValueError(
                "pass both `inputs` and `targets`, or neither (then the datamodule's "
                f"{split} dataloader gives the images)"
            )
        self.every_n_epochs, self.n_samples = every_n_epochs, n_samples
        self.split, self.stage = split, stage
        self.seed = int.from_bytes(os.urandom(4), "little") >> 1 if seed is None else seed
        self.log_images, self.n_images = log_images, n_images
        self.internal_batch_size = internal_batch_size
        self._tensors = None if inputs is None else from_tensors(inputs, targets)
        self._subset: tuple[Tensor, Tensor] | None = None
        self._resolved_size: tuple[int, int] | None = None
        self.evaluated_epochs: list[int] = []
        self.history = History()  # key -> (epoch, value) logged
        self.budget = OverheadBudget(max_overhead)
        self._skip_noted = False
        self._planned: int | None = None  # images of the evaluation `should_run` let through
        self._probe_seconds = 0.0
        self._estimated = False  # the budget's cost per image is `_estimate_first`'s
        self._correct: Tensor | None = None  # the held-out images classified correctly, per run
        self._nonfinite_warned = False
        self._warned_at: set[tuple[str, int]] = set()  # places whose warning was passed on
        self.last_report: Report | None = None
        self.media = MediaWriter(type(self).__name__)

    # ------------------------------------------------------------------------- for subclasses
    def resolve(self, height: int, width: int) -> None:
        """Fix size-dependent settings (epsilon, k, ...) before the first evaluation."""

    def evaluate(
        self, model: nn.Module, inputs: Tensor, targets: Tensor, predictions: Tensor
    ) -> Report:
        """Evaluate this rank's images (model in eval mode, gradients on); return the report."""
        raise NotImplementedError

    @property
    def seconds_key(self) -> str:
        return f"robustness/seconds/{self.name}"

    def keys(self) -> tuple[str, ...]:
        """The scalar keys this monitor logs, when known before a fit (for the collision check
        at fit start); () when not known (a custom monitor need not say)."""
        return ()

    # ------------------------------------------------------------------------------- hooks
    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(
            name=self.name,
            every_n_epochs=self.every_n_epochs,
            split=self.split,
            stage=self.stage,
            n_samples=self.n_samples,
        )

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            check_distinct_keys(trainer.callbacks)  # type: ignore[attr-defined]
        if self.accelerator is not None:  # a device this machine lacks: refused before any work
            resolve_device(self.accelerator, self.devices)
        if self.stage != "validation":
            return
        loop = trainer.fit_loop.epoch_loop.val_loop if stage == "fit" else trainer.validate_loop
        if stage in ("fit", "validate") and getattr(loop, "inference_mode", True):
            raise RuntimeError(INFERENCE_MODE_ERROR.format(name=type(self).__name__))

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Check every setting against the data's image size now, not after the first epoch."""
        self.resolve_size(*self.held_out(trainer)[0].shape[-2:])

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.budget.start()

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.stage == "train" and self.should_run(trainer, trainer.current_epoch):
            self.run(trainer, pl_module)

    @override
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.stage != "validation" or trainer.sanity_checking:
            return
        fitting = trainer.state.fn == "fit"
        if not fitting or self.should_run(trainer, trainer.current_epoch):
            self.run(trainer, pl_module, record=fitting)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        last = max(trainer.current_epoch - 1, 0)
        if 0 < trainer.current_epoch < self.every_n_epochs and not self.evaluated_epochs:
            rank_zero_info(
                f"{type(self).__name__}: no epoch of this fit was due (every_n_epochs="
                f"{self.every_n_epochs}, {trainer.current_epoch} epoch(s) run), so nothing was "
                "evaluated; evaluate the final model with `robust-train evaluate`, or lower "
                "every_n_epochs"
            )
        if self.every_n_epochs == 0 and last not in self.evaluated_epochs:
            self.budget.allows(is_last=True)  # accounts the fit's time
            self._estimate_first(trainer)
            self._planned = self.budget.images(len(self.held_out(trainer)[1]), is_last=True)
            if self._planned == 0 and self.budget.per_image is not None:  # a resumed fit's
                self._note_final_skipped(last)
                return
            self.run(trainer, pl_module, epoch=last, via_module=False)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "evaluated_epochs": list(self.evaluated_epochs),
            "seed": self.seed,
            "budget": self.budget.state_dict(),
            "history": self.history.state(),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.evaluated_epochs = [int(e) for e in state_dict.get("evaluated_epochs", [])]
        self.seed = int(state_dict.get("seed", self.seed))
        self.budget.load_state_dict(state_dict.get("budget", {}))
        self.history = History.from_state(state_dict.get("history"))
        self._subset = None

    # ------------------------------------------------------------------------------ running
    def due(self, epoch: int) -> bool:
        """Whether the schedule evaluates after epoch `epoch` (0-based) and it was not done yet."""
        return (
            self.every_n_epochs > 0
            and (epoch + 1) % self.every_n_epochs == 0
            and epoch not in self.evaluated_epochs
        )

    def should_run(self, trainer: pl.Trainer, epoch: int) -> bool:
        """`due(epoch)` and within the overhead budget (rank 0 decides for all ranks under DDP)."""
        if not self.due(epoch):
            return False
        max_epochs = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
        is_last = max_epochs is not None and epoch >= max_epochs - 1
        progress = (epoch + 1) / max_epochs if max_epochs is not None else None
        allowed = self.budget.allows(is_last=is_last, progress=progress)
        n_total = len(self.held_out(trainer)[1])
        self._estimate_first(trainer)
        planned = self.budget.images(n_total, is_last=is_last, progress=progress)
        allowed, self._planned = allowed and planned > 0, planned
        if trainer.world_size > 1:
            allowed = bool(trainer.strategy.broadcast(allowed, src=0))
            self._planned = int(trainer.strategy.broadcast(planned, src=0))
        if not allowed and is_last:
            self._note_final_skipped(epoch)
        elif not allowed and not self._skip_noted:
            self._skip_noted = True
            cost = self.budget.last_cost
            measured = (
                f"last evaluation {cost:.2f}s"
                if cost is not None
                else f"one image estimated at {self.budget.per_image or 0.0:.2f}s"
            )
            rank_zero_info(
                f"{type(self).__name__}: skipping epoch {epoch} (and later ones when needed) "
                "to keep "
                f"its share of the fit's time under max_overhead={self.budget.max_overhead} "
                f"({measured}); pass max_overhead=None to run every scheduled epoch"
            )
        return allowed

    def work_per_image(self) -> float | None:
        """The work of one evaluation per image, in attack steps (`total_work`), when the
        monitor knows it before running (None: its first evaluation times one image instead)."""
        return None

    def _estimate_first(self, trainer: pl.Trainer) -> None:
        """Before the first evaluation under a cap, estimate its cost per image from one timed
        gradient step (`_first_pass`), so that a first pass that would exceed the cap is
        skipped or shrunk like any other; the step's seconds count as the monitor's."""
        budget, work = self.budget, self.work_per_image()
        if budget.max_overhead is None or budget.per_image is not None or not work:
            return
        pl_module = trainer.lightning_module
        image = self.held_out(trainer)[0][:1].to(self.device_for(pl_module))
        model = evaluated_model(pl_module)
        if image.device != pl_module.device:
            model = copy.deepcopy(model).to(image.device)
        with modes_restored(pl_module):
            seconds = step_seconds(model, image)
        budget.spend(seconds)
        budget.per_image = seconds * work
        self._estimated = True

    def _note_final_skipped(self, epoch: int) -> None:
        per_image = self.budget.per_image or 0.0
        rank_zero_info(
            f"{type(self).__name__}: the last epoch ({epoch}) is not evaluated: one image costs "
            f"{per_image:.2f}s, more than max_overhead={self.budget.max_overhead} of the fit's "
            "time leaves; evaluate the final model with `robust-train evaluate`, or raise "
            "max_overhead (None: every scheduled epoch on every image)"
        )

    def device_for(self, pl_module: pl.LightningModule) -> torch.device:
        """Where evaluations run: `accelerator`/`devices` when given, else the module's."""
        if self.accelerator is None:
            return pl_module.device
        return resolve_device(self.accelerator, self.devices)

    def resolve_size(self, height: int, width: int) -> None:
        """`resolve` once, for the held-out images' size; a bad setting raises, naming the
        monitor and the size."""
        if self._resolved_size == (height, width):
            return
        try:
            self.resolve(height, width)
        except (ValueError, TypeError) as err:
            raise type(err)(f"{type(self).__name__} on {height}x{width} images: {err}") from err
        self._resolved_size = (height, width)

    def held_out(self, trainer: pl.Trainer | None) -> tuple[Tensor, Tensor]:
        """The whole subset (all ranks), on the CPU; taken on first use and kept."""
        if self._subset is None:
            if self._tensors is not None:
                self._subset = select(*self._tensors, self.n_samples, self.seed)
            elif trainer is None:
                raise ValueError("no `inputs`/`targets` given and no Trainer to take images from")
            else:
                self._subset = from_trainer(trainer, self.split, self.n_samples, self.seed)
        return self._subset

    def evaluate_guarded(
        self, model: nn.Module, inputs: Tensor, targets: Tensor, predictions: Tensor
    ) -> Report:
        """`evaluate`, or a report of only `robustness/nonfinite` when it meets NaN/inf values."""
        return guarded(lambda: self.evaluate(model, inputs, targets, predictions))

    def _note_nonfinite(self, report: Report, epoch: int, *, weights: bool) -> None:
        """Warn once per run (rank zero) when an evaluation met non-finite values."""
        count = report.scalars.get(NONFINITE_KEY, 0.0)
        if not count or self._nonfinite_warned:
            return
        self._nonfinite_warned = True
        where = "weights of the model" if weights else "explanations or scores"
        rank_zero_warn(
            f"{type(self).__name__}: epoch {epoch}: {int(count)} non-finite value(s) in the "
            f"{where}, so {'nothing' if weights else 'not everything'} was measured; "
            f"`{NONFINITE_KEY}` logs the count at each evaluation and training goes on (a "
            "diverged fit: lower the learning rate or the penalty weight)"
        )

    def run(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        *,
        epoch: int | None = None,
        via_module: bool = True,
        record: bool = True,
    ) -> Report:
        """Evaluate now on this rank's shard and log; returns the report (also `last_report`).

        Under a cap (`max_overhead`) it evaluates the images the budget planned (a prefix of
        the subset, `OverheadBudget.images`); with no cost per image measured yet, it first
        times one image (its seconds count as the monitor's) and plans from that."""
        start = time.perf_counter()
        epoch = trainer.current_epoch if epoch is None else epoch
        inputs, targets = self.held_out(trainer)
        self.resolve_size(inputs.shape[-2], inputs.shape[-1])
        n_images, probe = self._pass_images(trainer, pl_module, inputs, targets, record)
        if probe is not None and n_images <= 1:
            report, n_bad = probe
        else:
            report, n_bad = self._evaluate_now(
                trainer, pl_module, inputs[:n_images], targets[:n_images]
            )
        self._note_nonfinite(report, epoch, weights=bool(n_bad))
        if record and self.budget.max_overhead is not None:
            report.scalars[self.seconds_key.replace("/seconds/", "/images/")] = float(n_images)
        if self.log_images:
            self.media.write_media(trainer, report, epoch)
        seconds = time.perf_counter() - start
        report.scalars[self.seconds_key] = seconds
        if record:
            if self._estimated:  # the measured cost replaces the estimate
                self.budget.per_image, self._estimated = None, False
            self.budget.record(seconds - self._probe_seconds, self._costly(n_images))
            self.budget.spent_seconds += self._probe_seconds
            report.scalars[self.seconds_key.replace("/seconds/", "/share/")] = self.budget.share
        if via_module:
            sync = trainer.world_size > 1
            for key, value in report.scalars.items():
                pl_module.log(
                    key, float(value), on_step=False, on_epoch=True, sync_dist=sync, batch_size=1
                )
        else:
            self.media.write_scalars(trainer, report.scalars)
        if record:
            self.evaluated_epochs.append(epoch)
            self.history.add_all(epoch, report.scalars)
        self.last_report = report
        return report

    def _evaluate_now(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        inputs: Tensor,
        targets: Tensor,
    ) -> tuple[Report, int]:
        """Evaluate this rank's shard of `inputs` on the monitor's device; (report, non-finite
        weights)."""
        inputs, targets = shard(inputs, targets, trainer.global_rank, trainer.world_size)
        device = self.device_for(pl_module)
        inputs, targets = inputs.to(device), targets.to(device)
        model = evaluated_model(pl_module)
        with modes_restored(pl_module), torch.enable_grad(), warnings_once(self._warned_at):
            if torch.is_inference_mode_enabled():
                raise RuntimeError(INFERENCE_MODE_ERROR.format(name=type(self).__name__))
            pl_module.eval()
            if device != pl_module.device:
                model = copy.deepcopy(model).to(device)
            n_bad = count_nonfinite(model)  # the same on every rank: DDP keeps weights equal
            if n_bad:
                return Report(scalars={NONFINITE_KEY: float(n_bad)}), n_bad
            predictions = predict(model, inputs, self.internal_batch_size)
            self._correct = (predictions == targets).cpu()  # what the attacks attack
            return self.evaluate_guarded(model, inputs, targets, predictions), 0

    def _correct_mask(
        self, pl_module: pl.LightningModule, inputs: Tensor, targets: Tensor
    ) -> Tensor:
        """Which held-out images the model classifies correctly now (on the CPU)."""
        model = evaluated_model(pl_module)
        device = pl_module.device
        with modes_restored(pl_module):
            pl_module.eval()
            predictions = predict(model, inputs.to(device), self.internal_batch_size)
        return predictions.cpu() == targets.cpu()

    def _costly(self, n_images: int) -> int:
        """The images of the evaluation just run that cost the most: the correctly classified
        ones, which the attacks attack (at least one), so that the cost per image is an upper
        bound when more images become correct as the model trains."""
        if self._correct is None:
            return n_images
        return max(int(self._correct.sum()), 1)

    def _pass_images(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        inputs: Tensor,
        targets: Tensor,
        record: bool,
    ) -> tuple[int, tuple[Report, int] | None]:
        """(images of this evaluation, the one-image probe's result when one ran)."""
        self._probe_seconds, n_total = 0.0, len(targets)
        self._correct = None  # set by `_evaluate_now`
        planned, self._planned = self._planned, None
        budget = self.budget
        if not record or budget.max_overhead is None or planned is None:
            return n_total, None
        if budget.per_image is not None or n_total <= 1:
            return max(min(planned, n_total), 1), None
        start = time.perf_counter()
        correct = self._correct_mask(pl_module, inputs, targets)  # once, before the first
        at = int(correct.float().argmax())  # a correct image: the attacks' cost is timed
        probe = self._evaluate_now(trainer, pl_module, inputs[at : at + 1], targets[at : at + 1])
        self._probe_seconds = time.perf_counter() - start
        budget.per_image = self._probe_seconds
        budget.spent_seconds += self._probe_seconds
        n_images = max(budget.images(n_total, is_last=True), 1)  # the probe's image at least
        budget.spent_seconds -= self._probe_seconds  # added back with the evaluation's own time
        if trainer.world_size > 1:
            n_images = int(trainer.strategy.broadcast(n_images, src=0))
        return n_images, probe


def check_distinct_keys(callbacks: list[Any]) -> None:
    """Refuse two monitors that would log one key: Lightning would average their values into a
    number neither measured.

    Examples:
        >>> class M(RobustnessCallback):
        ...     def keys(self):
        ...         return ("robustness/a",)
        >>> check_distinct_keys([M(), M()])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: M and M would both log 'robustness/a' ...
    """
    owner: dict[str, str] = {}
    for callback in callbacks:
        if not isinstance(callback, RobustnessCallback):
            continue
        name = type(callback).__name__
        for key in callback.keys():
            if key in owner:
                raise ValueError(
                    f"{owner[key]} and {name} would both log {key!r} (Lightning would average "
                    "their values into a number neither measured); keep one monitor per measure, "
                    "e.g. RobustnessMonitor(parts=[...]) with the parts you want"
                )
            owner[key] = name
