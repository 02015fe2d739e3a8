"""LipschitzMonitor: the engine's "lipschitz" part, logged while the model trains."""

from __future__ import annotations

from robust_train.callbacks.robustness import RobustnessMonitor

__all__ = ["LipschitzMonitor"]


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

    Examples:
        >>> explainers = ["saliency", "input_x_gradient"]
        >>> monitor = LipschitzMonitor(explainers=explainers, lipschitz_samples=4)
        >>> monitor.settings.explainers, monitor.settings.lipschitz_samples
        (('saliency', 'input_x_gradient'), 4)
    """

    name = "lipschitz"
    preset_parts = ("lipschitz",)
