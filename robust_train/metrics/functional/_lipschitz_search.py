"""Evaluating the Lipschitz ratio on rows of perturbed inputs, and projected ascent on it."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from robust_train.metrics.functional._lipschitz_parts import explanation_vectors, project, ratio
from robust_train.metrics.functional._metric_utils import Explainer, row_chunks

__all__ = ["evaluate_rows", "ascend"]


def _row_ratio(
    model: nn.Module,
    explain: Explainer,
    clean: Tensor,
    target: Tensor,
    clean_vectors: Tensor,
    perturbed: Tensor,
    settings: dict,
    create_graph: bool,
) -> Tensor:
    explanation = explain(model, perturbed, target, create_graph=create_graph)
    if not create_graph:
        explanation = explanation.detach()
    vectors = explanation_vectors(explanation, settings["map"], settings["normalize"])
    return ratio(
        clean_vectors,
        vectors,
        clean,
        perturbed,
        map_norm=settings["map_norm"],
        divide_by_distance=settings["divide"],
    )


def evaluate_rows(
    model: nn.Module,
    explain: Explainer,
    clean: Tensor,
    target: Tensor,
    clean_vectors: Tensor,
    perturbed: Tensor,
    chunk: int | None,
    settings: dict,
) -> Tensor:
    """Ratio for every row (R,), explainer called on at most `chunk` rows at a time."""
    parts = [
        _row_ratio(
            model,
            explain,
            clean[a:b],
            target[a:b],
            clean_vectors[a:b],
            perturbed[a:b],
            settings,
            create_graph=False,
        ).detach()
        for a, b in row_chunks(clean.shape[0], chunk)
    ]
    return torch.cat(parts)


def ascend(
    model: nn.Module,
    explain: Explainer,
    clean: Tensor,
    target: Tensor,
    clean_vectors: Tensor,
    start: Tensor,
    *,
    n_steps: int,
    step_size: float,
    radius: float,
    norm: str,
    clamp: bool,
    settings: dict,
) -> Tensor:
    """Projected gradient ascent on the ratio from `start`; the best ratio seen per row, (R,).

    Every visited point costs one explainer call; the first `n_steps - 1` calls keep the graph
    (`create_graph=True`) to differentiate the ratio with respect to the perturbed input.
    """
    point = start.detach()
    best = torch.zeros(clean.shape[0], device=clean.device, dtype=clean.dtype)
    for step in range(n_steps):
        last = step == n_steps - 1
        with torch.enable_grad():
            point = point.detach().requires_grad_(not last)
            value = _row_ratio(
                model, explain, clean, target, clean_vectors, point, settings, create_graph=not last
            )
            best = torch.maximum(best, value.detach())
            if last:
                break
            grad = _gradient(value, point)
        point = project(
            clean, point.detach() + step_size * _direction(grad, norm), radius, norm, clamp
        )
    return best


def _gradient(value: Tensor, point: Tensor) -> Tensor:
    if not value.requires_grad:  # the ratio does not depend on the point (e.g. a detached map)
        return torch.zeros_like(point)
    (grad,) = torch.autograd.grad(value.sum(), point, allow_unused=True)
    return torch.zeros_like(point) if grad is None else torch.nan_to_num(grad)


def _direction(grad: Tensor, norm: str) -> Tensor:
    if norm == "linf":
        return grad.sign()
    lengths = grad.flatten(1).norm(dim=1).view(-1, 1, 1, 1)
    return torch.where(lengths > 0, grad / lengths.clamp_min(1e-12), torch.zeros_like(grad))
