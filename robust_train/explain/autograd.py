"""The one place where explainers take gradients of a target score with respect to the input."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from robust_train.core.validation import check_images, check_target


def prepare_inputs(
    inputs: Tensor, target: Tensor, *, name: str = "inputs"
) -> tuple[Tensor, Tensor]:
    """Validate images and targets; return inputs that require grad (never detached from a
    caller's graph).

    When the caller's `inputs` already require grad (an attack differentiating through the map, or a
    penalty built on a perturbed copy), they are used as they are so that the explanation stays a
    function of them. Otherwise a leaf copy that requires grad is made.
    """
    check_images(inputs, name, check_range=False)
    target = check_target(target, inputs.shape[0])
    if not inputs.requires_grad:
        inputs = inputs.detach().requires_grad_(True)
    return inputs, target.to(inputs.device)


def target_scores(logits: Tensor, target: Tensor) -> Tensor:
    """Per-sample score of the target class, shape (B,)."""
    if logits.dim() != 2:
        raise ValueError(
            "the model must return logits of shape (B, num_classes), "
            f"got shape {tuple(logits.shape)}"
        )
    if int(target.max()) >= logits.shape[1]:
        raise ValueError(
            f"`target` holds class index {int(target.max())} but the model returns "
            f"{logits.shape[1]} classes"
        )
    return logits.gather(1, target[:, None]).squeeze(1)


def gradient_of_target(
    logits: Tensor,
    inputs: Tensor,
    target: Tensor,
    *,
    create_graph: bool,
    retain_graph: bool | None = None,
) -> Tensor:
    """d logits[i, target_i] / d inputs[i] for every sample, from an existing forward pass.

    Samples do not interact in eval mode, so the gradient of the summed scores is the per-sample
    gradient. With `create_graph=True` the result is differentiable (double backprop);
    `retain_graph=True` keeps the forward's graph for the caller (default: `create_graph`).
    """
    scores = target_scores(logits, target)
    (grad,) = torch.autograd.grad(
        scores.sum(), inputs, create_graph=create_graph, retain_graph=retain_graph
    )
    return grad


def input_gradient(
    model: nn.Module, inputs: Tensor, target: Tensor, *, create_graph: bool
) -> Tensor:
    """Forward `inputs` (which require grad) through `model`; return the target-logit
    gradient."""
    with torch.enable_grad():
        logits = model(inputs)
        return gradient_of_target(logits, inputs, target, create_graph=create_graph)
