"""The steps of a fragility attack, as module-level functions over one `AttackContext`.

`fragility_attack` checks its arguments into an `AttackContext`, then: `start` (clean labels
and maps, the objective, the running best, the directions to run: `_directions.directions`),
`run_restart` for each direction and restart (start point, then `n_steps` of direction,
projected step, evaluation on the ORIGINAL model, keep the best label-keeping iterate, shared by
every direction and restart, so each image keeps its worst result over all of them; a sample
whose gradient direction is exactly zero takes a random step instead, `off_flat_point`), and
`finish` (the `FragilityResult`, with samples whose gradient
direction was zero at every step, or whose clean map is constant, marked unmeasured and their
metrics NaN).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.attacks._directions import Direction, directions
from robust_train.attacks.objectives.base import FragilityObjective
from robust_train.attacks.options import AttackOptions
from robust_train.attacks.result import FragilityResult
from robust_train.core.balls import project, step_direction
from robust_train.core.runtime import row_chunks
from robust_train.explain.clamp import smooth_map_clamps
from robust_train.explain.maps import importance_map
from robust_train.explain.protocol import Explainer
from robust_train.explain.similarity import (
    center_of_mass_shift,
    kendall_tau,
    spearman_correlation,
    topk_intersection,
)
from robust_train.models.softplus import smooth_relus, zero_direction_cause


@dataclass(frozen=True)
class AttackContext:
    """The checked settings of one attack call (see `fragility_attack` for their meaning); set
    once, never changed: what an attack finds while it runs is its `AttackState`'s."""

    model: nn.Module
    inputs: Tensor
    target: Tensor
    explain: Explainer
    explainer_name: str
    objective_cls: type[FragilityObjective]
    options: AttackOptions
    region: Tensor | None
    seeds: list[int]
    chunk: int | None
    progress: bool
    piecewise_constant: bool = True


@dataclass
class AttackState:
    """The running best of an attack: per sample, the best label-keeping iterate so far; the
    directions it runs (`_directions.directions`, chosen on the clean images) and the ReLU
    calls their surrogates intercepted."""

    x0: Tensor
    clean_label: Tensor
    clean_logits: Tensor
    clean_map: Tensor
    objective: FragilityObjective
    best_x: Tensor
    best_map: Tensor
    best_score: tuple[Tensor, Tensor]
    improved: Tensor
    n_changes: Tensor
    moved: Tensor
    directions: tuple[Direction, ...] = ()
    relu_calls: int = 0
    bar: Any = field(default=None, repr=False)


def forward_and_maps(ctx: AttackContext, x: Tensor) -> tuple[Tensor, Tensor]:
    """Logits (no graph) and detached importance maps of the ORIGINAL model, in chunks.

    When the explainer forwards the chunk itself, its logits are taken from that forward (a
    forward hook): saliency and input x gradient forward the chunk as it is; integrated gradients
    from a zero baseline with a rule that ends at alpha = 1 (the default trapezoid rule) forwards
    it as the last path step, a block of its batch of path points. Otherwise one no-grad forward
    gives them.
    """
    logits, maps = [], []
    for a, b in row_chunks(x.shape[0], ctx.chunk):
        rows = x[a:b].detach()
        seen = _LogitsOf(rows)
        handle = ctx.model.register_forward_hook(seen)
        try:
            explanation = ctx.explain(ctx.model, rows, ctx.target[a:b], create_graph=False)
        finally:
            handle.remove()
        maps.append(torch.nan_to_num(importance_map(explanation).detach(), 0.0, 0.0, 0.0))
        if seen.logits is None:
            with torch.no_grad():
                seen.logits = ctx.model(rows)
        logits.append(seen.logits)
    return torch.cat(logits), torch.cat(maps)


class _LogitsOf:
    """Forward hook keeping the logits of `rows` from the first forward that contains them: an
    input equal to `rows`, or an input of whole blocks of `len(rows)` rows one of which equals
    `rows` (searched from the last block, where an integrated-gradients path puts alpha = 1).

    Only bit-for-bit equal inputs match, so the kept logits are the model's output on `rows`
    (in eval mode rows do not interact: they equal a separate forward's up to float rounding).
    """

    def __init__(self, rows: Tensor) -> None:
        self.rows = rows
        self.logits: Tensor | None = None

    def __call__(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if self.logits is not None or len(args) != 1 or not isinstance(output, Tensor):
            return
        (inputs,) = args
        n = self.rows.shape[0]
        if (
            not isinstance(inputs, Tensor)
            or n == 0
            or inputs.shape[1:] != self.rows.shape[1:]
            or inputs.shape[0] % n
            or output.shape[0] != inputs.shape[0]
        ):
            return
        for start in range(inputs.shape[0] - n, -1, -n):
            if torch.equal(inputs[start : start + n].detach(), self.rows):
                self.logits = output[start : start + n].detach()
                return


def start(ctx: AttackContext) -> AttackState:
    """Clean predictions and maps, the bound objective and the initial best (the clean input)."""
    x0 = ctx.inputs.detach().clone()
    logits, clean_map = forward_and_maps(ctx, x0)
    o = ctx.options
    assert o.k is not None and o.measure_k is not None, "resolved options"
    objective = ctx.objective_cls(clean_map, k=o.k, measure_k=o.measure_k, region=ctx.region)
    runs: tuple[Direction, ...] = ()
    if objective.needs_gradient:
        runs = tuple(
            directions(
                o.direction,
                o.surrogate_beta,
                piecewise_constant=ctx.piecewise_constant,
                explain=ctx.explain,
                model=ctx.model,
                inputs=x0,
                target=ctx.target,
            )
        )
    zeros = torch.zeros(x0.shape[0], dtype=torch.bool, device=x0.device)
    return AttackState(
        x0=x0,
        clean_label=logits.argmax(1),
        clean_logits=logits,
        clean_map=clean_map,
        objective=objective,
        best_x=x0.clone(),
        best_map=clean_map.clone(),
        best_score=objective.score(clean_map),
        improved=zeros.clone(),
        n_changes=torch.zeros(x0.shape[0], dtype=torch.long, device=x0.device),
        moved=zeros,
        directions=runs,
    )


def direction_beta(state: AttackState) -> float | None:
    """The softplus beta of the model's ReLU surrogate, where a direction run used it."""
    used = [d.relu_beta for d in state.directions if d.relu_beta is not None]
    return used[0] if used else None


def gradient_direction(
    ctx: AttackContext, state: AttackState, x: Tensor, direction: Direction
) -> Tensor:
    """The steepest-ascent step of d(ascent value)/dx for `ctx.norm` (its sign for L_inf, its
    per-sample L2 normalisation for L2), through the explainer with the surrogates of
    `direction` (the model's ReLUs under `smooth_relus`, a map's own final ReLU under
    `smooth_map_clamps`; `robust_train.attacks._directions`); double backprop. The ReLU calls
    the surrogate intercepted are counted in `state.relu_calls`."""
    objective, parts = state.objective, []
    for a, b in row_chunks(x.shape[0], ctx.chunk):
        xv = x[a:b].detach().requires_grad_(True)
        with smooth_relus(direction.relu_beta) as relus, smooth_map_clamps(direction.clamp_beta):
            explanation = ctx.explain(ctx.model, xv, ctx.target[a:b], create_graph=True)
            value = objective.ascent_value(importance_map(explanation), slice(a, b))
        state.relu_calls += relus.calls
        grad = None
        if value.requires_grad:
            (grad,) = torch.autograd.grad(value.sum(), xv, allow_unused=True)
        if grad is None:
            raise ValueError(
                f"the map of `explainer` {ctx.explainer_name!r} is not a differentiable "
                "function of the input: the explainer detaches (e.g. a Captum wrapper) or "
                "the map does not depend on the input (a linear model), so no gradient "
                "attack can move it"
            )
        parts.append(step_direction(torch.nan_to_num(grad, nan=0.0), ctx.options.norm))
    return torch.cat(parts)


def take_step(
    ctx: AttackContext,
    state: AttackState,
    x: Tensor,
    gen: torch.Generator,
    direction: Direction | None = None,
) -> Tensor:
    """One projected step from `x`: a sign step and the L_inf projection, or (`ctx.norm` "l2")
    an L2-normalised step and the exact projection onto the L2 ball intersected with [0, 1]
    (`robust_train.core.balls.project`); records which samples had a non-zero direction.
    A gradient objective follows `direction`; the others draw theirs (`objective.direction`)."""
    objective = state.objective
    if objective.needs_gradient:
        assert direction is not None, "a gradient objective needs a direction"
        d = gradient_direction(ctx, state, x, direction)
        flat = d.flatten(1).eq(0).all(1)
        state.moved |= ~flat
        if bool(flat.any()):
            d = torch.where(flat.view(-1, *[1] * (d.dim() - 1)), off_flat_point(ctx, d, gen), d)
    else:
        d = objective.direction(x, gen)
        if ctx.options.norm != "linf":
            d = step_direction(d, ctx.options.norm)
        state.moved |= d.flatten(1).ne(0).any(1)
    o = ctx.options
    assert o.epsilon is not None and o.step_size is not None, "resolved options"
    x = x + o.step_size * d
    return project(x, state.x0, o.epsilon, o.norm).detach()


def off_flat_point(ctx: AttackContext, d: Tensor, gen: torch.Generator) -> Tensor:
    """A random unit step (uniform signs for L_inf, a uniform direction for L2) for the samples
    whose gradient direction is exactly zero: a flat point of the objective, not a robust one.

    The common case: a map that is zero wherever the input is zero (integrated gradients or
    DeepLIFT from a zero baseline, LRP) has no more than k non-zero pixels on a thin digit, so the
    clean top-k set holds all of its mass, the top-k value is -1 around x0 and |.| has slope 0 at
    0: the gradient is zero at the clean input although a step that lights up a background pixel
    moves mass out of the set. One random step leaves such a point; the attack then follows the
    gradient again. A sample still counts as measured only once its gradient direction was
    non-zero (a map that is flat everywhere stays unmeasured, `finish`).
    """
    noise = torch.rand(d.shape, generator=gen, device=d.device, dtype=d.dtype) * 2 - 1
    return step_direction(noise, ctx.options.norm)


def keep_best(ctx: AttackContext, state: AttackState, x: Tensor) -> None:
    """Score iterate `x` on the original model; keep it where it beats the best and kept the
    label."""
    logits, maps = forward_and_maps(ctx, x)
    kept = logits.argmax(1) == state.clean_label
    state.n_changes += (~kept).long()
    score = state.objective.score(maps)
    better = kept & FragilityObjective.better(score, state.best_score)
    state.best_x[better], state.best_map[better] = x[better], maps[better]
    state.best_score = (
        torch.where(better, score[0], state.best_score[0]),
        torch.where(better, score[1], state.best_score[1]),
    )
    state.improved |= better


def run_restart(
    ctx: AttackContext,
    state: AttackState,
    restart: int,
    seed: int,
    direction: Direction | None = None,
) -> None:
    """One restart along `direction` (None: an objective that draws its own): its own
    generator, its start point, then `n_steps` steps."""
    gen = torch.Generator(device=state.x0.device).manual_seed(seed)
    state.objective.start_restart(restart, gen)
    o = ctx.options
    assert o.epsilon is not None, "resolved options"
    x = state.objective.start_point(state.x0, o.epsilon, restart, gen, o.norm)
    for _ in range(o.n_steps):
        x = take_step(ctx, state, x, gen, direction)
        keep_best(ctx, state, x)
        if state.bar is not None:
            state.bar.update(1)


def finish(ctx: AttackContext, state: AttackState) -> FragilityResult:
    """The result; samples whose direction was zero at every step get NaN metrics."""
    flat = state.clean_map.flatten(1)
    varies = flat.amax(1) > flat.amin(1)  # a constant map has no top-k set and no ranks
    measured = state.moved & varies & torch.isfinite(state.clean_logits).all(1)
    if not bool(measured.all()):
        _warn_unmeasured(ctx, state, measured)
    clean, best = state.clean_map, state.best_map
    objective, o = state.objective, ctx.options
    assert o.epsilon is not None and o.step_size is not None and o.k and o.measure_k

    def masked(values: Tensor) -> Tensor:
        return torch.where(measured, values, torch.full_like(values, float("nan")))

    with torch.no_grad():
        label_kept = ctx.model(state.best_x).argmax(1) == state.clean_label
    return FragilityResult(
        adversarial=state.best_x,
        clean_map=clean,
        attacked_map=best,
        target=ctx.target,
        label_kept=label_kept,
        clean_label=state.clean_label,
        improved=state.improved & measured,
        n_label_changes=state.n_changes,
        topk_intersection=masked(topk_intersection(clean, best, o.measure_k)),
        spearman=masked(spearman_correlation(clean, best)),
        kendall=masked(kendall_tau(clean, best)),
        center_shift=masked(center_of_mass_shift(clean.clamp_min(0), best.clamp_min(0))),
        objective=objective.name,
        epsilon=o.epsilon,
        norm=o.norm,
        step_size=o.step_size,
        n_steps=o.n_steps,
        n_restarts=len(ctx.seeds),
        k=o.k,
        measure_k=o.measure_k,
        surrogate_beta=direction_beta(state) if state.relu_calls else None,
        directions=tuple(d.name for d in state.directions),
        explainer=ctx.explainer_name,
        region_mass=None if ctx.region is None else masked(objective.region_mass(best)),
        clean_region_mass=None if ctx.region is None else objective.region_mass(clean),
        measured=measured,
    )


def _warn_unmeasured(ctx: AttackContext, state: AttackState, measured: Tensor) -> None:
    rows = ~measured
    cause = zero_direction_cause(
        ctx.model,
        beta=direction_beta(state),
        relu_calls=state.relu_calls,
        clean_map=state.clean_map[rows],
        clean_logits=state.clean_logits[rows],
        piecewise_constant=ctx.piecewise_constant,
        beta_name="surrogate_beta",
    )
    warnings.warn(
        f"fragility_attack: {int(rows.sum())} of {rows.numel()} sample(s) were not attacked "
        f"(the attack direction was zero at every step, or the clean map is constant): {cause}. "
        "Their metrics are NaN (`FragilityResult.measured` is False), not a robustness score.",
        RuntimeWarning,
        stacklevel=3,
    )
