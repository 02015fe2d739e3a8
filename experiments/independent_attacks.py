"""An attack check independent of the project's attack and explainer code.

Every explainer, the softplus surrogate, the top-k intersection, the PGD loop, the noise
baseline and the statistics are written here from the papers, with torch, numpy and Zennit (for
the LRP rules); Captum and Zennit's own attributor only serve as references that the maps are
checked against before any attack. `robust_train` is used for two things only: loading the
models (`robust_train.models.load_classifier`) and the MNIST-5k test split
(`robust_train.data.MNIST5kDataModule`). Nothing is imported from robust_train.attacks, .explain,
.evaluation, .metrics or .regularizers.

Protocol (RAR, Chen et al. 2019, on MNIST; the attack of Ghorbani, Abid & Zou 2019): for each
model, the first N test images that every model given classifies correctly; for each explainer,
B = the 200 most important pixels of the clean map (importance: |map| summed over channels);
3 restarts from a uniform point of the L_inf ball (eps 0.3) clipped to [0, 1], then 100 signed
steps of 0.01 that ascend -sum_{i in B} I(x)_i / sum_i I(x)_i, the map taken with create_graph on
a copy of the model whose ReLUs are Softplus(beta) (same weights); after every step the iterate's
map on the ORIGINAL model is scored by its top-100 intersection with the clean top-100, and each
image keeps its lowest score among iterates whose predicted label (original model) is the clean
one. Beside it, random signs at the budget (x + eps * sign(N(0, 1)), clipped, label kept, worst of
10 draws). See experiments/INDEPENDENT_ATTACKS.md.

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.independent_attacks
    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.independent_attacks \\
        --models natural=mnist5k_baseline robust=path/to/new_robust.ckpt --out runs/ia.jsonl
"""

from __future__ import annotations

import argparse
import copy
import datetime
import hashlib
import json
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

LRP_COMPOSITES = ("epsilon_plus", "epsilon_alpha2_beta1", "epsilon_gamma_box")
EXPLAINERS = (
    "saliency",
    "ig",
    "gradcam",
    "gradcam_relu",
    *(f"lrp_{name}" for name in LRP_COMPOSITES),
    "input",  # reference: the map is the input itself ("map = input")
)
REFERENCE_LABEL = "map = input"  # how the tables name the `input` reference's rows
DEFAULT_MODELS = ("natural=mnist5k_baseline", "robust=mnist5k_robust")
ZENNIT_EPS = 1e-6  # Zennit's default epsilon / stabilizer of every rule used here
GAMMA = 0.25  # Zennit's default gamma of EpsilonGammaBox


# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------


@dataclass
class Settings:
    """The attack and explainer settings of one run (the defaults are the RAR protocol)."""

    eps: float = 0.3
    alpha: float = 0.01
    steps: int = 100
    restarts: int = 3
    k_attack: int = 200
    k_report: int = 100
    noise_draws: int = 10
    beta: float = 10.0  # softplus surrogate of saliency, IG and Grad-CAM
    lrp_beta: tuple[float, float] = (10.0, 100.0)  # grown geometrically over the steps
    ig_points: int = 16
    gradcam_layer: str = "features.5"
    batch: int = 50
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Explainers (own code). Each returns (map, logits): the map has the input's shape and is
# differentiable w.r.t. x when create_graph is True; logits are the model's at x.
# --------------------------------------------------------------------------------------------


def _target_logit(logits: Tensor, y: Tensor) -> Tensor:
    return logits.gather(1, y[:, None]).sum()


def saliency(model: nn.Module, x: Tensor, y: Tensor, create_graph: bool) -> tuple[Tensor, Tensor]:
    """Gradient of the target logit w.r.t. the input (Simonyan et al. 2014)."""
    x = x if x.requires_grad else x.detach().requires_grad_()
    logits = model(x)
    (grad,) = torch.autograd.grad(_target_logit(logits, y), x, create_graph=create_graph)
    return grad, logits


def integrated_gradients(
    model: nn.Module, x: Tensor, y: Tensor, create_graph: bool, points: int = 16
) -> tuple[Tensor, Tensor]:
    """Integrated gradients of the target logit (Sundararajan et al. 2017), zero baseline,
    right Riemann sum: x * mean_{j=1..m} grad f(j/m * x). The last path point is x itself, so
    its logits are the model's at x."""
    x = x if x.requires_grad else x.detach().requires_grad_()
    alphas = torch.arange(1, points + 1, dtype=x.dtype, device=x.device) / points
    path = (alphas.view(-1, *([1] * x.dim())) * x.unsqueeze(0)).reshape(-1, *x.shape[1:])
    logits = model(path)
    (grad,) = torch.autograd.grad(
        _target_logit(logits, y.repeat(points)), path, create_graph=create_graph
    )
    ig = x * grad.reshape(points, *x.shape).mean(0)
    return ig, logits.reshape(points, x.shape[0], -1)[-1]


def grad_cam(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    create_graph: bool,
    layer: str = "features.5",
    relu: bool = False,
) -> tuple[Tensor, Tensor]:
    """Grad-CAM (Selvaraju et al. 2017) at the output A of the module named `layer`:
    sum_k w_k A_k with w_k the spatial mean of d logit / d A_k, without the final ReLU unless
    `relu`; upsampled bilinearly (align_corners=False) to the input's size."""
    x = x if x.requires_grad else x.detach().requires_grad_()
    store: list[Tensor] = []
    handle = model.get_submodule(layer).register_forward_hook(lambda m, i, o: store.append(o))
    try:
        logits = model(x)
    finally:
        handle.remove()
    (act,) = store
    (grad,) = torch.autograd.grad(_target_logit(logits, y), act, create_graph=create_graph)
    cam = (grad.mean(dim=(2, 3), keepdim=True) * act).sum(1, keepdim=True)
    if relu:
        cam = F.relu(cam)
    cam = F.interpolate(cam, size=x.shape[-2:], mode="bilinear", align_corners=False)
    return cam, logits


def input_bounds(model: nn.Module, channels: int = 1) -> tuple[Tensor, Tensor]:
    """The [0, 1] pixel box as the first layer sees it: the model normalises inside (a
    `normalize` submodule with `mean` / `std` buffers), so the box is ((0 - mean) / std,
    (1 - mean) / std) per channel; (0, 1) when the model has no such module."""
    norm = getattr(model, "normalize", None)
    mean = getattr(norm, "mean", None)
    std = getattr(norm, "std", None)
    if mean is None or std is None:
        zeros = torch.zeros(1, channels, 1, 1)
        return zeros, zeros + 1
    mean = mean.detach().float().reshape(1, -1, 1, 1)
    std = std.detach().float().reshape(1, -1, 1, 1)
    return (0 - mean) / std, (1 - mean) / std


def zennit_composite(name: str, model: nn.Module) -> Any:
    """Zennit's composite `name` (default parameters); EpsilonGammaBox gets the box of
    `input_bounds` (low 0, high 1 for a model whose normalisation is the identity)."""
    from zennit import composites

    if name == "epsilon_plus":
        return composites.EpsilonPlus()
    if name == "epsilon_alpha2_beta1":
        return composites.EpsilonAlpha2Beta1()
    if name == "epsilon_gamma_box":
        low, high = input_bounds(model)
        return composites.EpsilonGammaBox(low=low, high=high)
    raise ValueError(f"unknown LRP composite {name!r}; one of {LRP_COMPOSITES}")


def lrp_zennit(
    model: nn.Module, x: Tensor, y: Tensor, create_graph: bool, composite: str
) -> tuple[Tensor, Tensor]:
    """LRP through a Zennit composite: the modified gradient of the model output with the
    one-hot target as output relevance. With create_graph the relevance stays differentiable
    w.r.t. x; the composite's hooks are removed before this returns, so the second backward
    (the attack's) runs without them, as Zennit's docs require. The one-hot output relevance is
    made to require grad so that the hook of the last layer also builds its graph (Zennit
    builds the graph of a rule's backward only when its incoming gradient requires grad)."""
    comp = zennit_composite(composite, model)
    x = x if x.requires_grad else x.detach().requires_grad_()
    with comp.context(model) as modified:
        logits = modified(x)
        onehot = F.one_hot(y, logits.shape[1]).to(logits.dtype)
        if create_graph:
            onehot.requires_grad_()
        (relevance,) = torch.autograd.grad(logits, x, onehot, create_graph=create_graph)
    return relevance, logits


def explain(
    name: str, model: nn.Module, x: Tensor, y: Tensor, create_graph: bool, settings: Settings
) -> tuple[Tensor, Tensor]:
    """The map `name` (one of EXPLAINERS) and the logits of `model` at x."""
    if name == "saliency":
        return saliency(model, x, y, create_graph)
    if name == "ig":
        return integrated_gradients(model, x, y, create_graph, settings.ig_points)
    if name in ("gradcam", "gradcam_relu"):
        return grad_cam(
            model, x, y, create_graph, settings.gradcam_layer, relu=name == "gradcam_relu"
        )
    if name.startswith("lrp_"):
        return lrp_zennit(model, x, y, create_graph, name[len("lrp_") :])
    if name == "input":
        with torch.no_grad() if not create_graph else nullcontext():
            logits = model(x)
        return x if create_graph else x.detach().clone(), logits
    raise ValueError(f"unknown explainer {name!r}; one of {EXPLAINERS}")


def importance(maps: Tensor) -> Tensor:
    """Per-pixel importance, flattened: |map| summed over channels, shape (B, H * W)."""
    return maps.abs().sum(1).flatten(1)


# --------------------------------------------------------------------------------------------
# LRP by hand (a reference for the Zennit path: same rules, written from the LRP papers)
# --------------------------------------------------------------------------------------------


def _stab(z: Tensor, eps: float = ZENNIT_EPS) -> Tensor:
    """z + eps * sign(z), with sign(0) = +1."""
    return z + eps * torch.where(z >= 0, 1.0, -1.0).to(z)


def _apply(module: nn.Module, a: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    if isinstance(module, nn.Linear):
        return F.linear(a, w, b)
    assert isinstance(module, nn.Conv2d)
    return F.conv2d(a, w, b, module.stride, module.padding, module.dilation, module.groups)


def _transpose(module: nn.Module, a: Tensor, w: Tensor, s: Tensor) -> Tensor:
    """W^T s (the layer's vector-Jacobian product), differentiable w.r.t. s."""
    probe = torch.zeros_like(a).requires_grad_()
    (out,) = torch.autograd.grad(_apply(module, probe, w, None), probe, s, create_graph=True)
    return out


def _lrp_layer(
    module: nn.Module, a: Tensor, r: Tensor, rule: str, box: tuple[Tensor, Tensor]
) -> Tensor:
    """Relevance at the input `a` of a Linear / Conv2d layer given the relevance `r` at its
    output, by `rule` (Bach et al. 2015; Montavon et al. 2017, 2019)."""
    w, b = module.weight, module.bias
    if b is None:
        b = torch.zeros(w.shape[0], dtype=w.dtype)
    wp, wn, bp, bn = w.clamp(min=0), w.clamp(max=0), b.clamp(min=0), b.clamp(max=0)
    ap, an = a.clamp(min=0), a.clamp(max=0)
    if rule == "epsilon":
        s = r / _stab(_apply(module, a, w, b))
        return a * _transpose(module, a, w, s)
    if rule == "zplus":  # alpha 1, beta 0, negative inputs through the negative weights
        s = r / _stab(_apply(module, ap, wp, bp) + _apply(module, an, wn, None))
        return ap * _transpose(module, a, wp, s) + an * _transpose(module, a, wn, s)
    if rule == "alpha2beta1":
        sp = r / _stab(_apply(module, ap, wp, bp) + _apply(module, an, wn, None))
        sn = r / _stab(_apply(module, ap, wn, bn) + _apply(module, an, wp, None))
        pos = ap * _transpose(module, a, wp, sp) + an * _transpose(module, a, wn, sp)
        neg = ap * _transpose(module, a, wn, sn) + an * _transpose(module, a, wp, sn)
        return 2 * pos - neg
    if rule == "gamma":  # the generalised gamma rule, as Zennit (Andeol et al. 2021)
        wgp, wgn = w + GAMMA * wp, w + GAMMA * wn
        bgp, bgn = b + GAMMA * bp, b + GAMMA * bn
        z = _apply(module, a, w, b)
        sp = (z > 0).to(r) * r / _stab(_apply(module, ap, wgp, bgp) + _apply(module, an, wgn, None))
        sn = (z < 0).to(r) * r / _stab(_apply(module, ap, wgn, bgn) + _apply(module, an, wgp, None))
        return (
            ap * _transpose(module, a, wgp, sp)
            + an * _transpose(module, a, wgn, sp)
            + ap * _transpose(module, a, wgn, sn)
            + an * _transpose(module, a, wgp, sn)
        )
    if rule == "zbox":
        low, high = (t.to(a).expand_as(a) for t in box)
        z = _apply(module, a, w, b) - _apply(module, low, wp, bp) - _apply(module, high, wn, bn)
        s = r / _stab(z)
        return (
            a * _transpose(module, a, w, s)
            - low * _transpose(module, a, wp, s)
            - high * _transpose(module, a, wn, s)
        )
    raise ValueError(rule)


def lrp_by_hand(model: nn.Module, x: Tensor, y: Tensor, composite: str) -> Tensor:
    """LRP of a chain of leaf modules (MNISTConvNet's layout) by `composite`'s rules: Linear
    epsilon; Conv2d z+ (epsilon_plus), alpha2-beta1 (epsilon_alpha2_beta1), or the first conv
    z-box on the normalised pixel box and the others gamma 0.25 (epsilon_gamma_box); ReLU and
    Softplus pass the relevance through; any other module (the normalisation, max-pooling,
    flatten, dropout) passes it by its gradient. Differentiable w.r.t. x."""
    rules = {
        "epsilon_plus": ("zplus", "zplus"),
        "epsilon_alpha2_beta1": ("alpha2beta1", "alpha2beta1"),
        "epsilon_gamma_box": ("zbox", "gamma"),
    }[composite]
    box = input_bounds(model)
    leaves = [m for m in model.modules() if not list(m.children())]
    first_conv = next(m for m in leaves if isinstance(m, nn.Conv2d))
    calls: list[tuple[nn.Module, Tensor, Tensor]] = []
    handles = [m.register_forward_hook(lambda m, i, o: calls.append((m, i[0], o))) for m in leaves]
    try:
        x = x if x.requires_grad else x.detach().requires_grad_()
        logits = model(x)
    finally:
        for h in handles:
            h.remove()
    if calls[-1][2] is not logits:
        raise ValueError("lrp_by_hand needs a model that is a chain of leaf modules")
    r = F.one_hot(y, logits.shape[1]).to(logits.dtype)
    for module, a, out in reversed(calls):
        if isinstance(module, nn.Linear):
            r = _lrp_layer(module, a, r, "epsilon", box)
        elif isinstance(module, nn.Conv2d):
            r = _lrp_layer(module, a, r, rules[0] if module is first_conv else rules[1], box)
        elif isinstance(module, (nn.ReLU, nn.Softplus)):
            pass
        else:
            (r,) = torch.autograd.grad(out, a, r, create_graph=True)
    return r


# --------------------------------------------------------------------------------------------
# Softplus surrogate
# --------------------------------------------------------------------------------------------


def softplus_copy(model: nn.Module, beta: float) -> nn.Module:
    """A deep copy of `model` whose nn.ReLU modules are nn.Softplus(beta) (same weights); its
    parameters do not require grad. ReLU networks have zero second derivatives almost
    everywhere; the copy gives the attack a usable direction (Dombrowski et al. 2019)."""
    surrogate = copy.deepcopy(model).eval()
    swapped = 0
    for parent in list(surrogate.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.ReLU):
                setattr(parent, name, nn.Softplus(beta=beta))
                swapped += 1
    for p in surrogate.parameters():
        p.requires_grad_(False)
    surrogate.swapped_relus = swapped  # type: ignore[assignment]
    return surrogate


def set_beta(model: nn.Module, beta: float) -> None:
    for m in model.modules():
        if isinstance(m, nn.Softplus):
            m.beta = beta


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------


def topk_mask(imp: Tensor, k: int) -> Tensor:
    """Boolean (B, P) mask of the k largest entries per row (torch.topk; ties broken by its
    order)."""
    mask = torch.zeros_like(imp, dtype=torch.bool)
    return mask.scatter_(1, imp.topk(k, dim=1).indices, True)


def topk_intersection(clean: Tensor, other: Tensor, k: int) -> Tensor:
    """|top-k(clean) ∩ top-k(other)| / k per row (Ghorbani et al. 2019)."""
    return (topk_mask(clean, k) & topk_mask(other, k)).sum(1).to(clean.dtype) / k


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1 of a 1-d array, ties given their mean rank."""
    order = np.argsort(values, kind="stable")
    sorted_vals = values[order]
    ranks = np.empty(len(values), dtype=np.float64)
    start = 0
    while start < len(values):
        stop = start
        while stop + 1 < len(values) and sorted_vals[stop + 1] == sorted_vals[start]:
            stop += 1
        ranks[order[start : stop + 1]] = (start + stop) / 2
        start = stop + 1
    return ranks


def spearman(clean: Tensor, other: Tensor) -> np.ndarray:
    """Spearman rank correlation per row over all pixels (ties: mean ranks); nan for a
    constant row."""
    out = []
    for a, b in zip(clean.detach().double().numpy(), other.detach().double().numpy(), strict=True):
        ra, rb = _average_ranks(a), _average_ranks(b)
        ra, rb = ra - ra.mean(), rb - rb.mean()
        denom = math.sqrt(float((ra**2).sum() * (rb**2).sum()))
        out.append(float((ra * rb).sum()) / denom if denom > 0 else float("nan"))
    return np.array(out)


def mean_ci(values: Sequence[float], resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Mean and 95 % percentile-bootstrap interval over images (nan values left out)."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[~np.isnan(arr)]
    if arr.size == 0:
        return {"mean": float("nan"), "lo": float("nan"), "hi": float("nan"), "n": 0}
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, arr.size, (resamples, arr.size))].mean(1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {"mean": float(arr.mean()), "lo": float(lo), "hi": float(hi), "n": int(arr.size)}


# --------------------------------------------------------------------------------------------
# Attack and noise
# --------------------------------------------------------------------------------------------


@dataclass
class AttackResult:
    x: Tensor  # the kept inputs (clean where no perturbed iterate kept the label)
    intersection: Tensor  # top-k_report intersection of the kept inputs' maps with the clean
    spearman: np.ndarray
    moved: Tensor  # some step had a nonzero direction
    kept_label: Tensor  # some perturbed iterate kept the label
    clean_importance: Tensor
    label_changes: Tensor  # per image, the iterates whose label differed (walked through)


def project(x: Tensor, x0: Tensor, eps: float) -> Tensor:
    """Into the L_inf ball of radius eps around x0, then into [0, 1]."""
    return (x0 + (x - x0).clamp(-eps, eps)).clamp(0, 1)


class _Best:
    """Per image, the lowest top-k intersection among label-keeping inputs seen."""

    def __init__(self, x0: Tensor, imp0: Tensor, k: int) -> None:
        self.x = x0.clone()
        self.imp = imp0.clone()
        self.score = torch.ones(x0.shape[0])
        self.kept = torch.zeros(x0.shape[0], dtype=torch.bool)
        self.changes = torch.zeros(x0.shape[0], dtype=torch.long)
        self.imp0, self.k = imp0, k

    def offer(self, x: Tensor, maps: Tensor, logits: Tensor, y: Tensor) -> None:
        imp = importance(maps.detach())
        score = topk_intersection(self.imp0, imp, self.k)
        ok = logits.detach().argmax(1) == y
        self.kept |= ok
        self.changes += (~ok).long()
        better = ok & (score < self.score)
        self.x[better] = x.detach()[better]
        self.imp[better] = imp[better]
        self.score[better] = score[better]


def _clean_start(name: str, model: nn.Module, x0: Tensor, y: Tensor, s: Settings) -> _Best:
    """The clean maps of correctly classified `x0`, as the starting record of an attack."""
    maps0, logits0 = explain(name, model, x0, y, False, s)
    if not bool((logits0.argmax(1) == y).all()):
        raise ValueError("attack only correctly classified images")
    return _Best(x0, importance(maps0.detach()), s.k_report)


def _kept_result(
    name: str, model: nn.Module, x0: Tensor, y: Tensor, best: _Best, moved: Tensor, s: Settings
) -> AttackResult:
    """What is reported: the kept inputs' maps and labels recomputed on the original model,
    checked to keep the label and the budget, against the clean maps."""
    maps1, logits1 = explain(name, model, best.x, y, False, s)
    if not bool((logits1.argmax(1) == y).all()):
        raise AssertionError("a kept input changed the label")
    if (best.x - x0).abs().max() > s.eps + 1e-5 or best.x.min() < 0 or best.x.max() > 1:
        raise AssertionError("a kept input is outside the budget or [0, 1]")
    imp0, imp1 = best.imp0, importance(maps1.detach())
    return AttackResult(
        x=best.x,
        intersection=topk_intersection(imp0, imp1, s.k_report),
        spearman=spearman(imp0, imp1),
        moved=moved,
        kept_label=best.kept,
        clean_importance=imp0,
        label_changes=best.changes,
    )


def topk_attack(
    model: nn.Module,
    surrogate: nn.Module | None,
    name: str,
    x0: Tensor,
    y: Tensor,
    settings: Settings,
    generator: torch.Generator,
) -> AttackResult:
    """The top-k attack (Ghorbani et al. 2019) on explainer `name` with random restarts.

    The direction is the sign of -grad_x sum_{i in B} I(x)_i / sum_i I(x)_i on `surrogate`
    (the model itself when None), B the k_attack most important clean pixels; iterates are
    ranked on `model`, and an iterate whose label on `model` differs from y is never kept."""
    s = settings
    direction_model = model if surrogate is None else surrogate
    best = _clean_start(name, model, x0, y, s)
    target = topk_mask(best.imp0, s.k_attack).to(best.imp0.dtype)
    moved = torch.zeros(x0.shape[0], dtype=torch.bool)
    lrp = name.startswith("lrp_") and surrogate is not None
    for _ in range(s.restarts):
        noise = torch.rand(x0.shape, generator=generator) * 2 - 1
        x = project(x0 + s.eps * noise, x0, s.eps)
        best.offer(x, *explain(name, model, x, y, False, s), y)
        for step in range(s.steps):
            if lrp:
                lo, hi = s.lrp_beta
                set_beta(direction_model, lo * (hi / lo) ** (step / max(s.steps - 1, 1)))
            xr = x.detach().requires_grad_()
            maps, _ = explain(name, direction_model, xr, y, True, s)
            imp = importance(maps)
            share = (imp * target).sum(1) / imp.sum(1).clamp_min(1e-30)
            if share.requires_grad:
                (grad,) = torch.autograd.grad(share.sum(), xr)
            else:  # the map does not depend on x (e.g. the saliency of a linear model)
                grad = torch.zeros_like(xr)
            d = -grad
            moved |= (d != 0).flatten(1).any(1)
            x = project(x.detach() + s.alpha * d.sign(), x0, s.eps)
            best.offer(x, *explain(name, model, x, y, False, s), y)
    if lrp:
        set_beta(direction_model, s.lrp_beta[0])
    return _kept_result(name, model, x0, y, best, moved, s)


def random_sign_noise(
    model: nn.Module,
    name: str,
    x0: Tensor,
    y: Tensor,
    settings: Settings,
    generator: torch.Generator,
) -> AttackResult:
    """Random signs at the budget: x + eps * sign(N(0, 1)), clipped to [0, 1]; per image the
    lowest top-k intersection among the label-keeping draws."""
    s = settings
    best = _clean_start(name, model, x0, y, s)
    for _ in range(s.noise_draws):
        x = (x0 + s.eps * torch.randn(x0.shape, generator=generator).sign()).clamp(0, 1)
        best.offer(x, *explain(name, model, x, y, False, s), y)
    return _kept_result(name, model, x0, y, best, torch.ones(x0.shape[0], dtype=torch.bool), s)


# --------------------------------------------------------------------------------------------
# Checks against Captum and Zennit
# --------------------------------------------------------------------------------------------


def reference_checks(
    model: nn.Module, x: Tensor, y: Tensor, settings: Settings
) -> dict[str, float]:
    """Max |difference| between the hand-written maps and the references at the clean points:
    Captum Saliency, IntegratedGradients (riemann_right, same points), LayerGradCam at the same
    layer (relu_attributions False / True) upsampled by LayerAttribution.interpolate
    (bilinear); Zennit's Gradient attributor with the same composite for the create_graph LRP
    path, and the hand-written LRP (lrp_by_hand) against Zennit. `lrp_*_second_order`: the
    attack objective's input gradient through Zennit on the softplus copy against the same
    through lrp_by_hand, relative to the largest entry."""
    from captum.attr import (
        IntegratedGradients,
        LayerAttribution,
        LayerGradCam,
        Saliency,
    )
    from zennit.attribution import Gradient

    s = settings
    out: dict[str, float] = {}

    def diff(a: Tensor, b: Tensor) -> float:
        return float((a.detach() - b.detach()).abs().max())

    ours, _ = saliency(model, x, y, False)
    out["saliency_vs_captum"] = diff(ours, Saliency(model).attribute(x, target=y, abs=False))
    ours, _ = integrated_gradients(model, x, y, False, s.ig_points)
    ref = IntegratedGradients(model).attribute(
        x, baselines=torch.zeros_like(x), target=y, n_steps=s.ig_points, method="riemann_right"
    )
    out["ig_vs_captum"] = diff(ours, ref)
    layer = model.get_submodule(s.gradcam_layer)
    for relu, key in ((False, "gradcam"), (True, "gradcam_relu")):
        ours, _ = grad_cam(model, x, y, False, s.gradcam_layer, relu=relu)
        ref = LayerGradCam(model, layer).attribute(x, target=y, relu_attributions=relu)
        ref = LayerAttribution.interpolate(ref, tuple(x.shape[-2:]), interpolate_mode="bilinear")
        out[f"{key}_vs_captum"] = diff(ours, ref)
    surrogate = softplus_copy(model, s.beta)
    # The second-order check runs at a point of the ball like the attack's random start: at a
    # clean MNIST image every map of the form x * c is zero on the background (x = 0), so
    # when fewer than k_attack pixels are nonzero the objective is flat there.
    start = torch.rand(x.shape, generator=torch.Generator().manual_seed(0)) * 2 - 1
    x_start = project(x + s.eps * start, x, s.eps)
    out["max_abs_saliency"] = float(saliency(model, x, y, False)[0].abs().max())
    for comp in LRP_COMPOSITES:
        ours, _ = lrp_zennit(model, x, y, True, comp)
        onehot = F.one_hot(y, 10).to(x.dtype)
        with Gradient(model, zennit_composite(comp, model)) as attributor:
            _, ref = attributor(x.detach().clone(), onehot)
        out[f"lrp_{comp}_vs_zennit_gradient"] = diff(ours, ref)
        out[f"max_abs_lrp_{comp}"] = float(ref.abs().max())
        out[f"lrp_{comp}_by_hand_vs_zennit"] = diff(lrp_by_hand(model, x, y, comp), ref)
        # second order: d/dx of the attack objective, Zennit vs by hand, on the surrogate
        grads = []
        for fn in (
            lambda xr, c=comp: lrp_zennit(surrogate, xr, y, True, c)[0],
            lambda xr, c=comp: lrp_by_hand(surrogate, xr, y, c),
        ):
            xr = x_start.detach().requires_grad_()
            imp = importance(fn(xr))
            target = topk_mask(imp.detach(), s.k_attack).to(imp.dtype)
            share = (imp * target).sum(1) / imp.sum(1).clamp_min(1e-30)
            grads.append(torch.autograd.grad(share.sum(), xr)[0])
        scale = float(grads[1].abs().max()) or 1.0
        out[f"lrp_{comp}_second_order_max"] = scale
        out[f"lrp_{comp}_second_order_rel"] = diff(*grads) / scale
    return out


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def _chunks(n: int, size: int) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def run_one(
    model: nn.Module,
    name: str,
    x: Tensor,
    y: Tensor,
    settings: Settings,
) -> dict[str, Any]:
    """Attack and noise on explainer `name` for every image, in chunks of settings.batch."""
    s = settings
    beta = s.lrp_beta[0] if name.startswith("lrp_") else s.beta
    surrogate = softplus_copy(model, beta)
    gen_attack = torch.Generator().manual_seed(s.seed)
    gen_noise = torch.Generator().manual_seed(s.seed + 1)
    parts: dict[str, list[Any]] = {k: [] for k in ("att", "noise")}
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for sl in _chunks(x.shape[0], s.batch):
        parts["att"].append(topk_attack(model, surrogate, name, x[sl], y[sl], s, gen_attack))
    cpu_attack = time.process_time() - cpu0
    for sl in _chunks(x.shape[0], s.batch):
        parts["noise"].append(random_sign_noise(model, name, x[sl], y[sl], s, gen_noise))
    att, noise = parts["att"], parts["noise"]

    def cat(results: list[AttackResult], key: str) -> np.ndarray:
        values = [getattr(r, key) for r in results]
        if isinstance(values[0], Tensor):
            return torch.cat(values).detach().numpy()
        return np.concatenate(values)

    imp0 = torch.cat([r.clean_importance for r in att])
    nonzero = (imp0 > 0).sum(1)
    maps0 = explain(name, model, x, y, False, s)[0].detach()
    negative = maps0.clamp(max=0).abs().flatten(1).sum(1) / maps0.abs().flatten(1).sum(1).clamp_min(
        1e-30
    )
    return {
        "explainer": name,
        "n_images": int(x.shape[0]),
        "attack": {
            "topk": mean_ci(cat(att, "intersection").tolist()),
            "spearman": mean_ci(cat(att, "spearman").tolist()),
            "per_image_topk": [round(float(v), 4) for v in cat(att, "intersection")],
        },
        "noise": {
            "topk": mean_ci(cat(noise, "intersection").tolist()),
            "spearman": mean_ci(cat(noise, "spearman").tolist()),
            "per_image_topk": [round(float(v), 4) for v in cat(noise, "intersection")],
        },
        "n_could_not_move": int((~cat(att, "moved")).sum()),
        "n_no_label_kept_iterate": int((~cat(att, "kept_label")).sum()),
        "n_noise_no_label_kept": int((~cat(noise, "kept_label")).sum()),
        "mean_label_changing_iterates": float(cat(att, "label_changes").mean()),
        "n_blank_clean_map": int((nonzero == 0).sum()),
        "n_clean_support_below_k": int((nonzero < s.k_report).sum()),
        "clean_overlap_with_input": float(topk_intersection(imp0, x.flatten(1), s.k_report).mean()),
        "clean_negative_share": float(negative.mean()),
        "mean_linf": float(
            torch.cat(
                [
                    (r.x - x[sl]).abs().flatten(1).amax(1)
                    for r, sl in zip(att, _chunks(x.shape[0], s.batch), strict=True)
                ]
            ).mean()
        ),
        "surrogate_beta": list(s.lrp_beta) if name.startswith("lrp_") else s.beta,
        "cpu_seconds_attack": round(cpu_attack, 1),
        "cpu_seconds": round(time.process_time() - cpu0, 1),
        "wall_seconds": round(time.perf_counter() - wall0, 1),
    }


def parse_models(pairs: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for pair in pairs:
        label, sep, path = pair.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"--models: expected name=path, got {pair!r}")
        out.append((label, path))
    return out


def load_models(pairs: Sequence[tuple[str, str]]) -> dict[str, nn.Module]:
    from robust_train.models import load_classifier

    models = {}
    for label, path in pairs:
        model = load_classifier(path).eval()
        for p in model.parameters():
            p.requires_grad_(False)
        models[label] = model
    return models


def weights_fingerprint(model: nn.Module) -> str:
    """The first 12 hex digits of the SHA-256 of the model's state dict (names, shapes and
    float32 bytes in key order): which weights a record measured."""
    digest = hashlib.sha256()
    for key, value in model.state_dict().items():
        digest.update(f"{key}:{tuple(value.shape)}".encode())
        digest.update(value.detach().float().contiguous().numpy().tobytes())
    return digest.hexdigest()[:12]


def load_test_split() -> tuple[Tensor, Tensor]:
    from robust_train.data import MNIST5kDataModule

    data = MNIST5kDataModule()
    data.setup("test")
    x, y = data.test_set.tensors
    return x.float(), y.long()


def first_correct(models: dict[str, nn.Module], x: Tensor, y: Tensor, n: int) -> Tensor:
    """Indices of the first n images that every model classifies correctly."""
    ok = torch.ones_like(y, dtype=torch.bool)
    with torch.no_grad():
        for model in models.values():
            ok &= torch.cat([model(x[sl]).argmax(1) for sl in _chunks(len(x), 256)]) == y
    return ok.nonzero().squeeze(1)[:n]


def _fmt(stat: dict[str, Any]) -> str:
    if stat["n"] == 0:
        return "n/a"
    return f"{stat['mean']:.3f} [{stat['lo']:.3f}, {stat['hi']:.3f}]"


def markdown_table(records: list[dict[str, Any]]) -> str:
    """One row per explainer and model: the attack and the noise baseline (top-100
    intersection with its 95 % interval over images, mean Spearman), the images the attack could
    not move (zero direction at every step), those where no perturbed iterate kept the label,
    the clean maps with under 100 nonzero pixels, the clean map's top-100 overlap with the
    input's, and the CPU time. The `input` reference's rows are labelled `REFERENCE_LABEL`."""
    lines = [
        "| explainer | model | images | attack top-100 ∩ [95% CI] | attack Spearman "
        "| noise top-100 ∩ [95% CI] | noise Spearman | could not move | no label-kept iterate "
        "| clean support < 100 px | clean map ∩ input | CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| {REFERENCE_LABEL if r['explainer'] == 'input' else r['explainer']} "
            f"| {r['model']} | {r['n_images']} | {_fmt(r['attack']['topk'])} "
            f"| {r['attack']['spearman']['mean']:.3f} | {_fmt(r['noise']['topk'])} "
            f"| {r['noise']['spearman']['mean']:.3f} | {r['n_could_not_move']} "
            f"| {r['n_no_label_kept_iterate']} | {r['n_clean_support_below_k']} "
            f"| {r['clean_overlap_with_input']:.3f} | {r['cpu_seconds']:.0f} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# The page's tables from stored runs
# --------------------------------------------------------------------------------------------

PAGE_TABLES = ("checks-against-captum-and-zennit", "result-the-shipped-pair",
               "attacked-set-b-the-top-100", "against-the-ensemble")  # fmt: skip
CHECK_ROWS = (
    ("saliency vs Captum `Saliency(abs=False)`", ("saliency_vs_captum",)),
    ("IG vs Captum `IntegratedGradients` (`riemann_right`, 16 steps, zero baseline)",
     ("ig_vs_captum",)),
    ("signed Grad-CAM vs Captum `LayerGradCam(features.5, relu_attributions=False)` + "
     "`LayerAttribution.interpolate(bilinear)`", ("gradcam_vs_captum",)),
    ("ReLU'd Grad-CAM vs the same with `relu_attributions=True`", ("gradcam_relu_vs_captum",)),
    ("LRP through the `create_graph` path vs `zennit.attribution.Gradient`, each composite "
     "(the largest)", ("max", *(f"lrp_{c}_vs_zennit_gradient" for c in LRP_COMPOSITES))),
    ("hand-written LRP vs Zennit: EpsilonPlus / EpsilonAlpha2Beta1 / EpsilonGammaBox",
     tuple(f"lrp_{c}_by_hand_vs_zennit" for c in LRP_COMPOSITES)),
    ("gradient of the attack objective through Zennit vs through the hand-written LRP, "
     "softplus(10) copy, at a random start point (difference relative to its largest entry)",
     tuple(f"lrp_{c}_second_order_rel" for c in LRP_COMPOSITES)),
)  # fmt: skip


def read_runs(paths: Sequence[str | Path]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The result lines of run files (`--out`; a later line of the same model and explainer
    replaces an earlier one), in `EXPLAINERS` order then the models' order, and each model's
    last reference checks."""
    results: dict[tuple[str, str], dict[str, Any]] = {}
    checks: dict[str, Any] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            record = json.loads(line)
            if record["kind"] == "result":
                results[(record["model"], record["explainer"])] = record
            elif record["kind"] == "checks":
                checks[record["model"]] = record
    models = list(dict.fromkeys(model for model, _ in results))
    order = sorted(results, key=lambda k: (EXPLAINERS.index(k[1]), models.index(k[0])))
    return [results[k] for k in order], checks


def _number(value: float) -> str:
    return "0" if value == 0 else f"{value:.1e}"


def checks_table(checks: dict[str, Any]) -> dict[str, Any]:
    """The largest differences of the reference checks, one column per model (`CHECK_ROWS`)."""
    rows = []
    for label, keys in CHECK_ROWS:
        cells = [label]
        for record in checks.values():
            if keys[0] == "max":
                cells.append(_number(max(record[k] for k in keys[1:])))
            else:
                cells.append(" / ".join(_number(record[k]) for k in keys))
        rows.append(cells)
    columns = ["check", *checks]
    return {"columns": columns, "align": "|---" * len(columns) + "|", "rows": rows}


def results_table(records: list[dict[str, Any]]) -> dict[str, Any]:
    """`markdown_table` of `records` as a results table (cells as printed)."""
    lines = markdown_table(records).splitlines()
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]
    return {"columns": cells[0], "align": lines[1], "rows": cells[2:]}


def k_table(wide: list[dict[str, Any]], narrow: list[dict[str, Any]]) -> dict[str, Any]:
    """Each result of the `narrow` run (attacked set 100) beside the `wide` one's (200) on the
    images both attacked (the first n of the same list): the means, the 95 % interval of the
    narrow run and of each image's lower value of the two, the narrow run's noise, and the
    images where the narrow run is lower."""
    by_key = {(r["model"], r["explainer"]): r for r in wide}
    rows = []
    for r in narrow:
        w = by_key[(r["model"], r["explainer"])]
        n = min(r["n_images"], w["n_images"])
        a = np.asarray(w["attack"]["per_image_topk"][:n])
        b = np.asarray(r["attack"]["per_image_topk"][:n])
        noise = float(np.mean(r["noise"]["per_image_topk"][:n]))
        name = REFERENCE_LABEL if r["explainer"] == "input" else r["explainer"]
        rows.append([name, r["model"], str(n), f"{a.mean():.3f}", _fmt(mean_ci(b.tolist())),
                     _fmt(mean_ci(np.minimum(a, b).tolist())), f"{noise:.3f}",
                     f"{int((b < a).sum())} of {n}"])  # fmt: skip
    columns = ["explainer", "model", "images", "k = 200", "k = 100 [95% CI]",
               "worst of both [95% CI]", "noise (k = 100 run)",
               "images where k = 100 is lower"]  # fmt: skip
    return {"columns": columns, "align": "|---" * len(columns) + "|", "rows": rows}


# (this module's explainer, the map's row on ENSEMBLE_MAPS.md, its label here); "map = input" is
# that page's column "map = input (robust)"
ENSEMBLE_MAPS = (
    ("saliency", "saliency", "saliency"),
    ("ig", "integrated gradients", "IG"),
    ("gradcam_relu", "Grad-CAM", "Grad-CAM (ReLU'd)"),
    ("lrp_epsilon_plus", "LRP", "LRP (EpsilonPlus)"),
    ("input", "map = input (robust)", REFERENCE_LABEL),
)
ENSEMBLE_IMAGES = 20  # ENSEMBLE_MAPS.md: the first 20 test images both models classify correctly


def worst_per_image(runs: Sequence[dict[str, Any]]) -> np.ndarray:
    """Each image's lowest top-100 intersection over the results of `runs` (one model and
    explainer; every run attacks the first n images of the same list), over the images of the
    run that attacked the most."""
    longest = max(runs, key=lambda r: r["n_images"])
    worst = np.asarray(longest["attack"]["per_image_topk"], dtype=float)
    for r in runs:
        values = np.asarray(r["attack"]["per_image_topk"], dtype=float)
        worst[: len(values)] = np.minimum(worst[: len(values)], values)
    return worst


def ensemble_table(
    wide: list[dict[str, Any]], narrow: list[dict[str, Any]], ensemble: dict[str, Any]
) -> dict[str, Any]:
    """This page's worst case per map and model (each image's lowest intersection over both
    attacked sets, `worst_per_image`) on the first `ENSEMBLE_IMAGES` images and on all it
    attacked, beside the attack ensemble's mean on those images (`ensemble`: the table "maps"
    of ENSEMBLE_MAPS.md's results, the same images), and whether the ensemble is at or below."""
    rows_by_map = {
        row[0]: dict(zip(ensemble["columns"], row, strict=True)) for row in ensemble["rows"]
    }
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in [*wide, *narrow]:
        runs.setdefault((r["model"], r["explainer"]), []).append(r)
    rows = []
    for name, ens_map, label in ENSEMBLE_MAPS:
        for model in dict.fromkeys(r["model"] for r in wide):
            if (model, name) not in runs:
                continue
            worst = worst_per_image(runs[(model, name)])
            head = worst[:ENSEMBLE_IMAGES]
            column = model if name != "input" else ens_map
            row = rows_by_map["saliency" if name == "input" else ens_map]
            cell = row.get(column, "-") if name != "input" or model == "robust" else "-"
            ens = float(cell.split()[0]) if cell != "-" else math.nan
            verdict = "-" if math.isnan(ens) else ("yes" if ens <= head.mean() else "**no**")
            rows.append([label, model, f"{head.mean():.3f} ({len(head)})",
                         f"{worst.mean():.3f} ({len(worst)})", cell, verdict, "0.128"])  # fmt: skip
    columns = ["map", "model", "this page's worst top-100 ∩ (first 20 images)",
               "this page's worst top-100 ∩ (all its images)",
               "the attack ensemble, ENSEMBLE_MAPS.md (the same 20 images)",
               "ensemble at or below this page's worst (20 images)",
               "random map (expectation k/N = 100/784)"]  # fmt: skip
    return {"columns": columns, "align": "|---" * len(columns) + "|", "rows": rows}


def store_tables(wide_runs: Sequence[str], narrow_runs: Sequence[str]) -> Path:
    """Write the page's tables (`PAGE_TABLES`) from the run files of the attacked set 200
    (`wide_runs`: its checks and results) and 100 (`narrow_runs`), and ENSEMBLE_MAPS.md's
    results, into experiments/results/independent_attacks.json, with the random-map rows of
    `experiments.chance`; returns the file."""
    from experiments import chance
    from experiments.pages import RESULTS

    wide, checks = read_runs(wide_runs)
    narrow, _ = read_runs(narrow_runs)
    ensemble = json.loads((RESULTS / "ensemble_maps.json").read_text())["tables"]["maps"]
    built = (checks_table(checks), results_table(wide), k_table(wide, narrow),
             ensemble_table(wide, narrow, ensemble))  # fmt: skip
    path = RESULTS / "independent_attacks.json"
    data = json.loads(path.read_text())
    for key, table in zip(PAGE_TABLES, built, strict=True):
        expected = chance.EXPECTED.get(f"independent_attacks:{key}")
        data["tables"][key] = chance.with_expected_row(table, *expected) if expected else table
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=list(DEFAULT_MODELS),
        help="label=checkpoint pairs (a path or a shipped name)",
    )
    parser.add_argument(
        "--images",
        type=int,
        default=100,
        help="first N test images every model classifies correctly",
    )
    parser.add_argument(
        "--images-slow", type=int, default=None, help="images for IG and LRP (default: --images)"
    )
    parser.add_argument("--explainers", nargs="+", default=list(EXPLAINERS), choices=EXPLAINERS)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--eps", type=float, default=0.3)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument(
        "--attack-k", type=int, default=200, help="size of the attacked set B (reported k: 100)"
    )
    parser.add_argument(
        "--beta",
        type=float,
        default=10.0,
        help="softplus beta of the surrogate (saliency, IG, Grad-CAM)",
    )
    parser.add_argument("--ig-points", type=int, default=16)
    parser.add_argument("--noise-draws", type=int, default=10)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument(
        "--check-images", type=int, default=16, help="images of the Captum / Zennit checks"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        default="runs/independent_attacks.jsonl",
        help="JSON lines: one per model and explainer, one per model's checks",
    )
    parser.add_argument(
        "--store-tables",
        nargs="+",
        metavar="RUN",
        default=None,
        help="attack nothing: write the page's tables from these run files (attacked set 200) "
        "and those of --narrow-runs (100) into experiments/results/independent_attacks.json",
    )
    parser.add_argument("--narrow-runs", nargs="+", default=[], help="with --store-tables")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 4 images, 5 steps, 1 restart, 2 noise draws",
    )
    return parser


def _run_model(
    label: str,
    model: torch.nn.Module,
    checkpoint: str,
    data: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    args: argparse.Namespace,
    settings: Settings,
    stream: Any,
) -> list[dict[str, Any]]:
    """Run the reference checks and every explainer's attack on one model; write each line."""
    x_all, y_all, idx = data
    n_fast = args.images
    n_slow = args.images_slow if args.images_slow is not None else n_fast
    xc, yc = x_all[idx[: args.check_images]], y_all[idx[: args.check_images]]
    checks = reference_checks(model, xc, yc, settings)
    print(f"## {label}: max |difference| at {len(xc)} clean points")
    for key, value in checks.items():
        print(f"  {key}: {value:.3g}")
    stream.write(json.dumps({"kind": "checks", "model": label, **checks}) + "\n")
    with torch.no_grad():
        agree = float(
            (softplus_copy(model, settings.beta)(x_all[idx]).argmax(1) == y_all[idx]).float().mean()
        )
    print(f"  softplus({settings.beta:g}) copy's accuracy on the attacked images: {agree}")
    records = []
    for name in args.explainers:
        slow = name == "ig" or name.startswith("lrp_")
        sel = idx[: n_slow if slow else n_fast]
        record = {
            "kind": "result",
            "model": label,
            "checkpoint": checkpoint,
            **run_one(model, name, x_all[sel], y_all[sel], settings),
        }
        records.append(record)
        stream.write(json.dumps(record) + "\n")
        stream.flush()
        a, nz = record["attack"]["topk"], record["noise"]["topk"]
        print(
            f"  {name}: attack {a['mean']:.3f}, noise {nz['mean']:.3f}, "
            f"could not move {record['n_could_not_move']}, "
            f"{record['cpu_seconds']:.0f} CPU s",
            flush=True,
        )
    return records


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = _parser().parse_args(argv)
    if args.store_tables:
        print(store_tables(args.store_tables, args.narrow_runs))
        return []
    if args.quick:
        args.images, args.images_slow, args.steps, args.restarts = 4, 4, 5, 1
        args.noise_draws, args.ig_points, args.check_images = 2, 4, 4
    torch.set_num_threads(args.threads)
    settings = Settings(
        eps=args.eps,
        alpha=args.alpha,
        k_attack=args.attack_k,
        steps=args.steps,
        restarts=args.restarts,
        noise_draws=args.noise_draws,
        beta=args.beta,
        ig_points=args.ig_points,
        batch=args.batch,
        seed=args.seed,
    )
    pairs = parse_models(args.models)
    models = load_models(pairs)
    x_all, y_all = load_test_split()
    n_fast = args.images
    n_slow = args.images_slow if args.images_slow is not None else n_fast
    idx = first_correct(models, x_all, y_all, max(n_fast, n_slow))
    started = datetime.datetime.now(datetime.timezone.utc)
    header = {
        "kind": "run",
        "command": "python -m experiments.independent_attacks "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, {args.threads} thread(s)",
        "settings": {k: v for k, v in vars(settings).items() if k != "extra"},
        "models": dict(pairs),
        "weights_sha256": {label: weights_fingerprint(m) for label, m in models.items()},
        "test_indices": idx.tolist(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []
    with out.open("a") as stream:
        stream.write(json.dumps(header) + "\n")
        for label, model in models.items():
            data = (x_all, y_all, idx)
            records += _run_model(label, model, dict(pairs)[label], data, args, settings, stream)
    order = {name: i for i, name in enumerate(EXPLAINERS)}
    records.sort(key=lambda r: (order[r["explainer"]], list(models).index(r["model"])))
    print()
    print(markdown_table(records))
    return records


if __name__ == "__main__":
    main()
