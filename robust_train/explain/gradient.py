"""Gradient explainers: saliency (simple gradient) and input x gradient."""

from __future__ import annotations

from torch import Tensor, nn

from robust_train.explain.autograd import gradient_of_target, input_gradient, prepare_inputs
from robust_train.explain.registry import register_explainer


def _saliency_from_logits(
    logits: Tensor, inputs: Tensor, target: Tensor, create_graph: bool
) -> Tensor:
    """Saliency from a forward the caller ran (and still needs: its graph is retained)."""
    return gradient_of_target(logits, inputs, target, create_graph=create_graph, retain_graph=True)


def _input_x_gradient_from_logits(
    logits: Tensor, inputs: Tensor, target: Tensor, create_graph: bool
) -> Tensor:
    """Input x gradient from a forward the caller ran (its graph is retained)."""
    return inputs * _saliency_from_logits(logits, inputs, target, create_graph)


@register_explainer("saliency", from_logits=_saliency_from_logits, reported=True)
def saliency(
    model: nn.Module, inputs: Tensor, target: Tensor, *, create_graph: bool = False
) -> Tensor:
    """Gradient of the target logit with respect to the input (Simonyan et al. 2014).

    The signed gradient is returned; `importance_map` takes absolute values per pixel, so every
    map the project compares (attacks, Lipschitz, fidelity) is |gradient| summed over channels,
    what Captum's `Saliency` returns with its default `abs=True`. As in Ghorbani et al. (2019),
    the score is the *logit* of the target class, not its probability.

    Args:
        model: classifier returning logits (B, num_classes); its train/eval mode is left as is.
        inputs: images (B, C, H, W).
        target: class indices (B,).
        create_graph: keep the graph so the result can be differentiated again (penalties, attacks).

    Returns:
        Tensor shaped like `inputs`.

    Examples:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
        >>> x = torch.rand(2, 1, 2, 2)
        >>> grad = saliency(model, x, torch.tensor([0, 2]))
        >>> torch.allclose(grad[0].flatten(), model[1].weight[0])
        True
    """
    x, target = prepare_inputs(inputs, target)
    return input_gradient(model, x, target, create_graph=create_graph)


@register_explainer("input_x_gradient", from_logits=_input_x_gradient_from_logits)
def input_x_gradient(
    model: nn.Module, inputs: Tensor, target: Tensor, *, create_graph: bool = False
) -> Tensor:
    """Input times the gradient of the target logit (Shrikumar et al. 2016).

    Examples:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
        >>> x = torch.rand(1, 1, 2, 2)
        >>> attr = input_x_gradient(model, x, torch.tensor([1]))
        >>> torch.allclose(attr.flatten(), x.flatten() * model[1].weight[1])
        True
    """
    x, target = prepare_inputs(inputs, target)
    return x * input_gradient(model, x, target, create_graph=create_graph)
