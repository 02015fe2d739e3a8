"""Grad-CAM (Selvaraju, Cogswell, Das, Vedantam, Parikh, Batra, "Grad-CAM: Visual Explanations
from Deep Networks via Gradient-based Localization", ICCV 2017), differentiable."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.core.runtime import require_grad_mode
from robust_train.explain.autograd import prepare_inputs, target_scores
from robust_train.explain.clamp import clamp_positive
from robust_train.explain.layers import capture_output, find_layer
from robust_train.explain.registry import register_explainer

__all__ = ["grad_cam"]


@register_explainer("grad_cam", layer=True, piecewise_constant=False, reported=True)
def grad_cam(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    layer: str | None = None,
    relu: bool = True,
    create_graph: bool = False,
) -> Tensor:
    """Grad-CAM map of the target logit at a convolutional layer, upsampled to the input size.

    With A (B, K, h, w) the output of `layer` and w_k the spatial mean of d logit_target / d A_k,
    the map is ReLU(sum_k w_k A_k) (`clamp_positive`: the exact ReLU; attack directions and
    penalties' inner ascents take it on its softplus surrogate, `robust_train.explain.clamp`),
    upsampled bilinearly (`align_corners=False`) to (H, W) of the input, so top-k, fidelity and
    Lipschitz consumers take it as they take a (B, 1, H, W) mask. Equals Captum's
    `LayerGradCam(model, layer).attribute(x, t, relu_attributions=relu)` followed by
    `LayerAttribution.interpolate(attr, (H, W), "bilinear")`, to float rounding. With
    `create_graph=True` the map is differentiable w.r.t. the input and the parameters (double
    backprop), so it can be attacked and penalised.

    The layer is looked up by name on the model given at call time; None takes the last
    convolutional block's rectified output (`robust_train.explain.layers.default_layer`). The
    activation is taken by a forward hook that hands the rest of the model a clone (a
    downstream in-place ReLU does not overwrite it); the hook is removed before returning. A
    layer whose output is 1 x 1 gives a constant map, and a warning says so.

    The map moves with x even on a ReLU network (`piecewise_constant=False`), so the attacks
    try every candidate direction (`AttackOptions.direction`). A blank (all-zero) clean map
    defines no top-k set and is not measured; the evaluation reports the share of blank maps
    (`blank_map`) beside every Grad-CAM number. The design notes explain the default layer, the
    ReLU and sparse maps.

    Args:
        model: classifier returning logits (B, num_classes); its train/eval mode is left as is.
        inputs: images (B, C, H, W).
        target: class indices (B,).
        layer: dotted module name (`model.named_modules()`) whose output (B, K, h, w) is used;
            None: the last convolutional block's rectified output (`default_layer`).
        relu: True (default): ReLU(sum_k w_k A_k), Grad-CAM as published; False: the signed
            sum.
        create_graph: keep the graph so the map can be differentiated (attacks, penalties).

    Returns:
        Maps (B, 1, H, W), non-negative unless `relu=False`.

    Raises:
        RuntimeError: called under `torch.inference_mode()`.
        TypeError: `relu` is not a bool.
        ValueError: `layer` names no module of `model`, or its output is not one (B, K, h, w)
            activation with a graph (the module runs more than once per forward, or is not
            convolutional).

    Examples:
        >>> net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
        ...                     nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
        ...                     nn.Linear(64, 3))
        >>> cam = grad_cam(net, torch.rand(2, 1, 8, 8), torch.tensor([0, 2]))  # layer "4"
        >>> cam.shape, bool((cam >= 0).all())
        (torch.Size([2, 1, 8, 8]), True)
        >>> signed = grad_cam(net, torch.rand(2, 1, 8, 8), torch.tensor([0, 2]), relu=False)
        >>> signed.shape
        torch.Size([2, 1, 8, 8])
        >>> grad_cam(net, torch.rand(1, 1, 8, 8), torch.tensor([0]), layer="conv")
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `layer` 'conv' is not a module of Sequential; valid names include ['0', ...
    """
    require_grad_mode("grad_cam")
    if not isinstance(relu, bool):
        raise TypeError(f"`relu` must be True or False, got {relu!r}")
    name, module = find_layer(model, layer, caller="grad_cam")
    with torch.enable_grad():
        x, target = prepare_inputs(inputs, target)
        if not create_graph:
            x = x.detach().requires_grad_(True)
        with capture_output(module, name, caller="grad_cam") as seen:
            logits = model(x)
        activation = one_activation(seen.outputs, name, module, x.shape[0])
        scores = target_scores(logits, target)
        (grads,) = torch.autograd.grad(scores.sum(), activation, create_graph=create_graph)
        weights = grads.mean(dim=(2, 3), keepdim=True)
        cam = (weights * activation).sum(dim=1, keepdim=True)
        if relu:
            cam = clamp_positive(cam)
        if cam.shape[-2:] == (1, 1):  # bilinear upsampling of one value, without its rounding
            cam = cam.expand(-1, -1, *x.shape[-2:])
        else:
            cam = F.interpolate(cam, size=x.shape[-2:], mode="bilinear", align_corners=False)
    return cam if create_graph else cam.detach()


def one_activation(outputs: list[Tensor], name: str, module: nn.Module, batch: int) -> Tensor:
    """The single (B, K, h, w) output the layer gave in the forward, or a clear error."""
    what = f"grad_cam: `layer` {name!r} ({type(module).__name__})"
    if len(outputs) != 1:
        raise ValueError(
            f"{what} was called {len(outputs)} times in one forward; Grad-CAM needs exactly one "
            "activation (choose a module the model calls once)"
        )
    (activation,) = outputs
    if activation.dim() != 4 or activation.shape[0] != batch:
        raise ValueError(
            f"{what} returned shape {tuple(activation.shape)}; Grad-CAM needs a convolutional "
            f"activation (B={batch}, K, h, w)"
        )
    if not activation.requires_grad:
        raise ValueError(f"{what} returned a tensor without a graph (detached or under no_grad)")
    if activation.shape[-2:] == (1, 1):
        warnings.warn(
            f"{what} has a 1 x 1 output for these inputs: every Grad-CAM map is constant (it "
            "explains nothing); pass `layer` = an earlier layer with a spatial extent",
            RuntimeWarning,
            stacklevel=3,
        )
    return activation
