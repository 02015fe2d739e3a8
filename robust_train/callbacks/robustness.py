"""RobustnessMonitor: the evaluation engine's parts, logged while the model trains.

One callback, one held-out subset, one schedule, one prediction pass; it measures through the
same engine as `robust-train evaluate` (`robust_train.evaluation.run_parts`) and logs every key
under `robustness/` (`robustness/attack/saliency/topk/topk_intersection`, the key that
`results.json` holds as `attack/saliency/topk/topk_intersection`). `FragilityMonitor`,
`LipschitzMonitor` and `FidelityMonitor` are this monitor with one part.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.callbacks._base import RobustnessCallback
from robust_train.callbacks._checks import check_names, compute_quietly
from robust_train.callbacks._diverged import NONFINITE_KEY, nonfinite_count
from robust_train.callbacks._masks import masks_from_trainer, masks_of
from robust_train.callbacks.figures import Curves, Report, first_examples
from robust_train.core.options import build_options, takes_options
from robust_train.evaluation import (
    MONITOR_DEFAULTS,
    PARTS,
    Evaluation,
    EvaluationPart,
    EvaluationSettings,
    build_parts,
    measure_of,
    run_parts,
    total_work,
)
from robust_train.metrics.keyed import KeyedMean

__all__ = ["PREFIX", "RobustnessMonitor"]

PREFIX = "robustness/"
# The parts whose maps are scored against ground-truth masks (`evaluation.parts.ground_truth`).
LOCALISED_PARTS = ("fragility", "input_reference")
# Options the callback base class owns (the subset and its draws); the settings get them from it.
BASE_OPTIONS = ("n_samples", "seed", "internal_batch_size", "parts")


def _monitor_options(cls: type) -> type:
    """Give a monitor class the evaluation settings and the callback options as its keyword
    arguments (what `help()`, IDEs and LightningCLI configs see)."""
    return takes_options(
        EvaluationSettings,
        defaults=MONITOR_DEFAULTS,
        exclude=BASE_OPTIONS,
        also=RobustnessCallback.__init__,
    )(cls)


@_monitor_options
class RobustnessMonitor(RobustnessCallback):
    """Run evaluation parts (fragility, lipschitz, fidelity, ...) on held-out images in training.

    The parts are those of `robust_train.evaluation.PARTS` (one file each): fragility attacks on
    the explanations (Ghorbani et al. 2019), the local Lipschitz estimate (Alvarez-Melis &
    Jaakkola 2018), MIF/LIF fidelity (Brocki & Chung 2022), and any part registered since. Logs
    `robustness/<key>` for every key of the parts (the engine's key scheme), the seconds of each
    part (`robustness/seconds/<part>`) and of the whole evaluation (`robustness/seconds/total`),
    and mean curves and example grids as figures. Values are reduced across DDP ranks by
    `robust_train.metrics.KeyedMean`.

    Where the datamodule has ground-truth masks of the evidence (a `masks(split)` method, as
    `robust_train.data.ClutteredMNIST5kDataModule`), the fragility and input_reference parts
    also log the localisation of the clean maps (`robustness/localisation/<explainer>/<measure>`)
    and of the attacked maps (`robustness/attack/<explainer>/<attack>/<measure>`): relevance
    mass accuracy, relevance rank accuracy (Arras et al. 2022) and the pointing game (Zhang et
    al. 2018), as `robust-train evaluate` reports them.

    Args:
        parts: the evaluation parts to run (names in `robust_train.evaluation.PARTS`).
        localisation: score the maps against the datamodule's masks: None (default) where the
            datamodule has them, True always (a fit whose datamodule has none is refused when
            it starts), False never.
        **options: the evaluation settings (`EvaluationSettings` fields: attacks,
            explainers, epsilon, n_steps, lipschitz_samples, fidelity_steps,
            ...), with the cheap monitor defaults `robust_train.evaluation.MONITOR_DEFAULTS`
            (3 attack steps, 16 images, saliency), and the schedule, subset and logging options
            of `RobustnessCallback` (every_n_epochs, n_samples, split, seed, max_overhead, ...).

    Examples:
        >>> monitor = RobustnessMonitor(parts=["fidelity", "fragility"], n_samples=16)
        >>> [p.name for p in monitor.parts], monitor.settings.n_steps
        (['fragility', 'fidelity'], 3)
    """

    name = "robustness"
    preset_parts: tuple[str, ...] = ()  # a preset subclass: the one set of parts it runs

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that sets `preset_parts` is a preset: it takes every option but `parts`."""
        super().__init_subclass__(**kwargs)
        if cls.preset_parts and "__init__" not in cls.__dict__:
            preset = cls.preset_parts

            def __init__(self: RobustnessMonitor, **options: Any) -> None:
                RobustnessMonitor.__init__(self, parts=preset, **options)

            cls.__init__ = __init__  # type: ignore[method-assign,assignment]
            _monitor_options(cls)

    def __init__(
        self,
        parts: Sequence[str] = ("fragility", "lipschitz", "fidelity"),
        localisation: bool | None = None,
        **kwargs: Any,
    ) -> None:
        own = set(inspect.signature(RobustnessCallback.__init__).parameters) - {"self"}
        super().__init__(**{k: kwargs.pop(k) for k in list(kwargs) if k in own})
        chosen = check_names(parts, "parts", tuple(PARTS))
        ordered = tuple(p for p in PARTS if p in chosen)  # registration order, whatever `parts`
        given = {"parts": ordered, "n_samples": self.n_samples, "seed": self.seed}
        given["internal_batch_size"] = self.internal_batch_size
        self.settings: EvaluationSettings = build_options(
            EvaluationSettings,
            {**kwargs, **given},
            where=type(self).__name__,
            defaults=MONITOR_DEFAULTS,
        )
        self.parts: list[EvaluationPart] = [PARTS[p](self.settings) for p in ordered]
        if localisation is not None and not isinstance(localisation, bool):
            raise ValueError(f"`localisation` must be None, True or False, got {localisation!r}")
        if localisation and not set(ordered) & set(LOCALISED_PARTS):
            raise ValueError(
                f"`localisation=True` scores the maps of the parts {list(LOCALISED_PARTS)}; "
                f"`parts` has neither: {list(ordered)}"
            )
        self.localisation = localisation
        self._masks: Tensor | None = None  # the held-out subset's masks, when localised

    def keys(self) -> tuple[str, ...]:
        """Every scalar key this monitor logs (besides seconds and shares), known before a fit
        (the localisation keys once the masks are known, or with `localisation=True`)."""
        keys: list[str] = []
        localised = self.localisation is True or self._masks is not None
        for part in self.parts:
            saved = part.masks
            if localised and part.name in LOCALISED_PARTS and saved is None:
                part.masks = torch.zeros(0, dtype=torch.bool)  # its keys with masks
            try:
                keys += [PREFIX + key for key in part.keys()]
            finally:
                part.masks = saved
        return tuple(keys)

    def held_out(self, trainer: Any) -> tuple[Tensor, Tensor]:
        """The subset (as `RobustnessCallback.held_out`), and its masks when localised."""
        fresh = self._subset is None
        subset = super().held_out(trainer)
        if fresh:
            self._masks = self._held_out_masks(trainer, subset[0])
        return subset

    def _held_out_masks(self, trainer: Any, inputs: Tensor) -> Tensor | None:
        if self.localisation is False or not {p.name for p in self.parts} & set(LOCALISED_PARTS):
            return None
        given = self._tensors is not None or trainer is None
        masks = (
            None if given else masks_from_trainer(trainer, self.split, self.n_samples, self.seed)
        )
        if masks is None:
            if self.localisation:
                where = "the images given to it" if given else (
                    f"{type(getattr(trainer, 'datamodule', None)).__name__}"
                )  # fmt: skip
                raise ValueError(
                    f"{type(self).__name__}: `localisation=True` needs ground-truth masks, from "
                    f"a datamodule with a `masks(split)` method; {where} has none"
                )
            return None
        if masks.shape[0] != inputs.shape[0] or masks.shape[-2:] != inputs.shape[-2:]:
            raise ValueError(
                f"{type(self).__name__}: the datamodule's {self.split} masks "
                f"{tuple(masks.shape)} do not fit its held-out images {tuple(inputs.shape)}"
            )
        return masks

    @property
    def seconds_key(self) -> str:
        """`robustness/seconds/total` when several parts run (each also gets its own key),
        else `robustness/seconds/<name>`."""
        return f"{PREFIX}seconds/total" if len(self.parts) > 1 else super().seconds_key

    def work_per_image(self) -> float | None:
        """The work per image of one evaluation of every part, in attack steps (`total_work`)."""
        return total_work(self.parts, 1)

    def resolve(self, height: int, width: int) -> None:
        """Bind the parts to the settings resolved for this image size (checked now)."""
        self.settings = dataclasses.replace(self.settings, seed=self.seed)
        self.parts = build_parts(self.settings, height, width)

    def evaluate(
        self, model: nn.Module, inputs: Tensor, targets: Tensor, predictions: Tensor
    ) -> Report:
        """Run each part on this rank's images and reduce across ranks. A part that meets
        non-finite values reports only their count (`robustness/nonfinite`, summed over the
        parts), so the other parts' results are kept."""
        if self.settings.seed != self.seed:  # a resumed fit restored its subset seed
            self._resolved_size = None
        self.resolve_size(*inputs.shape[-2:])  # a no-op once resolved for this size
        report, nonfinite = Report(), 0.0
        for part in self.parts:
            start = time.perf_counter()
            try:
                evaluation = run_parts(
                    model,
                    inputs,
                    targets,
                    parts=[part],
                    predictions=predictions,
                    masks=self._masks_for(part, inputs),
                )
                report.merge(self._part_report(part, evaluation, inputs.device))
            except (ValueError, FloatingPointError) as err:
                count = nonfinite_count(err)
                if count is None:
                    raise
                nonfinite += count
            if len(self.parts) > 1:
                report.scalars[f"{PREFIX}seconds/{part.name}"] = time.perf_counter() - start
        report.scalars[NONFINITE_KEY] = nonfinite
        return report

    def _masks_for(self, part: EvaluationPart, inputs: Tensor) -> Tensor | None:
        if self._masks is None or self._subset is None or part.name not in LOCALISED_PARTS:
            return None
        return masks_of(inputs, self._subset[0], self._masks)

    def _part_report(
        self, part: EvaluationPart, evaluation: Evaluation, device: torch.device
    ) -> Report:
        """The scalars, mean curves and example grids of one part's evaluation."""
        reduced = self._reduce([part], evaluation, device)
        report = Report(scalars={PREFIX + key: float(reduced[key]) for key in part.keys()})
        for key, (_, lines) in part.curve_keys().items():
            curve = evaluation.curves[key]
            report.curves[PREFIX + key] = Curves(
                title=key,
                xs=curve.xs,
                xname=curve.xname,
                lines={line: reduced[f"{key}/{line}"].tolist() for line in lines},
            )
        if self.log_images and self.n_images:
            for key, ex in evaluation.examples.items():
                report.examples[PREFIX + key] = first_examples(ex, self.n_images)
        return report

    @staticmethod
    def _reduce(
        parts: list[EvaluationPart], evaluation: Evaluation, device: torch.device
    ) -> dict[str, Tensor]:
        """Means (sums for counts) of every key and mean curves, across DDP ranks."""
        shapes: dict[str, tuple[int, ...]] = {k: () for p in parts for k in p.keys()}
        values = {k: evaluation.values[k] for k in shapes}
        for part in parts:
            for key, (points, lines) in part.curve_keys().items():
                for line in lines:
                    shapes[f"{key}/{line}"] = (points,)
                    values[f"{key}/{line}"] = evaluation.curves[key].lines[line]
        sums = tuple(k for p in parts for k in p.keys() if measure_of(k).reduce == "sum")
        metric = KeyedMean(shapes, sums=sums).to(device)
        metric.update(values)
        return compute_quietly(metric)
