"""DeepLIFT with the rescale rule (Shrikumar, Greenside, Kundaje, "Learning Important Features
Through Propagating Activation Differences", ICML 2017), differentiable."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from robust_train.core.runtime import require_grad_mode
from robust_train.core.validation import check_choice, check_positive
from robust_train.explain._rescale import Chain, TrueForward
from robust_train.explain.autograd import prepare_inputs, target_scores
from robust_train.explain.integrated import _baseline
from robust_train.explain.registry import register_explainer

__all__ = ["MAXPOOL_RULES", "deeplift"]

MAXPOOL_RULES = ("rescale", "gradient")


@register_explainer("deeplift", piecewise_constant=False, reported=True)
def deeplift(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    baseline: float | Tensor | None = None,
    create_graph: bool = False,
    maxpool: str = "rescale",
    eps: float = 1e-10,
) -> Tensor:
    """DeepLIFT attributions `(x - x0) * multipliers` of the target logit, rescale rule.

    Each elementwise nonlinearity y = f(z) passes back the multiplier
    (f(z) - f(z0)) / (z - z0), with z0 its input on the baseline x0 (the plain gradient f'(z)
    where |z - z0| < `eps`); linear operations (convolutions, linear layers, BatchNorm in eval
    mode, average pools, residual sums, concatenations) pass back their own Jacobian.

    Max-pooling, `maxpool="rescale"` (default): the rule of Captum's `maxpool` function. With
    out, out0 the pooled values of x and x0 and top = max(out, out0), a window's share
    g * (top - out0) goes to x's argmax and g * (out - top) to the baseline's argmax, each input
    divided by its z - z0 (the plain max-pool gradient where that is below `eps`); where windows
    overlap the shares are SUMMED. `maxpool="gradient"`: the plain max-pool gradient (the
    default of the DeepLIFT authors' library; not summation-to-delta).

    Complete with the rescale rule: the attributions sum to f_t(x) - f_t(x0) (to float
    rounding) on networks of linear layers, ReLU, max-pool, BatchNorm (eval), residual sums and
    concatenation (torchvision ResNet-18, ResNet-50, VGG-11-BN, DenseNet-121), in any order of
    these calls. Equals Captum's `DeepLift(model).attribute(x, baselines=x0, target=t)` on ReLU
    networks and on max-pool networks whose pools sit between convolutions; where Captum's
    per-module hooks lose a rule (a MaxPool2d directly after or before a ReLU module, hooked
    nonlinearities following each other, overlapping pool windows) Captum's map is not
    summation-to-delta and the two differ (the design notes list the layouts).

    Differentiable (Captum's is not: its hooks store detached tensors): a true forward of
    [x; x0] records, per call, the pre-activations, outputs and slopes with their graph, and a
    second forward of x replaces each call by an autograd node whose backward is the rule above,
    written with differentiable operations on those records. With `create_graph=True` the map
    keeps its graph to the input and the parameters through the true forward, so its derivative
    is the derivative of the DeepLIFT map. Cost: a forward of 2B rows, one of B rows and one
    backward.

    Which calls are rescaled: the calls themselves are intercepted (a `TorchFunctionMode`), so
    modules (`nn.ReLU(inplace=True)`, `nn.Sigmoid`, ...) and functional calls (`F.relu`,
    `torch.sigmoid`, `x.relu()`) alike, each CALL separately (torchvision's ResNet blocks call
    one `self.relu` several times; Captum's per-module hooks cannot). Rescaled: relu, relu6,
    hardtanh, leaky_relu, elu, selu, celu, gelu, silu, mish, softplus, hardswish, hardsigmoid,
    sigmoid, tanh (in-place forms run out of place, the model must use the returned tensor) and
    `max_pool2d`. Anything else gets its plain gradient at x: products of activations (the
    squeeze-excitation gate of MobileNetV3, scale * features), softmax, attention, adaptive max
    pools, clamp; completeness then holds only approximately, and the derivative through such a
    product's factors follows the chain, not the true forward. Under the attacks' softplus
    surrogate a ReLU call computes softplus_beta and is rescaled as such. The two forwards must
    make the same calls (a RuntimeError says when they do not); in train mode BatchNorm
    statistics and dropout masks differ between them, so explain in eval mode.

    Piecewise constancy: the multipliers of a ReLU net are piecewise constant only where z and
    z0 have the same sign; where they differ the multiplier relu(z) / (z - z0) moves with x, and
    so does the factor (x - x0): the map is not piecewise constant (`piecewise_constant=False`),
    so attacks take their direction on the model itself and on its softplus surrogate and keep
    each image's worst result (`AttackOptions.direction`). With a zero baseline the map is
    exactly 0 where x is 0, so an image with fewer than k non-zero pixels gives the top-k attack
    no direction at the clean image (its top-k set holds all the mass); the attack then takes a
    random step first, and reports an image it never moved as not measured.

    Args:
        model: classifier returning logits (B, num_classes); its train/eval mode is left as is.
        inputs: images (B, C, H, W).
        target: class indices (B,).
        baseline: the reference x0: None (black image, zeros), a float (constant image), a
            (C, H, W) tensor shared by the batch or a (B, C, H, W) tensor, one per image.
        create_graph: keep the graph (double backprop) for attacks and penalties.
        maxpool: "rescale" (Captum's max-pool rule, complete) or "gradient" (plain gradient).
        eps: |z - z0| below which a nonlinearity passes its plain gradient (Captum's eps).

    Returns:
        Attributions shaped like `inputs`.

    Raises:
        RuntimeError: called under `torch.inference_mode()`, or the two forwards make
            different calls.
        ValueError: `eps` is not positive, or `maxpool` is not "rescale" or "gradient".

    Examples:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        >>> x, t = torch.rand(2, 1, 2, 2), torch.tensor([0, 2])
        >>> attr = deeplift(net, x, t)
        >>> gap = (net(x) - net(torch.zeros_like(x))).gather(1, t[:, None]).squeeze(1)
        >>> torch.allclose(attr.sum(dim=(1, 2, 3)), gap, atol=1e-6)
        True
    """
    require_grad_mode("deeplift")
    check_positive(eps, "eps")
    check_choice(maxpool, "maxpool", MAXPOOL_RULES)
    with torch.enable_grad():
        x, target = prepare_inputs(inputs, target)
        base = _baseline(baseline, x)
        if not create_graph:
            x, base = x.detach().requires_grad_(True), base.detach()
        batch, pools = x.shape[0], maxpool == "rescale"
        shared = not (isinstance(baseline, Tensor) and baseline.dim() == 4 and len(baseline) > 1)
        rows = base[:1] if shared else base  # one row of a baseline the batch shares
        true_forward = TrueForward(
            batch, len(rows), maxpool=pools, graph=create_graph, eps=float(eps)
        )
        with true_forward, torch.set_grad_enabled(create_graph):
            model(torch.cat([x, rows]))
        chain = Chain(batch, true_forward.calls, maxpool=pools, eps=float(eps))
        with chain:
            logits = model(x)
        chain.check_all_used()
        scores = target_scores(logits, target)
        (grad,) = torch.autograd.grad(scores.sum(), x, create_graph=create_graph)
        attributions = (x - base) * grad
    return attributions if create_graph else attributions.detach()
