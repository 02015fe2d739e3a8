"""LipschitzMonitor: the local Lipschitz estimate of explainers, logged while the model trains."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor, nn

from robust_train._validation import check_choice, check_positive
from robust_train.callbacks._base import RobustnessCallback
from robust_train.callbacks._checks import (
    check_names,
    check_optional_positive,
    compute_quietly,
    explainer_name,
)
from robust_train.callbacks._figures import Report
from robust_train.evaluation import EvaluationSettings
from robust_train.metrics.lipschitz import LocalLipschitz

DEFAULT_LIPSCHITZ_SAMPLES = 8
SEARCHES = ("random", "gradient")


class LipschitzMonitor(RobustnessCallback):
    """Local Lipschitz estimate of explainers on held-out images (Alvarez-Melis & Jaakkola 2018).

    L(x) = max_{x' in B(x, radius)} ||E(x) - E(x')||_2 / ||x - x'||_2, estimated from below with
    `lipschitz_samples` explainer calls per image (`robust_train.metrics.functional.
    local_lipschitz_estimate`), explaining the predicted class of every image of the subset.
    Logs the mean over images as `robustness/lipschitz/<explainer>` (lower is more robust) and
    `robustness/seconds/lipschitz`. The mean goes through the `LocalLipschitz` metric, so it is
    reduced correctly across DDP ranks. The perturbations are drawn from the same seed at every
    evaluation, so epochs are compared on the same draws.

    Args:
        explainers: explainer names (or callables) to score.
        radius: L_inf radius of the ball; None: the fragility budget for the image size (0.1 up
            to 28 px, else 8/255), as `EvaluationSettings.resolved`.
        lipschitz_samples: explainer calls per image.
        search: "random" sampling or "gradient" ascent on the ratio.
        **kwargs: schedule, subset and logging options of `RobustnessCallback`.

    Example:
        >>> monitor = LipschitzMonitor(["saliency", "input_x_gradient"], lipschitz_samples=4)
        >>> monitor.explainers, monitor.name
        (('saliency', 'input_x_gradient'), 'lipschitz')
    """

    name = "lipschitz"

    def __init__(
        self,
        explainers: Sequence[str | Callable[..., Any]] = ("saliency",),
        *,
        radius: float | None = None,
        lipschitz_samples: int = DEFAULT_LIPSCHITZ_SAMPLES,
        search: str = "random",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.explainers = check_names(explainers, "explainers")
        check_optional_positive(radius, "radius")
        check_positive(lipschitz_samples, "lipschitz_samples", integer=True)
        check_choice(search, "search", SEARCHES)
        self.settings = EvaluationSettings(
            lipschitz_radius=radius, lipschitz_samples=lipschitz_samples
        )
        self.search = search
        self.radius: float | None = None

    def resolve(self, height: int, width: int) -> None:
        """Size-dependent radius, from `EvaluationSettings.resolved`."""
        resolved = dataclasses.replace(self.settings, n_samples=self.n_samples).resolved(
            (height, width)
        )
        self.radius = float(resolved.lipschitz_radius)  # type: ignore[arg-type]

    def evaluate(
        self, model: nn.Module, inputs: Tensor, targets: Tensor, predictions: Tensor
    ) -> Report:
        """Estimate on this rank's images, explaining their predicted class."""
        if self.radius is None:
            self.resolve(inputs.shape[-2], inputs.shape[-1])
        report = Report()
        for explainer in self.explainers:
            metric = LocalLipschitz(
                explainer=explainer,
                seed=self.seed,
                radius=self.radius,
                n_samples=self.settings.lipschitz_samples,
                search=self.search,
                normalize_maps=self.settings.lipschitz_normalize,
                internal_batch_size=self.internal_batch_size,
            ).to(inputs.device)
            if inputs.shape[0]:
                metric.update(model, inputs, predictions)
            mean = compute_quietly(metric)["mean"]
            report.scalars[f"robustness/lipschitz/{explainer_name(explainer)}"] = float(mean)
        return report
