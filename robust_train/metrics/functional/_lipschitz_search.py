"""Random search and projected gradient ascent for the local Lipschitz estimate.

Rows: perturbed inputs are rows of a virtual batch, sample-major (row `s * B + b` is the s-th
point of image b), so `inputs.repeat(k, 1, 1, 1)` gives the clean images of k samples. Samples
are drawn one (B, C, H, W) tensor at a time, in order, whatever the chunk size, so results do not
depend on `internal_batch_size`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from robust_train.core.balls import step_direction
from robust_train.core.runtime import row_chunks
from robust_train.explain.protocol import Explainer
from robust_train.metrics.functional._lipschitz_parts import (
    draw_offsets,
    explanation_vectors,
    project,
    ratio,
)

__all__ = ["Ball", "Problem", "random_search", "gradient_search"]


@dataclass(frozen=True)
class Ball:
    """Where perturbed inputs live: radius and norm of the ball, sampling law, [0, 1] clipping."""

    radius: float
    norm: str
    sampling: str
    clamp: bool


@dataclass
class Problem:
    """The model, explainer, clean images and comparison settings; clean explanations cached."""

    model: nn.Module
    explain: Explainer
    inputs: Tensor
    target: Tensor
    settings: dict
    chunk: int | None
    clean_vectors: Tensor = field(init=False)

    def __post_init__(self) -> None:
        parts = []
        for a, b in row_chunks(self.inputs.shape[0], self.chunk):
            e = self.explain(self.model, self.inputs[a:b], self.target[a:b], create_graph=False)
            parts.append(self._vectors(e.detach()))
        self.clean_vectors = torch.cat(parts)

    def _vectors(self, explanation: Tensor) -> Tensor:
        return explanation_vectors(explanation, self.settings["map"], self.settings["normalize"])

    def ratio(self, rows: slice, points: Tensor, create_graph: bool = False) -> Tensor:
        """Ratio at `points` for rows `rows` of the sample-major virtual batch."""
        images = torch.arange(rows.start, rows.stop, device=points.device) % self.inputs.shape[0]
        explanation = self.explain(
            self.model, points, self.target[images], create_graph=create_graph
        )
        vectors = self._vectors(explanation if create_graph else explanation.detach())
        return ratio(
            self.clean_vectors[images],
            vectors,
            self.inputs[images],
            points,
            map_norm=self.settings["map_norm"],
            divide_by_distance=self.settings["divide"],
        )

    def ratios(self, points: Tensor) -> Tensor:
        """Ratios of all rows (k*B,) for points (k*B, C, H, W), `chunk` rows per explainer call."""
        parts = [
            self.ratio(slice(a, b), points[a:b]).detach()
            for a, b in row_chunks(points.shape[0], self.chunk)
        ]
        return torch.cat(parts)


def _offset_groups(
    problem: Problem, n_total: int, ball: Ball, generator: torch.Generator | None
) -> Iterator[tuple[int, Tensor]]:
    """(k, offsets (k*B, C, H, W)) for consecutive groups of k samples, drawn in order."""
    batch = problem.inputs.shape[0]
    per_group = n_total if problem.chunk is None else max(1, problem.chunk // batch)
    done = 0
    while done < n_total:
        k = min(per_group, n_total - done)
        draws = [
            draw_offsets(problem.inputs, ball.radius, ball.norm, ball.sampling, generator)
            for _ in range(k)
        ]
        yield k, torch.cat(draws)
        done += k


def random_search(
    problem: Problem, n_samples: int, ball: Ball, generator: torch.Generator | None
) -> Tensor:
    """Max ratio over `n_samples` random points per image, (B,); 0 when n_samples is 0."""
    batch = problem.inputs.shape[0]
    best = torch.zeros(batch, device=problem.inputs.device, dtype=problem.inputs.dtype)
    for k, offsets in _offset_groups(problem, n_samples, ball, generator):
        points = problem.inputs.repeat(k, 1, 1, 1) + offsets
        points = points.clamp(0.0, 1.0) if ball.clamp else points
        best = torch.maximum(best, problem.ratios(points).view(k, batch).amax(0))
    return best


def gradient_search(
    problem: Problem,
    n_restarts: int,
    n_steps: int,
    step_size: float,
    ball: Ball,
    generator: torch.Generator | None,
) -> Tensor:
    """Max ratio over every point visited by `n_restarts` ascents of `n_steps` points, (B,).

    Each point costs one explainer call; all but the last of a restart keep the graph
    (`create_graph=True`) to differentiate the ratio with respect to the point. Steps: `sign`
    of the gradient for L_inf, the normalised gradient for L2, then projection onto the ball.
    """
    batch = problem.inputs.shape[0]
    best = torch.zeros(batch, device=problem.inputs.device, dtype=problem.inputs.dtype)
    for k, offsets in _offset_groups(problem, n_restarts, ball, generator):
        clean = problem.inputs.repeat(k, 1, 1, 1)
        start = project(clean, clean + offsets, ball.radius, ball.norm, ball.clamp)
        values = torch.cat(
            [
                _ascend(problem, slice(a, b), start[a:b], clean[a:b], n_steps, step_size, ball)
                for a, b in row_chunks(k * batch, problem.chunk)
            ]
        )
        best = torch.maximum(best, values.view(k, batch).amax(0))
    return best


def _ascend(
    problem: Problem,
    rows: slice,
    start: Tensor,
    clean: Tensor,
    n_steps: int,
    step_size: float,
    ball: Ball,
) -> Tensor:
    point = start.detach()
    best = torch.zeros(point.shape[0], device=point.device, dtype=point.dtype)
    for step in range(n_steps):
        last = step == n_steps - 1
        with torch.enable_grad():
            point = point.detach().requires_grad_(not last)
            value = problem.ratio(rows, point, create_graph=not last)
            best = torch.maximum(best, value.detach())
            if last:
                break
            grad = _gradient(value, point)
        moved = point.detach() + step_size * step_direction(grad, ball.norm)
        point = project(clean, moved, ball.radius, ball.norm, ball.clamp)
    return best


def _gradient(value: Tensor, point: Tensor) -> Tensor:
    if not value.requires_grad:  # the ratio does not depend on the point (e.g. a detached map)
        return torch.zeros_like(point)
    (grad,) = torch.autograd.grad(value.sum(), point, allow_unused=True)
    return torch.zeros_like(point) if grad is None else torch.nan_to_num(grad)
