"""The attack ensemble: several fragility attacks and a random search, the worst kept per image.

No single attack is the strongest on every image: the attacked set, the start point, the
smoothness of the surrogate and the use of the exact gradient each decide which images a
gradient attack moves. `ensemble_attack` runs these members on the same images, each a whole
`fragility_attack` (its restarts x steps), and keeps per image the result that ranks worst for
the explanation under the objective (`FragilityObjective.score`: for "topk" the lowest top-k
intersection at `measure_k`, ties by the lowest Spearman correlation):

- "k<m>": the attacked set equal to the scored set (`k = measure_k`), at the options'
  `surrogate_beta` and `direction` (with `direction="all"` that includes the model's exact
  gradient where its map has one, e.g. Grad-CAM of a ReLU model);
- "k<2m>": the larger attacked set `k = 2 * measure_k` (and the options' own `k` when it is a
  third value), for objectives whose ascent uses the clean top-k set
  (`FragilityObjective.uses_attack_k`);
- "beta<b>": the softplus surrogate at each other beta of `betas`, at `k = measure_k` (only
  where the surrogate changes the map, so that the beta changes the direction: not on a model
  without ReLU calls, nor for a map that ignores the model, whose members also run one
  direction each, `ExplainerSpec.model_free`: a second would repeat the first step for step);
- every member runs `max(n_restarts, 2)` restarts: the first from the image, the others from
  uniform random points of the ball;
- "search": a gradient-free random search of `search_queries` queries started from each image's
  best point (`robust_train.attacks.random_search`; L_inf only).

`EnsembleResult.members` states every member and its cost (wall seconds, gradient steps and maps
per image), and which member gave each image's final value.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.attacks.fragility import fragility_attack
from robust_train.attacks.objectives.base import FragilityObjective, Score, get_objective
from robust_train.attacks.options import AttackGoal, AttackOptions
from robust_train.attacks.random_search import random_search
from robust_train.attacks.result import FragilityResult
from robust_train.core.options import build_options, takes_options
from robust_train.core.runtime import eval_mode
from robust_train.core.validation import check_non_negative, check_positive
from robust_train.explain.maps import importance_map
from robust_train.explain.protocol import Explainer
from robust_train.explain.registry import explainer_spec, resolve_explainer
from robust_train.explain.similarity import (
    center_of_mass_shift,
    kendall_tau,
    spearman_correlation,
    topk_intersection,
)
from robust_train.models.softplus import smooth_relus

__all__ = [
    "DEFAULT_BETAS",
    "EnsembleResult",
    "Member",
    "MemberCost",
    "ensemble_attack",
    "single_attack_cost",
]

DEFAULT_BETAS = (1.0, 3.0, 10.0, 30.0)
SEARCH = "search"


@dataclass(frozen=True)
class Member:
    """One gradient attack of the ensemble: its name, attacked set size, surrogate beta and
    direction choice (`AttackOptions.direction`)."""

    name: str
    k: int
    surrogate_beta: float | None
    direction: str


@dataclass
class MemberCost:
    """What one member (or the search) ran and cost, and on how many images it was the worst.

    Attributes:
        name: the member's name ("k100", "k200", "beta3", "search").
        detail: its settings in words.
        seconds: wall seconds on the whole batch.
        gradient_steps: gradient steps per image (directions x restarts x steps; 0 for the
            search).
        maps: maps of the original model per image (one per step or query).
        worst_on: images whose final value this member gave (the first member to reach an
            image's final primary score gets it; the search where it lowered that score, or
            where no gradient member could move the image and it did).
        mean_score: the mean over measured images of the member's own primary score (the
            objective's ranking: for "topk" the top-k intersection at `measure_k`; for the search
            the ensemble's final one), NaN when none was measured.
        best_before_search: images where this gradient member's point was kept over the
            other gradient members' (the lowest primary score, ties by the secondary one): the
            point the random search starts from (0 for the search). Where the search lowers
            nearly every image, `worst_on` says nothing of the gradient members; this says which
            of them the search built on.
    """

    name: str
    detail: str
    seconds: float
    gradient_steps: int
    maps: int
    worst_on: int = 0
    mean_score: float = float("nan")
    best_before_search: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return dataclasses.asdict(self)


@dataclass
class EnsembleResult:
    """The ensemble's outcome: `result` (the worst per image over every member, a
    `FragilityResult` whose metrics compare the clean map with that worst map), `members` (each
    member's cost and count of images where it was the worst, the search last), `member_scores`
    (M, B) each gradient member's primary score per image (the objective's ranking, lower is
    worse for the explanation) and `member_ties` (M, B) its secondary score, before the search,
    and `worst` (B,) the index into `members` of the member that gave each image's final value."""

    result: FragilityResult
    members: list[MemberCost]
    member_scores: Tensor
    worst: Tensor
    member_ties: Tensor | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    cpu_seconds: float = 0.0

    def cost(self) -> dict[str, Any]:
        """JSON-ready statement of the members and the cost, per image and in all."""
        n = max(1, len(self.result))
        return {
            "members": [m.as_dict() for m in self.members],
            "seconds": self.seconds,
            "seconds_per_image": self.seconds / n,
            "cpu_seconds": self.cpu_seconds,
            "cpu_seconds_per_image": self.cpu_seconds / n,
            "gradient_steps_per_image": sum(m.gradient_steps for m in self.members),
            "maps_per_image": sum(m.maps for m in self.members),
            "images": len(self.result),
            "notes": list(self.notes),
        }


def plan_members(
    objective_cls: type[FragilityObjective],
    options: AttackOptions,
    betas: Sequence[float],
    *,
    size: int,
    beta_matters: bool,
) -> list[Member]:
    """The gradient members for resolved `options` (see the module docstring).

    Examples:
        >>> o = AttackOptions(k=200, measure_k=100, surrogate_beta=10.0).resolved(28, 28)
        >>> [m.name for m in plan_members(get_objective("topk"), o, (1.0, 10.0), size=784,
        ...                               beta_matters=True)]
        ['k100', 'k200', 'beta1']
    """
    assert options.k is not None and options.measure_k is not None, "resolved options"
    m = options.measure_k
    ks = [m, min(2 * m, size), options.k] if objective_cls.uses_attack_k else [options.k]
    beta0, direction = options.surrogate_beta, options.direction
    members = [Member(f"k{k}", k, beta0, direction) for k in dict.fromkeys(ks)]
    if beta_matters and beta0 is not None:
        k0 = ks[0]
        members += [
            Member(f"beta{b:g}", k0, float(b), "surrogate") for b in betas if float(b) != beta0
        ]
    return members


@takes_options(AttackGoal)
def ensemble_attack(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    seed: int = 0,
    betas: Sequence[float] = DEFAULT_BETAS,
    search_queries: int = 100,
    options: AttackOptions | None = None,
    progress: bool = False,
    **goal: Any,
) -> EnsembleResult:
    """Run every member of the ensemble and the random search; keep the worst per image.

    Args:
        model: classifier returning logits (eval mode during the attack).
        inputs: clean images (B, C, H, W) in [0, 1].
        target: (B,) the class whose explanation is attacked.
        explainer: a registered name or a differentiable explainer callable.
        objective: a gradient objective in `robust_train.attacks.OBJECTIVES` (an objective that
            needs no gradient runs once, as `fragility_attack` runs it).
        target_region: bool (B or 1, H, W) region of the "targeted" objective.
        seed: member i draws its restarts from seed + i; the search from seed - 1.
        betas: the softplus betas of the surrogate members.
        search_queries: queries of the random search (0: none).
        options: the attack's options (`AttackOptions` or an `EvaluationSettings`): budget,
            steps, restarts (at least 2 per member), k and measure_k, surrogate_beta,
            direction.
        progress: show each member's progress bar.
        **goal: the fields of `AttackGoal` (explainer, objective, target_region: above).

    Returns:
        EnsembleResult: the worst-per-image `FragilityResult`, each member's cost and the
        member that gave each image's value.

    Raises:
        ValueError: a bad argument, named with its value, before any work.

    Examples:
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8),
        ...                           torch.nn.ReLU(), torch.nn.Linear(8, 3))
        >>> x = torch.rand(4, 1, 4, 4)
        >>> out = ensemble_attack(net, x, net(x).argmax(1), betas=(3.0, 10.0), search_queries=4,
        ...                       options=AttackOptions(epsilon=0.05, n_steps=3, k=4))
        >>> [m.name for m in out.members], out.result.topk_intersection.shape
        (['k4', 'k8', 'beta3', 'search'], torch.Size([4]))
    """
    attacked = build_options(AttackGoal, goal, where="ensemble_attack")
    options = options or AttackOptions()
    betas = _check_betas(betas)
    check_non_negative(search_queries, "search_queries", integer=True)
    objective_cls = get_objective(attacked.objective)
    base = options.attack_options().resolved(*inputs.shape[-2:])
    attack = _Attack(model, inputs, target, attacked)
    if not objective_cls.needs_gradient:
        return _single(attack, seed, base)
    explain, _ = resolve_explainer(attacked.explainer, differentiable=True)
    with eval_mode(model):
        beta_matters = _beta_matters(explain, model, inputs, target, base)
    members = plan_members(
        objective_cls, base, betas, size=inputs.shape[-2] * inputs.shape[-1],
        beta_matters=beta_matters,
    )  # fmt: skip
    start, cpu = time.perf_counter(), time.process_time()
    runs = [_run_member(attack, seed + i, base, m, progress) for i, m in enumerate(members)]
    out, bound, best = _combine(objective_cls, base, runs, attacked.target_region)
    if explainer_spec(explain).model_free:
        out.notes.append("the map ignores the model: one direction per member, no surrogate beta")
    _refine(out, bound, best, model, explain, inputs, target, base, seed, search_queries)
    out.seconds, out.cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    _warn_unmeasured(out)
    return out


def _check_betas(betas: Sequence[float]) -> tuple[float, ...]:
    if isinstance(betas, (str, bytes)) or not isinstance(betas, Sequence) or not betas:
        raise ValueError(f"`betas` must be a non-empty sequence of positive numbers, got {betas!r}")
    for beta in betas:
        check_positive(beta, "betas")
    return tuple(float(b) for b in betas)


def _beta_matters(
    explain: Explainer, model: nn.Module, inputs: Tensor, target: Tensor, options: AttackOptions
) -> bool:
    """Whether the surrogate beta changes anything: the map of the first image differs under
    the softplus surrogate of the model's ReLUs (a model without ReLU calls, or a map that
    ignores the model, such as "map = input", gives the same map at every beta; a map declared
    `model_free` is not probed)."""
    beta = options.surrogate_beta
    if beta is None or options.direction not in ("all", "declared", "surrogate"):
        return False
    if explainer_spec(explain).model_free:
        return False  # declared: no surrogate of the model changes the map
    x, t = inputs[:1], target[:1]
    with torch.enable_grad():
        exact = importance_map(explain(model, x, t, create_graph=False)).detach()
        with smooth_relus(beta):
            smoothed = importance_map(explain(model, x, t, create_graph=False)).detach()
    return not torch.equal(torch.nan_to_num(exact), torch.nan_to_num(smoothed))


@dataclass(frozen=True)
class _Attack:
    """The attack that every member of an ensemble runs with its own options and seed."""

    model: nn.Module
    inputs: Tensor
    target: Tensor
    goal: AttackGoal

    def run(
        self, options: AttackOptions, seed: int, progress: bool = False
    ) -> tuple[FragilityResult, float]:
        """`fragility_attack` at `options` and `seed`, and the seconds it took."""
        start = time.perf_counter()
        g = self.goal
        result = fragility_attack(
            self.model, self.inputs, self.target, explainer=g.explainer, objective=g.objective,
            target_region=g.target_region, seed=seed, progress=progress, options=options,
        )  # fmt: skip
        return result, time.perf_counter() - start


def _run_member(
    attack: _Attack, seed: int, base: AttackOptions, member: Member, progress: bool
) -> tuple[Member, FragilityResult, float]:
    options = dataclasses.replace(
        base,
        k=member.k,
        surrogate_beta=member.surrogate_beta,
        direction=member.direction,
        n_restarts=max(base.n_restarts, 2),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # said once, for the ensemble
        result, seconds = attack.run(options, seed, progress)
    return member, result, seconds


def _combine(
    objective_cls: type[FragilityObjective],
    base: AttackOptions,
    runs: list[tuple[Member, FragilityResult, float]],
    region: Tensor | None,
) -> tuple[EnsembleResult, FragilityObjective, Score]:
    """The worst result per image over the members' results (each scored against the same
    clean maps, on the original model); the bound objective and the best scores."""
    first = runs[0][1]
    assert base.measure_k is not None
    objective = objective_cls(first.clean_map, k=base.measure_k, measure_k=base.measure_k,
                              region=_region(region, first))  # fmt: skip
    best_x, best_map = first.adversarial.clone(), first.attacked_map.clone()
    best = objective.score(best_map)
    worst = torch.zeros(len(first), dtype=torch.long, device=best_x.device)
    measured = torch.zeros(len(first), dtype=torch.bool, device=best_x.device)
    improved, changes = measured.clone(), torch.zeros_like(first.n_label_changes)
    scores, ties, kept = [], [], worst.clone()
    for index, (_, result, _) in enumerate(runs):
        score = objective.score(result.attacked_map)
        scores.append(score[0])
        ties.append(score[1])
        ok = result.measured if result.measured is not None else torch.ones_like(measured)
        better = ok & FragilityObjective.better(score, best)
        kept[better] = index  # the member whose point is kept (the search starts there)
        best_x[better], best_map[better] = result.adversarial[better], result.attacked_map[better]
        best = (torch.where(better, score[0], best[0]), torch.where(better, score[1], best[1]))
        measured, improved = measured | ok, improved | result.improved
        changes = changes + result.n_label_changes
    for i in reversed(range(len(runs))):  # the first member that reached the final score
        worst[scores[i] <= best[0]] = i
    joined = dataclasses.replace(
        first, adversarial=best_x, attacked_map=best_map, improved=improved,
        n_label_changes=changes, n_restarts=sum(r.n_restarts for _, r, _ in runs),
        directions=tuple(dict.fromkeys(d for _, r, _ in runs for d in r.directions)),
    )  # fmt: skip
    ensemble = EnsembleResult(
        result=_with_metrics(joined, measured, objective),
        members=[_member_cost(m, r, s, sc) for (m, r, s), sc in zip(runs, scores, strict=True)],
        member_scores=torch.stack(scores),
        worst=worst,
        member_ties=torch.stack(ties),
    )
    for i, member in enumerate(ensemble.members):  # the search's start points, by member
        member.best_before_search = int(((kept == i) & measured).sum())
    ensemble.notes.append(f"objective {objective_cls.name}; scored at k={base.measure_k}")
    return ensemble, objective, best


def _region(region: Tensor | None, first: FragilityResult) -> Tensor | None:
    if region is None:
        return None
    return region.expand(len(first), *region.shape[-2:]).to(first.clean_map.device)


def _mean(score: Tensor, measured: Tensor | None) -> float:
    keep = torch.isfinite(score) & (measured if measured is not None else True)
    return float(score[keep].float().mean()) if bool(keep.any()) else float("nan")


def _member_cost(
    member: Member, result: FragilityResult, seconds: float, score: Tensor
) -> MemberCost:
    n_dirs = max(1, len(result.directions))
    steps = n_dirs * result.n_restarts * result.n_steps
    beta = "exact" if member.surrogate_beta is None else f"softplus beta {member.surrogate_beta:g}"
    detail = (
        f"attacked set k={member.k}, {beta}, directions {'/'.join(result.directions) or '-'}, "
        f"{result.n_restarts} restarts (1 from the image, {result.n_restarts - 1} random) x "
        f"{result.n_steps} steps of {result.step_size:.3g}"
    )
    return MemberCost(
        member.name, detail, seconds, steps, steps, mean_score=_mean(score, result.measured)
    )


def _with_metrics(
    result: FragilityResult, measured: Tensor, objective: FragilityObjective
) -> FragilityResult:
    """`result` with its metrics recomputed from its maps; NaN where not `measured`."""
    clean, best = result.clean_map, result.attacked_map
    k = result.measure_k

    def masked(values: Tensor) -> Tensor:
        return torch.where(measured, values, torch.full_like(values, float("nan")))

    region = None if result.region_mass is None else masked(objective.region_mass(best))
    return dataclasses.replace(
        result,
        improved=result.improved & measured,
        measured=measured,
        topk_intersection=masked(topk_intersection(clean, best, k)),
        spearman=masked(spearman_correlation(clean, best)),
        kendall=masked(kendall_tau(clean, best)),
        center_shift=masked(center_of_mass_shift(clean.clamp_min(0), best.clamp_min(0))),
        region_mass=region,
    )


def _refine(
    out: EnsembleResult,
    objective: FragilityObjective,
    best: Score,
    model: nn.Module,
    explain: Explainer,
    inputs: Tensor,
    target: Tensor,
    base: AttackOptions,
    seed: int,
    queries: int,
) -> None:
    """The random search from each image's best point; updates `out` in place."""
    res = out.result
    if queries == 0 or base.norm != "linf":
        if queries:
            out.notes.append("random search skipped: it searches the L_inf ball only")
        _count_worst(out)
        return
    assert base.epsilon is not None and res.measured is not None
    start = time.perf_counter()
    with eval_mode(model):
        found = random_search(
            model, explain, objective, x0=inputs.detach(), start=res.adversarial,
            start_score=best, start_maps=res.attacked_map, clean_label=res.clean_label,
            target=target, epsilon=base.epsilon, queries=queries,
            generator=torch.Generator(device=inputs.device).manual_seed(seed - 1),
            chunk=base.internal_batch_size,
        )  # fmt: skip
    # An image whose clean map is constant has no ranking to search; only a varying one counts.
    flat = res.clean_map.flatten(1)
    gained = found.improved & (flat.amax(1) > flat.amin(1))
    out.worst[gained & ((found.score[0] < best[0]) | ~res.measured)] = len(out.members)
    detail = f"random search in squares of the L_inf ball from the best point, {queries} queries"
    cost = MemberCost(SEARCH, detail, time.perf_counter() - start, 0, queries)
    cost.mean_score = _mean(found.score[0], res.measured | gained)
    out.members.append(cost)
    merged = dataclasses.replace(
        res, adversarial=found.points, attacked_map=found.maps, improved=res.improved | gained
    )
    out.result = _with_metrics(merged, res.measured | gained, objective)
    _count_worst(out)


def _count_worst(out: EnsembleResult) -> None:
    measured = out.result.measured
    for i, member in enumerate(out.members):
        hit = out.worst == i
        member.worst_on = int((hit & measured).sum()) if measured is not None else int(hit.sum())


def _warn_unmeasured(out: EnsembleResult) -> None:
    measured = out.result.measured
    if measured is not None and not bool(measured.all()):
        warnings.warn(
            f"ensemble_attack: {int((~measured).sum())} of {measured.numel()} sample(s) were not "
            "attacked by any member (the attack direction was zero at every step, or the clean "
            "map is constant); their metrics are NaN, not a robustness score.",
            RuntimeWarning,
            stacklevel=3,
        )


def _single(attack: _Attack, seed: int, base: AttackOptions) -> EnsembleResult:
    """An objective that needs no gradient (random signs) runs once, as it is."""
    result, seconds = attack.run(base, seed)
    draws = result.n_restarts * result.n_steps
    cost = MemberCost(attack.goal.objective, f"{draws} draws", seconds, 0, draws, len(result))
    worst = torch.zeros(len(result), dtype=torch.long, device=attack.inputs.device)
    return EnsembleResult(result, [cost], result.topk_intersection[None], worst, seconds=seconds)


def single_attack_cost(result: FragilityResult, seconds: float) -> dict[str, Any]:
    """The JSON-ready cost of one `fragility_attack` (no ensemble), in `EnsembleResult.cost`'s
    layout: one member, "single"."""
    n_dirs = max(1, len(result.directions))
    steps = n_dirs * result.n_restarts * result.n_steps
    gradient = steps if result.directions else 0
    beta = "-" if result.surrogate_beta is None else f"softplus beta {result.surrogate_beta:g}"
    detail = (
        f"one attack: attacked set k={result.k}, {beta}, directions "
        f"{'/'.join(result.directions) or '-'}, {result.n_restarts} restarts x "
        f"{result.n_steps} steps"
    )
    member = MemberCost("single", detail, seconds, gradient, steps, len(result))
    n = max(1, len(result))
    return {
        "members": [member.as_dict()],
        "seconds": seconds,
        "seconds_per_image": seconds / n,
        "gradient_steps_per_image": gradient,
        "maps_per_image": steps,
        "images": len(result),
        "notes": [],
    }
