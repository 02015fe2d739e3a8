"""RobustnessMonitor: fragility, Lipschitz and fidelity monitoring in one callback."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor, nn

from robust_train.callbacks._base import RobustnessCallback
from robust_train.callbacks._checks import check_names
from robust_train.callbacks._figures import Report
from robust_train.callbacks._guard import NONFINITE_KEY
from robust_train.callbacks.fidelity import DEFAULT_FIDELITY_STEPS, FidelityMonitor
from robust_train.callbacks.fragility import DEFAULT_ATTACK_STEPS, DEFAULT_ATTACKS, FragilityMonitor
from robust_train.callbacks.lipschitz import DEFAULT_LIPSCHITZ_SAMPLES, LipschitzMonitor

PARTS = ("fragility", "lipschitz", "fidelity")


class RobustnessMonitor(RobustnessCallback):
    """Run a chosen set of monitors (fragility, lipschitz, fidelity) on one subset and schedule.

    One callback, one held-out subset, one schedule, one prediction pass: the parts are
    `FragilityMonitor` (Ghorbani et al. 2019), `LipschitzMonitor` (Alvarez-Melis & Jaakkola 2018)
    and `FidelityMonitor` (Brocki & Chung 2022), evaluated one after the other. Logs every key
    of the parts, `robustness/seconds/<part>` for each part and `robustness/seconds/total` (the
    whole evaluation, figures included). Setting names follow `EvaluationSettings`
    (`robust-train evaluate`).

    Args:
        include: the parts to run, among "fragility", "lipschitz", "fidelity".
        attacks, attack_explainer, epsilon, n_steps, k: fragility settings (see FragilityMonitor).
        explainers: explainers of the Lipschitz estimate and of the fidelity curves.
        lipschitz_radius: radius of the Lipschitz ball; None: `epsilon` (or its size default).
        lipschitz_samples: explainer calls per image of the Lipschitz estimate.
        fidelity_steps, fidelity_perturbation: fidelity settings (see FidelityMonitor).
        **kwargs: schedule, subset and logging options of `RobustnessCallback`, shared by all parts.

    Example:
        >>> monitor = RobustnessMonitor(include=["fragility", "fidelity"], n_samples=16)
        >>> list(monitor.monitors)
        ['fragility', 'fidelity']
    """

    name = "robustness"

    def __init__(
        self,
        include: Sequence[str] = PARTS,
        *,
        attacks: Sequence[str] = DEFAULT_ATTACKS,
        attack_explainer: str | Callable[..., Any] = "saliency",
        explainers: Sequence[str | Callable[..., Any]] = ("saliency",),
        epsilon: float | None = None,
        n_steps: int = DEFAULT_ATTACK_STEPS,
        k: int | None = None,
        lipschitz_radius: float | None = None,
        lipschitz_samples: int = DEFAULT_LIPSCHITZ_SAMPLES,
        fidelity_steps: int = DEFAULT_FIDELITY_STEPS,
        fidelity_perturbation: str = "mean",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        parts = check_names(include, "include", PARTS)
        shared: dict[str, Any] = dict(
            n_samples=self.n_samples,
            seed=self.seed,
            n_images=self.n_images,
            log_images=self.log_images,
            internal_batch_size=self.internal_batch_size,
        )
        self.monitors: dict[str, RobustnessCallback] = {}
        for part in PARTS:  # fixed order, whatever the order of `include`
            if part not in parts:
                continue
            if part == "fragility":
                self.monitors[part] = FragilityMonitor(
                    attacks,
                    explainer=attack_explainer,
                    epsilon=epsilon,
                    n_steps=n_steps,
                    k=k,
                    **shared,
                )
            elif part == "lipschitz":
                radius = lipschitz_radius if lipschitz_radius is not None else epsilon
                self.monitors[part] = LipschitzMonitor(
                    explainers, radius=radius, lipschitz_samples=lipschitz_samples, **shared
                )
            else:
                self.monitors[part] = FidelityMonitor(
                    explainers,
                    fidelity_steps=fidelity_steps,
                    perturbation=fidelity_perturbation,
                    **shared,
                )

    @property
    def seconds_key(self) -> str:
        return "robustness/seconds/total"

    def resolve(self, height: int, width: int) -> None:
        for monitor in self.monitors.values():
            monitor.resolve(height, width)

    def evaluate(
        self, model: nn.Module, inputs: Tensor, targets: Tensor, predictions: Tensor
    ) -> Report:
        """Each part in turn on the same images and predictions, timed.

        A part that meets non-finite values reports only their count, so the other parts'
        results are kept; `robustness/nonfinite` sums the counts of all parts.
        """
        report = Report()
        nonfinite = 0.0
        for monitor in self.monitors.values():
            monitor.seed, monitor.log_images = self.seed, self.log_images  # a restored seed wins
            start = time.perf_counter()
            part = monitor.evaluate_guarded(model, inputs, targets, predictions)
            nonfinite += part.scalars.pop(NONFINITE_KEY, 0.0)
            report.merge(part)
            report.scalars[monitor.seconds_key] = time.perf_counter() - start
        report.scalars[NONFINITE_KEY] = nonfinite
        return report
