"""What bench_eval.py compares the project's metrics with: Quantus and Captum calls set up to
compute the same values (the alignment of tests/metrics/test_*_peers.py), and bare loops of
the model calls an attack or a curve needs (the compute floor).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import Tensor, nn

from robust_train.explain import saliency
from robust_train.models import softplus

# --------------------------------------------------------------------------- fidelity curves


def rank_map(importance: Tensor) -> Tensor:
    """Ranks 0..H*W-1 of each map in our removal order (stable, descending = most important).

    A map without ties: Quantus' np.argsort is not stable, our sort is, so both order pixels the
    same only when no two values are equal. The ranks keep our order exactly.
    """
    flat = importance.flatten(1)
    order = torch.sort(flat, dim=1, descending=True, stable=True).indices
    ranks = torch.empty_like(order).scatter_(1, order, torch.arange(flat.shape[1]).expand_as(order))
    return (flat.shape[1] - 1 - ranks).to(torch.float64).view_as(importance)  # larger = earlier


def quantus_pixel_flipping(
    model: nn.Module, x: Tensor, y: Tensor, ranks: Tensor, n_steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """Quantus PixelFlipping MIF and LIF curves (B, n_steps), fill 0, softmax probability.

    LIF is pixel flipping on the negated map. Quantus flips (channel, pixel) features; channel
    offsets far below the gaps between ranks keep a pixel's channels consecutive, and a step of
    C * (pixels per step) features removes whole pixels, as ours does.
    """
    import quantus

    b, c, h, w = x.shape
    metric = quantus.PixelFlipping(
        features_in_step=(h * w // n_steps) * c, perturb_baseline=0.0, disable_warnings=True
    )
    offsets = 0.1 * np.arange(c, 0, -1).reshape(1, c, 1, 1) / c
    curves = []
    for sign in (1.0, -1.0):
        a_batch = sign * ranks[:, None].numpy() + offsets
        curves.append(
            np.asarray(
                metric(
                    model=model,
                    x_batch=x.numpy(),
                    y_batch=y.numpy(),
                    a_batch=a_batch,
                    device="cpu",
                    batch_size=b,
                )
            )
        )
    return curves[0], curves[1]


def bare_curve_forwards(
    model: nn.Module, x: Tensor, n_steps: int, chunk: int | None = None
) -> Callable[[], None]:
    """The forwards fidelity_curves needs: the clean batch and 2 * n_steps perturbed copies of it
    (pixel values do not change the cost of a dense forward), `chunk` rows per forward."""
    rows = x.repeat(2 * n_steps, 1, 1, 1)
    size = chunk or rows.shape[0]

    def run() -> None:
        with torch.no_grad():
            for start in range(0, x.shape[0], size):
                model(x[start : start + size])
            for start in range(0, rows.shape[0], size):
                model(rows[start : start + size])

    return run


# -------------------------------------------------------------------------- Lipschitz estimate


def _quantus_explain(model, inputs, targets, **_):
    return saliency(model, torch.as_tensor(inputs), torch.as_tensor(targets)).detach().numpy()


def quantus_lipschitz(
    model: nn.Module, x: Tensor, y: Tensor, n_samples: int, std: float, points: Tensor | None = None
) -> np.ndarray:
    """Quantus LocalLipschitzEstimate (Gaussian std `std`, per-image max normalisation).

    With `points` (N, B, C, H, W) its perturbation function replays them, one per Quantus step.
    """
    import quantus

    extra = {}
    if points is not None:
        replay: Iterator[np.ndarray] = iter([p.reshape(x.shape[0], -1).numpy() for p in points])
        extra["perturb_func"] = lambda arr, **_: next(replay)
    metric = quantus.LocalLipschitzEstimate(
        nr_samples=n_samples,
        perturb_std=std,
        normalise=True,
        disable_warnings=True,
        normalise_func_kwargs={"normalise_axes": (1, 2, 3)},
        **extra,
    )
    return np.asarray(
        metric(
            model=model,
            x_batch=x.numpy(),
            y_batch=y.numpy(),
            a_batch=None,
            explain_func=_quantus_explain,
            device="cpu",
            batch_size=x.shape[0],
        )
    )


def captum_sensitivity(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    n_samples: int,
    radius: float,
    points: Tensor | None = None,
    chunk: int | None = None,
) -> Tensor:
    """Captum sensitivity_max (uniform L_inf samples of `radius`); with `points` (N, B, ...)
    its perturbation function returns them, sample-minor as Captum repeats its inputs.
    `chunk` is its max_examples_per_batch (None: all samples of all images at once)."""
    from captum.metrics import sensitivity_max

    def explain(inputs, target):
        return (saliency(model, inputs[0] if isinstance(inputs, tuple) else inputs, target),)

    kwargs = {}
    if points is not None:
        flat = points.transpose(0, 1).reshape(-1, *x.shape[1:])
        kwargs["perturb_func"] = lambda inputs, *_, **__: flat
    return sensitivity_max(
        explain,
        x,
        perturb_radius=radius,
        n_perturb_samples=n_samples,
        target=y,
        max_examples_per_batch=chunk,
        **kwargs,
    )


# --------------------------------------------------------------------------- fragility attack


def bare_attack(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    epsilon: float,
    n_steps: int,
    k: int,
    beta: float = 10.0,
    ranking: bool = False,
    ig_steps: int | None = None,
    step_size: float | None = None,
    ig_chunk_steps: int | None = None,
    rank_chunk_steps: int | None = None,
) -> Tensor:
    """The compute floor of a top-k fragility attack, in plain torch.

    Per step: the map of the softplus copy with create_graph (saliency, or with `ig_steps`
    integrated gradients from a zero baseline, trapezoid rule), the top-k objective, its gradient
    w.r.t. the input, a sign step, the projection, and a label-check forward of the model.
    `ig_chunk_steps`: path steps per forward of the surrogate's IG (None: the whole path in one
    batch).

    With `ranking=True` the loop is the bare loop of the whole algorithm (Ghorbani et al. 2019
    score every iterate with the ORIGINAL model's map and keep the best label-keeping one): the
    model's map of the iterate (no graph), its top-k intersection with the clean map, and the
    label, taken from a forward the map already runs (the saliency forward; for IG the path point
    alpha = 1, which is the iterate itself), so no separate label forward. `rank_chunk_steps`:
    path steps per forward of that IG (None: the whole path in one batch).
    """
    step = epsilon / 8 if step_size is None else step_size
    surrogate = softplus(model, beta).eval()
    for p in surrogate.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        clean_label = model(x).argmax(1)
    clean_map, _ = _map(model, x, y, create_graph=False, ig_steps=ig_steps)
    top = _topk(clean_map, k)
    adv = x
    for _ in range(n_steps):
        xv = adv.detach().requires_grad_(True)
        maps, _ = _map(
            surrogate, xv, y, create_graph=True, ig_steps=ig_steps, chunk_steps=ig_chunk_steps
        )
        weights = maps / maps.sum(1, keepdim=True).clamp_min(1e-12)
        (grad,) = torch.autograd.grad(-(weights * top).sum(), xv)
        adv = (x + (xv.detach() + step * grad.sign() - x).clamp(-epsilon, epsilon)).clamp(0, 1)
        if ranking:
            rank_map_, logits = _map(
                model, adv, y, create_graph=False, ig_steps=ig_steps, chunk_steps=rank_chunk_steps
            )
            _kept = logits.argmax(1) == clean_label
            _score = (_topk(rank_map_, k) & top).sum(1)
        else:
            with torch.no_grad():
                _kept = model(adv).argmax(1) == clean_label
    return adv


def _map(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    create_graph: bool,
    ig_steps: int | None = None,
    chunk_steps: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Flat importance maps (B, H*W), sum over channels of |attribution|, and the logits of `x`
    (detached). The attribution is d logit_y / d x, or with `ig_steps` integrated gradients from
    a zero baseline (`chunk_steps` path steps per forward), whose last path point (alpha = 1) is
    `x` itself and gives the logits."""
    with torch.enable_grad():
        xv = x if x.requires_grad else x.detach().requires_grad_(True)
        if ig_steps is None:
            logits = model(xv)
            score = logits.gather(1, y[:, None]).sum()
            (grad,) = torch.autograd.grad(score, xv, create_graph=create_graph)
            return grad.abs().sum(1).flatten(1), logits.detach()
        alphas = torch.linspace(0.0, 1.0, ig_steps).view(-1, 1, 1, 1, 1)
        weights = torch.full((ig_steps, 1, 1, 1, 1), 1.0 / (ig_steps - 1))
        weights[[0, -1]] /= 2
        total = torch.zeros_like(xv)
        size = chunk_steps or ig_steps
        for first in range(0, ig_steps, size):
            a, w = alphas[first : first + size], weights[first : first + size]
            points = (a * xv).flatten(0, 1)
            if not create_graph:
                points = points.detach().requires_grad_(True)
            logits = model(points)
            score = logits.gather(1, y.repeat(a.shape[0])[:, None]).sum()
            (grad,) = torch.autograd.grad(score, points, create_graph=create_graph)
            total = total + (grad.view(a.shape[0], *x.shape) * w).sum(0)
        return (xv * total).abs().sum(1).flatten(1), logits[-x.shape[0] :].detach()


def _topk(maps: Tensor, k: int) -> Tensor:
    return torch.zeros_like(maps, dtype=torch.bool).scatter_(1, maps.topk(k, dim=1).indices, True)
