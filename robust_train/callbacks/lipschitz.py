"""LipschitzMonitor: the engine's "lipschitz" part, logged while the model trains."""

from __future__ import annotations

from typing import Any

from robust_train._options import takes_options
from robust_train.callbacks._base import RobustnessCallback
from robust_train.callbacks.robustness import BASE_OPTIONS, RobustnessMonitor
from robust_train.evaluation import MONITOR_DEFAULTS, EvaluationSettings

__all__ = ["LipschitzMonitor"]


@takes_options(
    EvaluationSettings,
    defaults=MONITOR_DEFAULTS,
    exclude=BASE_OPTIONS,
    also=RobustnessCallback.__init__,
)
class LipschitzMonitor(RobustnessMonitor):
    """Local Lipschitz estimate of explainers on held-out images (Alvarez-Melis & Jaakkola 2018).

    L(x) = max_{x' in B(x, radius)} ||E(x) - E(x')||_2 / ||x - x'||_2, estimated from below with
    `lipschitz_samples` explainer calls per image, explaining the predicted class. Logs the mean
    over images as `robustness/lipschitz/<explainer>/lipschitz` (lower is more robust) and
    `robustness/seconds/lipschitz`. The perturbations are drawn from the same seed at every
    evaluation, so epochs are compared on the same draws; the radius defaults to the attack
    budget for the image size.

    Args:
        **options: the evaluation settings and the callback's schedule, subset and logging
            options, as for `RobustnessMonitor`.

    Example:
        >>> explainers = ["saliency", "input_x_gradient"]
        >>> monitor = LipschitzMonitor(explainers=explainers, lipschitz_samples=4)
        >>> monitor.settings.explainers, monitor.settings.lipschitz_samples
        (('saliency', 'input_x_gradient'), 4)
    """

    name = "lipschitz"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(include=("lipschitz",), **kwargs)
