"""A gradient-free refinement of a fragility attack: random search in squares of the L_inf ball.

After the gradient attacks, `random_search` starts from each image's best point and tries random
changes that need no gradient: each query redraws the perturbation inside one random square
window of the image to a corner of the ball (`x0 + epsilon * s` with a random sign s per channel,
clipped to [0, 1]), as the Square attack does (Andriushchenko, Croce, Flammarion & Hein, ECCV
2020). A query is kept where it keeps the label and its map ranks better under the objective
(`FragilityObjective.score`, the same ranking as the gradient attacks), so the result can only
improve on the start. The window's share of the image starts at `p_init` and halves at a tenth,
a half and nine tenths of the queries.

A gradient attack that was misled (a masked or shattered gradient, a surrogate far from the
model) leaves room that this search finds; where it finds none, the gradient attack was not held
back by its gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from robust_train.attacks.objectives.base import FragilityObjective, Score
from robust_train.core.runtime import row_chunks
from robust_train.explain.maps import importance_map
from robust_train.explain.protocol import Explainer

__all__ = ["SearchOutcome", "maps_and_labels", "random_search"]

_HALVINGS = (0.1, 0.5, 0.9)  # fractions of the queries where the window's share halves


@dataclass
class SearchOutcome:
    """The points the search kept (B, C, H, W), their maps (B, H, W) and scores, and which
    images it improved (B,) bool."""

    points: Tensor
    maps: Tensor
    score: Score
    improved: Tensor


def maps_and_labels(
    model: nn.Module, explain: Explainer, x: Tensor, target: Tensor, chunk: int | None
) -> tuple[Tensor, Tensor]:
    """Detached importance maps (B, H, W) of `explain` and predicted labels (B,), in chunks.

    Examples:
        >>> from robust_train.explain import saliency
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
        >>> maps, labels = maps_and_labels(net, saliency, torch.rand(3, 1, 2, 2),
        ...                                torch.tensor([0, 1, 0]), None)
        >>> maps.shape, labels.shape
        (torch.Size([3, 2, 2]), torch.Size([3]))
    """
    maps, labels = [], []
    for a, b in row_chunks(x.shape[0], chunk):
        rows = x[a:b].detach()
        with torch.enable_grad():
            explanation = explain(model, rows, target[a:b], create_graph=False)
        maps.append(torch.nan_to_num(importance_map(explanation).detach(), 0.0, 0.0, 0.0))
        with torch.no_grad():
            labels.append(model(rows).argmax(1))
    return torch.cat(maps), torch.cat(labels)


def _window_share(query: int, queries: int, p_init: float) -> float:
    passed = sum(query >= int(f * queries) for f in _HALVINGS)
    return p_init * 0.5**passed


def _square_mask(shape: torch.Size, side: int, generator: torch.Generator) -> Tensor:
    """(B, 1, H, W) bool: one random side x side window per image."""
    batch, _, height, width = shape
    side_h, side_w = min(side, height), min(side, width)
    dev = generator.device
    top = torch.randint(0, height - side_h + 1, (batch, 1, 1, 1), generator=generator, device=dev)
    left = torch.randint(0, width - side_w + 1, (batch, 1, 1, 1), generator=generator, device=dev)
    rows = torch.arange(height, device=dev).view(1, 1, -1, 1)
    cols = torch.arange(width, device=dev).view(1, 1, 1, -1)
    return (rows >= top) & (rows < top + side_h) & (cols >= left) & (cols < left + side_w)


def random_search(
    model: nn.Module,
    explain: Explainer,
    objective: FragilityObjective,
    *,
    x0: Tensor,
    start: Tensor,
    start_score: Score,
    start_maps: Tensor,
    clean_label: Tensor,
    target: Tensor,
    epsilon: float,
    queries: int,
    generator: torch.Generator,
    p_init: float = 0.05,
    chunk: int | None = None,
) -> SearchOutcome:
    """Refine `start` (points of the L_inf ball of radius `epsilon` around `x0`) by `queries`
    Square-attack queries, each one map per image (see the module docstring).

    Args:
        model: the original classifier (eval mode; labels and maps come from it).
        explain: the explainer (called without a graph).
        objective: the bound objective ranking maps (lower score is better for the attack).
        x0: clean images (B, C, H, W) in [0, 1].
        start, start_score, start_maps: where each image starts, its score and map.
        clean_label: (B,) the clean predicted labels; a query that changes one is never kept.
        target: (B,) the explained class.
        epsilon: the L_inf budget.
        queries: number of queries (0 returns the start).
        generator: the randomness of windows and signs.
        p_init: the window's first share of the image's pixels.
        chunk: images per explainer call (None: all).

    Returns:
        SearchOutcome: the kept points (each within the budget, in [0, 1], label kept where the
        start kept it), their maps and scores, and the images where a query improved the score.

    Examples:
        >>> from robust_train.attacks.objectives.base import get_objective
        >>> from robust_train.explain import saliency
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 2))
        >>> x = torch.rand(2, 1, 4, 4)
        >>> maps, labels = maps_and_labels(net, saliency, x, labels_ := net(x).argmax(1), None)
        >>> obj = get_objective("topk")(maps, k=4, measure_k=4)
        >>> out = random_search(net, saliency, obj, x0=x, start=x, start_score=obj.score(maps),
        ...                     start_maps=maps, clean_label=labels, target=labels, epsilon=0.1,
        ...                     queries=5, generator=torch.Generator().manual_seed(0))
        >>> bool(((out.points - x).abs() <= 0.1 + 1e-6).all())
        True
    """
    best_x, best_maps = start.detach().clone(), start_maps.detach().clone()
    best_score = (start_score[0].clone(), start_score[1].clone())
    improved = torch.zeros(x0.shape[0], dtype=torch.bool, device=x0.device)
    n_pixels = x0.shape[-2] * x0.shape[-1]
    for query in range(queries):
        side = max(1, round((_window_share(query, queries, p_init) * n_pixels) ** 0.5))
        mask = _square_mask(x0.shape, side, generator).to(x0.device)
        signs = torch.randint(0, 2, (*x0.shape[:2], 1, 1), generator=generator,
                              device=generator.device).to(x0)  # fmt: skip
        corner = x0 + epsilon * (2 * signs - 1)
        candidate = torch.where(mask, corner, best_x).clamp(0, 1)
        maps, labels = maps_and_labels(model, explain, candidate, target, chunk)
        score = objective.score(maps)
        better = (labels == clean_label) & FragilityObjective.better(score, best_score)
        best_x[better], best_maps[better] = candidate[better], maps[better]
        best_score = (
            torch.where(better, score[0], best_score[0]),
            torch.where(better, score[1], best_score[1]),
        )
        improved |= better
    return SearchOutcome(best_x, best_maps, best_score, improved)
