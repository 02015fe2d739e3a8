"""Layer-wise relevance propagation on Zennit, differentiable to second order (Bach et al.,
"On Pixel-Wise Explanations for Non-Linear Classifier Decisions by Layer-Wise Relevance
Propagation", PLoS ONE 2015; Montavon et al., "Layer-Wise Relevance Propagation: An Overview",
2019; Zennit: Anders et al. 2021, arXiv 2106.13200).

The relevance is Zennit's modified gradient: a composite of rules hooks every layer, the target
logit is backpropagated with its one-hot (`zennit.attribution.Gradient` with that `attr_output`),
and the hooks replace each layer's input gradient with its rule's relevance. Every hook and
canonizer is removed before `lrp` returns (also on error), so a later backward through a map
computed with `create_graph=True` (an attack's `autograd.grad`, a penalty's `loss.backward()`) is
plain autograd through the rules' ops: the second-order gradient of Dombrowski et al. (2019), to
the input and to the parameters (`robust_train.explain._lrp_rules` says what is changed in
Zennit's rules for that).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from robust_train.core.runtime import require_grad_mode
from robust_train.core.validation import check_choice, check_non_negative
from robust_train.explain._lrp_canonizers import canonizers_for
from robust_train.explain._lrp_functional import FunctionalRules
from robust_train.explain._lrp_rules import COMPOSITES, build_composite, call_rules, ruled_modules
from robust_train.explain.autograd import prepare_inputs, target_scores
from robust_train.explain.registry import register_explainer
from robust_train.models.normalize import Normalize

__all__ = ["LRP_COMPOSITES", "lrp", "pixel_bounds"]

LRP_COMPOSITES = COMPOSITES


def pixel_bounds(model: nn.Module, channels: int) -> tuple[Tensor, Tensor]:
    """The [0, 1] pixel range as the first layer sees it, shape (1, C): mapped through the
    model's first `Normalize` module when it has one (`(0 - mean) / std`, `(1 - mean) / std`).

    Examples:
        >>> lo, hi = pixel_bounds(Normalize([0.5], [0.25]), 1)
        >>> lo.tolist(), hi.tolist()
        ([[-2.0]], [[2.0]])
    """
    norm = next((m for m in model.modules() if isinstance(m, Normalize)), None)
    if norm is None:
        return torch.zeros(1, channels), torch.ones(1, channels)
    mean, std = norm.mean.detach().view(1, -1), norm.std.detach().view(1, -1)
    return (0.0 - mean) / std, (1.0 - mean) / std


@register_explainer("lrp", piecewise_constant=False, reported=True)
def lrp(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    composite: str = "epsilon_plus",
    epsilon: float = 1e-6,
    gamma: float = 0.25,
    create_graph: bool = False,
) -> Tensor:
    """Layer-wise relevance of every input element for the target logit (Zennit's rules).

    Composites (`LRP_COMPOSITES`; Montavon et al. 2019 recommend epsilon on dense layers and
    z+ / gamma on convolutions): "epsilon_plus" (z+ on convolutions, epsilon on linear layers,
    Zennit's EpsilonPlus), "epsilon" (epsilon everywhere; LRP-0 as `epsilon` -> 0),
    "epsilon_gamma_box" (z^B on the first convolution, bounded by the [0, 1] pixel range mapped
    through the model's `Normalize`, gamma on the other convolutions, epsilon on linear layers)
    and "alpha2_beta1" (alpha 2 beta 1 on convolutions, epsilon on linear layers). Activations,
    `Normalize` and unmerged BatchNorms pass relevance on unchanged; sums (residual blocks of
    torchvision ResNets and of `ResNet18CIFAR`) and average pools split it in proportion; max
    pools, flattening and concatenation route it as the gradient does. A BatchNorm right after a
    linear layer or convolution is merged into it with its running statistics, in either mode.

    Calls in a model's own `forward` get the rule of their module twin (the calls are
    intercepted, robust_train/explain/_lrp_functional.py): a residual `out + x` (also `+=`,
    `torch.add`) the sum rule of `zennit.layer.Sum`; `F.softplus(h, beta=2)`, `torch.sigmoid(h)`,
    `h.relu_()` and the other elementwise activations, and scalings by a constant or parameter
    (`(x - mean) / std`), the pass rule of `nn.Softplus` or `Normalize`; `F.avg_pool2d`,
    `F.adaptive_avg_pool2d` and sums or means over non-batch dimensions (`h.mean((2, 3))`) the
    sum rule of `nn.AvgPool2d`. So a network written with calls gets the map of the same network
    written with modules (for every composite), and the relevance of a bias-free residual
    network still sums to 1. A functional linear layer or BatchNorm on an activation (`F.conv2d`,
    `F.linear`, `h @ weight`, `F.batch_norm`) raises a ValueError naming the call and the module
    to use. A product of two activations (a gate), a subtraction and an added bias keep the
    gradient, as in Zennit.

    The relevance starts from the one-hot of the target (Zennit's `attr_output`), so under
    epsilon rules with small epsilon and no biases it sums to about 1; times the target logit it
    is the classic relevance, and on a bias-free ReLU network LRP-0 times the logit equals
    gradient x input (Montavon et al. 2019, sec. 10.2.1).

    Attacks and smoothness ascents take their direction on the model itself
    (`piecewise_constant=False`), not on the softplus surrogate: the rules multiply activations
    (R_j = a_j w_jk / z_k R_k), so the map moves with x even on a ReLU network and its exact
    gradient is not zero, while a softplus surrogate changes the map it differentiates (the
    design notes compare the directions). A map with at most k nonzero
    pixels (z+ sends no relevance where the upper units are off) gives the top-k objective an
    exactly zero gradient; the attack reports such images unmeasured.

    Args:
        model: classifier returning logits (B, num_classes); its modes are left as they are.
        inputs: images (B, C, H, W).
        target: class indices (B,).
        composite: one of `LRP_COMPOSITES`.
        epsilon: stabiliser of the epsilon rule (>= 0).
        gamma: the gamma rule's weight of positive contributions (>= 0).
        create_graph: keep the graph (input and parameters) for a later backward.

    Returns:
        Tensor shaped like `inputs`.

    Raises:
        RuntimeError: called under `torch.inference_mode()`.
        ValueError: `composite` is not one of `LRP_COMPOSITES`, `epsilon` or `gamma` is
            negative, or the model's forward applies a functional linear layer or BatchNorm to
            an activation (the message names the call and the module to use).

    Examples:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3, bias=False))
        >>> x = torch.rand(1, 1, 2, 2)
        >>> relevance = lrp(net, x, torch.tensor([1]), composite="epsilon")
        >>> logit = net(x)[0, 1]
        >>> torch.allclose(relevance.flatten() * logit, x.flatten() * net[1].weight[1], atol=1e-5)
        True
    """
    require_grad_mode("lrp")
    check_choice(composite, "composite", COMPOSITES)
    check_non_negative(epsilon, "epsilon")
    check_non_negative(gamma, "gamma")
    x, target = prepare_inputs(inputs, target)
    low, high = pixel_bounds(model, x.shape[1])
    with torch.enable_grad():
        rules = build_composite(
            composite,
            epsilon=epsilon,
            gamma=gamma,
            low=low.to(x),
            high=high.to(x),
            canonizers=canonizers_for(model, x[:1].detach()),
        )
        calls = None
        try:
            rules.register(model)
            calls = FunctionalRules(model, x, ruled_modules(rules, model), **call_rules())
            with calls:
                logits = model(x)
            scores = target_scores(logits, target)
            (relevance,) = torch.autograd.grad(scores.sum(), x, create_graph=create_graph)
        finally:
            if calls is not None:
                calls.remove()
            rules.remove()
    return relevance
