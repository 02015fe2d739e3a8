"""What an explainer is: the one `Explainer` protocol every explainer, attack and penalty uses."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from torch import Tensor, nn

__all__ = ["Explainer"]


@runtime_checkable
class Explainer(Protocol):
    """`explainer(model, inputs, target, *, create_graph=False, **options) -> Tensor`.

    The result is shaped like `inputs` (B, C, H, W) for gradient explainers, or (B, 1, H, W) for
    a mask; `robust_train.explain.importance_map` turns either into a (B, H, W) map. With
    `create_graph=True` the result must stay a differentiable function of `inputs` (never
    detached), unless the callable sets `differentiable = False` (see `is_differentiable`).

    Examples:
        >>> from robust_train.explain import saliency
        >>> isinstance(saliency, Explainer)
        True
    """

    def __call__(
        self,
        model: nn.Module,
        inputs: Tensor,
        target: Tensor,
        *,
        create_graph: bool = False,
        **options: Any,
    ) -> Tensor: ...
