"""BoundsMonitor: the deterministic certified top-k overlap of the saliency map, logged while
training."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torchmetrics.aggregation import MeanMetric

from robust_train.callbacks._base import RobustnessCallback
from robust_train.callbacks._checks import compute_quietly
from robust_train.callbacks.figures import Report
from robust_train.certify import certify_topk
from robust_train.certify.deterministic import (
    check_bound_explainer,
    check_epsilon,
    check_method,
)
from robust_train.core.runtime import check_optional_positive

__all__ = ["BoundsMonitor"]


class BoundsMonitor(RobustnessCallback):
    """Deterministic certificate of the explanations of held-out images (interval or CROWN bounds,
    `robust_train.certify.certify_topk`).

    At each scheduled evaluation the correctly classified images of the held-out subset are
    certified, explaining their label: logged is `robustness/bounds/<explainer>/topk_overlap_
    linf<epsilon>`, the mean share of the top-k set of the map at x that stays in the top-k at
    every input of the L_inf ball (higher is more robust; a guarantee, the attack monitors give
    the upper side), and `.../stable_relus_linf<epsilon>`, the mean share of ReLUs the bounds fix.

    Args:
        epsilon: L_inf radius, pixel units.
        method: ``interval`` (fast) or ``crown``.
        explainer: ``saliency`` or ``input_x_gradient``.
        k: size of the top-k set; None: H*W // 8.
        **kwargs: schedule, subset and logging options of `RobustnessCallback`.

    Examples:
        >>> BoundsMonitor(epsilon=0.01).key
        'robustness/bounds/saliency/topk_overlap_linf0.01'
    """

    name = "bounds"

    def __init__(
        self,
        *,
        epsilon: float = 0.01,
        method: str = "interval",
        explainer: str = "saliency",
        k: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.epsilon = check_epsilon(epsilon)
        self.method = check_method(method)
        self.explainer = check_bound_explainer(explainer)
        check_optional_positive(k, "k", integer=True)
        self.k = k

    @property
    def key(self) -> str:
        return f"robustness/bounds/{self.explainer}/topk_overlap_linf{self.epsilon:g}"

    def evaluate(
        self, model: nn.Module, inputs: Tensor, targets: Tensor, predictions: Tensor
    ) -> Report:
        """Certify this rank's correctly classified images."""
        correct = predictions == targets
        x, y = inputs[correct], targets[correct]
        overlap, stable = MeanMetric().to(inputs.device), MeanMetric().to(inputs.device)
        if x.shape[0]:
            k = self.k if self.k is not None else max(1, x.shape[-2] * x.shape[-1] // 8)
            cert = certify_topk(
                model, x, y, epsilons=[self.epsilon], k=k, method=self.method,
                explainer=self.explainer,
            )  # fmt: skip
            overlap.update(cert.certified_overlap[:, 0].to(torch.float32))
            stable.update(cert.stable_share[:, 0].to(torch.float32))
        prefix = f"robustness/bounds/{self.explainer}"
        return Report(
            scalars={
                self.key: float(compute_quietly(overlap)),
                f"{prefix}/stable_relus_linf{self.epsilon:g}": float(compute_quietly(stable)),
            }
        )
