"""LipschitzMonitor: the local Lipschitz estimate of explainers, logged while the model trains."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor, nn

from robust_train._runtime import check_optional_positive
from robust_train._validation import check_choice, check_positive
from robust_train.attacks.defaults import default_epsilon
from robust_train.callbacks._base import RobustnessCallback
from robust_train.callbacks._checks import check_names, compute_quietly, explainer_name
from robust_train.callbacks._figures import Report
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
            to 28 px, else 8/255), `robust_train.attacks.defaults.default_epsilon`.
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
        self.lipschitz_samples, self.search = lipschitz_samples, search
        self.normalize_maps = "max"  # as the evaluation suite: compare explanation shapes
        self._radius, self.radius = radius, radius

    def resolve(self, height: int, width: int) -> None:
        """Size-dependent radius: the given one, else the attack budget for this image size."""
        self.radius = self._radius if self._radius is not None else default_epsilon(height, width)

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
                n_samples=self.lipschitz_samples,
                search=self.search,
                normalize_maps=self.normalize_maps,
                internal_batch_size=self.internal_batch_size,
            ).to(inputs.device)
            if inputs.shape[0]:
                metric.update(model, inputs, predictions)
            mean = compute_quietly(metric)["mean"]
            report.scalars[f"robustness/lipschitz/{explainer_name(explainer)}"] = float(mean)
        return report
