"""Slow, readable fragility attack, one sample at a time, written from Ghorbani et al. (2019).

Only the simple-gradient explainer and the "topk" and "mass_center" objectives, with the update
x_p = clip_[0,1](x_0 + clip_[-eps,eps](x_{p-1} + alpha * sign(d) - x_0)) and the best label-keeping
iterate kept. Used to check the batched implementation, not for speed.
"""

from __future__ import annotations

import numpy as np
import scipy.stats
import torch
from torch import Tensor, nn


def saliency_map(model: nn.Module, x: Tensor, target: int, *, create_graph: bool) -> Tensor:
    """sum_c |d logit_target / d x_c| for one image (C, H, W) -> (H, W)."""
    if not x.requires_grad:
        x = x.detach().requires_grad_(True)
    logit = model(x[None])[0, target]
    (grad,) = torch.autograd.grad(logit, x, create_graph=create_graph)
    return grad.abs().sum(0)


def top_set(importance: Tensor, k: int) -> set[int]:
    values = importance.detach().flatten().numpy()
    return set(np.argsort(-values, kind="stable")[:k].tolist())


def center(importance: Tensor) -> Tensor:
    """Center of mass (row, col) of one (H, W) map."""
    h, w = importance.shape
    total = importance.sum()
    row = sum(importance[i, j] * i for i in range(h) for j in range(w)) / total
    col = sum(importance[i, j] * j for i in range(h) for j in range(w)) / total
    return torch.stack([row, col])


def reference_attack(
    model: nn.Module,
    surrogate: nn.Module,
    x0: Tensor,
    target: int,
    *,
    objective: str,
    epsilon: float,
    step_size: float,
    n_steps: int,
    k: int,
) -> tuple[Tensor, float]:
    """Attack one image (C, H, W); return (adversarial, score of the returned input).

    Score: top-k intersection for "topk", center shift in pixels for "mass_center".
    """
    clean = saliency_map(model, x0, target, create_graph=False).detach()
    clean_top = top_set(clean, k)
    clean_center = center(clean)
    label = int(model(x0[None]).argmax())

    def score(importance: Tensor) -> tuple[float, float]:
        """Lower is better: (top-k intersection, Spearman) or (-center shift, 0)."""
        if objective == "topk":
            inter = len(clean_top & top_set(importance, k)) / k
            rho = scipy.stats.spearmanr(clean.flatten().numpy(), importance.flatten().numpy())
            return inter, float(rho.statistic)
        return -float((center(importance) - clean_center).norm()), 0.0

    best_x, best = x0.clone(), score(clean)
    x = x0.clone()
    for _ in range(n_steps):
        xv = x.clone().requires_grad_(True)
        importance = saliency_map(surrogate, xv, target, create_graph=True)
        importance = importance / importance.sum()
        if objective == "topk":
            value = -sum(importance.flatten()[i] for i in sorted(clean_top))
        else:
            value = (center(importance) - clean_center).norm()
        (d,) = torch.autograd.grad(value, xv)
        x = (x0 + (x + step_size * d.sign() - x0).clamp(-epsilon, epsilon)).clamp(0, 1).detach()
        if int(model(x[None]).argmax()) != label:
            continue
        new = score(saliency_map(model, x, target, create_graph=False).detach())
        if new < best:
            best_x, best = x.clone(), new
    return best_x, (best[0] if objective == "topk" else -best[0])
