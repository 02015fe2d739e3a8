"""Bare training steps: registered penalties' formulas in plain torch, no RobustClassifier.

What `python -m benchmarks.bench_train_step --penalties registry` times beside the library's
step: one forward, the loss (cross-entropy plus weight * mean penalty, or the penalty's own
cross-entropy when it replaces the task loss), backward and an Adam step, written as plainly as
possible from the papers. A bare formula is registered by penalty name with `@bare_formula(name,
**settings)`: the settings are the term's keyword arguments that the formula reads (here the
leaderboard configs' CPU-sized inner loops, configs/mnist5k_*.yaml, at the terms' defaults
otherwise: explainer, distance and ball are written into the formulas: saliency of the target
logit with sum-normalised L1 for smoothness and lipschitz, IG of the target logit from a black
baseline with 1 - cosine for igr, L_inf balls). tests/benchmarks/test_train_bare.py checks that
the bare loss and its parameter gradients equal the library step's for the same random draws (the
bare draws come from the global generator, seeded as the term's).

Penalties are discovered through `robust_train.regularizers.PENALTIES`: a penalty without a bare
formula is still timed (library step only, at `LIBRARY_ONLY[name]` or else its defaults, see
`term_settings`), and `formula(name)` says what to add for a bare one; no table here has to list
every penalty.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.regularizers import PENALTIES

# loss(model, x, y, settings) -> scalar training loss, written from the paper
BareLoss = Callable[[nn.Module, Tensor, Tensor, Mapping[str, Any]], Tensor]

BARE: dict[str, BareLoss] = {}  # penalty name -> its bare loss, in registration order
# penalty name -> keyword arguments of the registered term that its bare formula reads
SETTINGS: dict[str, dict[str, Any]] = {}
# The shipped penalties without a bare formula, at a few inner steps (their library step alone);
# a penalty in neither table is timed at its defaults.
LIBRARY_ONLY: dict[str, dict[str, Any]] = {
    "composed": {"terms": [{"penalty": "gradnorm"}, {"penalty": "curvature"}]},
    "multi_map": {"radius": 0.1},
    "topk_mass": {"k": 4, "n_ascent_steps": 1},
}


class MissingBareFormula(LookupError):
    """A registered penalty has no bare formula; the message says what to add."""


def bare_formula(name: str, **settings: Any) -> Callable[[BareLoss], BareLoss]:
    """Register `loss` as the bare formula of penalty `name`, read at the term's `settings`.

    Example:
        >>> @bare_formula("doc_zero")
        ... def _zero(model, x, y, s):
        ...     return F.cross_entropy(model(x), y)
        >>> "doc_zero" in BARE and SETTINGS["doc_zero"] == {}
        True
        >>> _ = BARE.pop("doc_zero"), SETTINGS.pop("doc_zero")
    """

    def register(loss: BareLoss) -> BareLoss:
        if name in BARE and BARE[name] is not loss:
            raise ValueError(f"bare formula {name!r} is already registered ({BARE[name]!r})")
        BARE[name], SETTINGS[name] = loss, dict(settings)
        return loss

    return register


def formula(name: str) -> BareLoss:
    """The bare loss of registered penalty `name`, or an error that says what to add."""
    if name not in PENALTIES:
        raise ValueError(f"Unknown `penalty` {name!r}; expected one of {list(PENALTIES)}")
    if name not in BARE:
        raise MissingBareFormula(missing_message(name))
    return BARE[name]


def missing_message(name: str) -> str:
    """What to add so that penalty `name` is timed beside a bare formula."""
    term = PENALTIES[name]
    return (
        f"penalty {name!r} ({term.__module__}.{term.__qualname__}) has no bare formula: to time "
        f"it beside one, add a function `(model, x, y, settings) -> loss` written from its paper "
        f"and decorated with `@bare_formula({name!r}, **term_kwargs)` in benchmarks/train_bare.py "
        "(tests/benchmarks/test_train_bare.py then checks it against the library step)"
    )


def missing() -> list[str]:
    """The registered penalties that have no bare formula (timed as the library step only)."""
    return [name for name in PENALTIES if name not in BARE]


def term_settings(name: str) -> dict[str, Any]:
    """Keyword arguments of `get_penalty(name, ...)` in the benchmark: the bare formula's
    settings when it has one, else `LIBRARY_ONLY[name]` or the term's defaults (and `seed=0`
    when its constructor takes a seed)."""
    if name in SETTINGS:
        return dict(SETTINGS[name])
    term = PENALTIES[name]
    options = dict(LIBRARY_ONLY.get(name, {}))
    if "seed" in inspect.signature(term).parameters:
        options.setdefault("seed", 0)
    return options


def _pgd(
    objective: Callable[[Tensor], Tensor], x: Tensor, eps: float, step: float, n_steps: int
) -> Tensor:
    lower, upper = (x - eps).clamp(min=0), (x + eps).clamp(max=1)
    adv = torch.min(torch.max(x + (2 * torch.rand_like(x) - 1) * eps, lower), upper)
    for _ in range(n_steps):
        adv = adv.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(objective(adv).sum(), adv)
        adv = torch.min(torch.max(adv.detach() + step * g.sign(), lower), upper)
    return adv.detach()


def _path_ig(model: nn.Module, x: Tensor, end: Tensor, y: Tensor, m: int) -> tuple[Tensor, Tensor]:
    """RAR's loss IG, right Riemann sum on m points, with graph; and CE at the endpoint."""
    alphas = (torch.arange(1, m + 1, dtype=x.dtype) / m).view(-1, 1, 1, 1, 1)
    path = (x + alphas * (end - x)).flatten(0, 1)
    if not path.requires_grad:
        path.requires_grad_(True)
    ce = F.cross_entropy(model(path), y.repeat(m), reduction="none")
    (g,) = torch.autograd.grad(ce.sum(), path, create_graph=True)
    return (end - x) * g.view(m, *x.shape).mean(0), ce.view(m, -1)[-1]


def _saliency_map(model: nn.Module, a: Tensor, y: Tensor, logits: Tensor | None = None) -> Tensor:
    """sum_c |d z_y / d a| (B, H*W), with graph; `logits` = model(a) when already run."""
    if not a.requires_grad:
        a = a.requires_grad_(True)
    z = model(a) if logits is None else logits
    (g,) = torch.autograd.grad(z.gather(1, y[:, None]).sum(), a, create_graph=True)
    return g.abs().sum(1).flatten(1)


def _ig_map(model: nn.Module, a: Tensor, y: Tensor, m: int) -> Tensor:
    """sum_c |IG_c(a)| (B, H*W): integrated gradients of z_y from a black baseline (Sundararajan
    et al. 2017), trapezoid rule on m points of [0, 1] (weights 1/(m-1), halved at the ends),
    all points in one forward, with graph."""
    alphas = torch.linspace(0, 1, m, dtype=a.dtype).view(-1, 1, 1, 1, 1)
    weights = torch.full((m, 1, 1, 1, 1), 1 / (m - 1), dtype=a.dtype)
    weights[[0, -1]] /= 2
    path = (alphas * a).flatten(0, 1)
    if not path.requires_grad:
        path.requires_grad_(True)
    z = model(path).gather(1, y.repeat(m)[:, None])
    (g,) = torch.autograd.grad(z.sum(), path, create_graph=True)
    return (a * (weights * g.view(m, *a.shape)).sum(0)).abs().sum(1).flatten(1)


def _map_shift(
    name: str, model: nn.Module, x: Tensor, logits: Tensor, y: Tensor, s: Mapping[str, Any]
) -> Tensor:
    """Per-sample distance between the importance maps at x and at x' in B_inf(x, radius).

    smoothness (SENN, Alvarez-Melis & Jaakkola 2018): L1 distance of the sum-normalised saliency
    maps (target logit), x' uniform in the ball. lipschitz: the same over ||x' - x||_2, x' after
    projected sign-ascent steps of radius / 2 on the distance. igr (Wang & Kong 2022):
    1 - cosine of the IG maps, x' after ascent steps of 2.5 radius / steps. The ascent direction
    comes from the model with its ReLUs as Softplus(10) (the terms' default `ascent_beta`). The
    clean map keeps its graph (it reuses the CE's forward for saliency); x' is detached.
    """
    r = float(s["radius"])
    n_ascent = int(s.get("n_ascent_steps", 0))
    if name == "igr":
        m = int(s["n_ig_steps"])
        step = 2.5 * r / max(1, n_ascent)

        def explain(a: Tensor) -> Tensor:
            return _ig_map(model, a, y, m)

        def dist(p: Tensor, q: Tensor) -> Tensor:
            return 1 - F.cosine_similarity(p, q, dim=1, eps=1e-12)

        clean = explain(x)
    else:
        step = r / 2

        def explain(a: Tensor) -> Tensor:
            return _saliency_map(model, a, y)

        def dist(p: Tensor, q: Tensor) -> Tensor:
            return (p / p.sum(1, keepdim=True) - q / q.sum(1, keepdim=True)).abs().sum(1)

        clean = _saliency_map(model, x, y, logits)
    x0 = x.detach()
    delta = (2 * torch.rand_like(x0) - 1) * r
    # The ascent direction is taken with every nn.ReLU swapped for Softplus(10) (the map of a
    # ReLU network is piecewise constant in x: its gradient is zero); the value uses the model.
    relus = [
        (parent, key, child)
        for parent in list(model.modules())
        for key, child in parent.named_children()
        if isinstance(child, nn.ReLU) and n_ascent
    ]
    for parent, key, _ in relus:
        setattr(parent, key, nn.Softplus(beta=10.0))
    try:
        for _ in range(n_ascent):
            delta.requires_grad_(True)
            shift = dist(clean.detach(), explain((x0 + delta).clamp(0, 1))).sum()
            (g,) = torch.autograd.grad(shift, delta)
            delta = (delta.detach() + step * g.sign()).clamp(-r, r)
    finally:
        for parent, key, child in relus:
            setattr(parent, key, child)
    x_pert = (x0 + delta).clamp(0, 1)
    value = dist(clean, explain(x_pert))
    if name == "lipschitz":
        value = value / (x_pert - x0).flatten(1).norm(dim=1)
    return value


@bare_formula("adversarial", epsilon=0.3, step_size=0.1, n_steps=3, seed=0)
def _adversarial(model: nn.Module, x: Tensor, y: Tensor, s: Mapping[str, Any]) -> Tensor:
    """Madry et al. 2018: CE at a PGD example, replaces the CE."""

    def ce(a: Tensor) -> Tensor:
        return F.cross_entropy(model(a), y, reduction="none")

    return ce(_pgd(ce, x, s["epsilon"], s["step_size"], s["n_steps"])).mean()


def _rar(model: nn.Module, x: Tensor, y: Tensor, s: Mapping[str, Any], *, replaces: bool) -> Tensor:
    """Chen et al. 2019 (RAR): IG-NORM, or IG-SUM-NORM (`replaces` the task loss)."""
    beta = float(s.get("beta", 0.0))
    m_attack, m = int(s["n_attack_points"]), int(s["n_points"])

    def objective(a: Tensor) -> Tensor:
        ig, ce_a = _path_ig(model, x, a, y, m_attack)
        value = ig.abs().flatten(1).sum(1)
        return ce_a + beta * value if beta else value

    adv = _pgd(objective, x, s["epsilon"], s["step_size"], s["n_steps"])
    ig, ce_adv = _path_ig(model, x, adv, y, m)
    norm = ig.abs().flatten(1).sum(1)
    if replaces:
        return (ce_adv + beta * norm).mean()
    return F.cross_entropy(model(x), y) + norm.mean()


@bare_formula(
    "ig_norm", epsilon=0.3, step_size=0.3, n_steps=1, n_attack_points=2, n_points=3, seed=0
)
def _ig_norm(model: nn.Module, x: Tensor, y: Tensor, s: Mapping[str, Any]) -> Tensor:
    return _rar(model, x, y, s, replaces=False)


@bare_formula(
    "ig_sum_norm",
    beta=0.1,
    epsilon=0.3,
    step_size=0.3,
    n_steps=1,
    n_attack_points=2,
    n_points=3,
    seed=0,
)
def _ig_sum_norm(model: nn.Module, x: Tensor, y: Tensor, s: Mapping[str, Any]) -> Tensor:
    return _rar(model, x, y, s, replaces=True)


@bare_formula("curvature", h=0.05, seed=0)
def _curvature(model: nn.Module, x: Tensor, y: Tensor, s: Mapping[str, Any]) -> Tensor:
    """Zero-order: ||z(x + hu) + z(x - hu) - 2 z(x)||^2 / h^4, ||u|| = 1."""
    h, weight = float(s["h"]), float(s.get("weight", 1.0))
    logits = model(x)
    u = torch.randn_like(x)
    u = u / u.flatten(1).norm(dim=1).view(-1, 1, 1, 1) * h
    plus, minus = model(torch.cat([x + u, x - u])).chunk(2)
    second = (plus + minus - 2 * logits) / h**2
    return F.cross_entropy(logits, y) + weight * second.pow(2).sum(1).mean()


def _clean(model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(x requiring grad, its logits, their mean CE): the forward a double-backprop term reuses."""
    xv = x.detach().requires_grad_(True)
    logits = model(xv)
    return xv, logits, F.cross_entropy(logits, y)


def _shift_loss(name: str) -> BareLoss:
    """CE + weight * mean `_map_shift` for the map-distance penalties."""

    def loss(model: nn.Module, x: Tensor, y: Tensor, s: Mapping[str, Any]) -> Tensor:
        xv, logits, ce = _clean(model, x, y)
        return ce + float(s.get("weight", 1.0)) * _map_shift(name, model, xv, logits, y, s).mean()

    return loss


bare_formula("smoothness", radius=0.1, seed=0)(_shift_loss("smoothness"))
bare_formula("lipschitz", weight=0.01, radius=0.1, n_ascent_steps=1, seed=0)(
    _shift_loss("lipschitz")
)
bare_formula("igr", radius=0.3, n_ascent_steps=1, n_ig_steps=3, seed=0)(_shift_loss("igr"))


@bare_formula("gradnorm")
def _gradnorm(model: nn.Module, x: Tensor, y: Tensor, s: Mapping[str, Any]) -> Tensor:
    """Drucker & LeCun 1992: ||grad_x CE||^2, double backprop."""
    xv, logits, ce = _clean(model, x, y)
    (g,) = torch.autograd.grad(F.cross_entropy(logits, y, reduction="sum"), xv, create_graph=True)
    return ce + g.flatten(1).pow(2).sum(1).mean()


@bare_formula("lga", radius=0.3, l2_weight=0.3, cos_weight=3.0, seed=0)
def _lga(model: nn.Module, x: Tensor, y: Tensor, s: Mapping[str, Any]) -> Tensor:
    """Joo et al. 2023 (LGA): l2 + cosine between the target logit's input gradient at x
    (detached) and at one uniform point of the L_inf ball."""
    xv, logits, ce = _clean(model, x, y)
    (g,) = torch.autograd.grad(logits.gather(1, y[:, None]).sum(), xv, retain_graph=True)
    noise = (2 * torch.rand_like(x) - 1) * float(s["radius"])
    xp = (x + noise).clamp(0, 1).detach().requires_grad_(True)
    (gp,) = torch.autograd.grad(model(xp).gather(1, y[:, None]).sum(), xp, create_graph=True)
    a, b = g.detach().flatten(1), gp.flatten(1)
    cosine = (1 - F.cosine_similarity(a, b, dim=1)) / 2
    return ce + (float(s["l2_weight"]) * (a - b).pow(2).sum(1) + s["cos_weight"] * cosine).mean()


@bare_formula("ssr", n_iterations=2, seed=0)
def _ssr(model: nn.Module, x: Tensor, y: Tensor, s: Mapping[str, Any]) -> Tensor:
    """Wang et al. 2020: Rayleigh quotient of J^T (diag p - p p^T) J, power iteration."""
    xv, logits, ce = _clean(model, x, y)
    p = logits.softmax(1)
    u0 = torch.zeros_like(logits, requires_grad=True)
    (jt_u,) = torch.autograd.grad(logits, xv, grad_outputs=u0, create_graph=True)
    v = torch.randn_like(x)
    v = v / v.flatten(1).norm(dim=1).view(-1, 1, 1, 1)
    pd = p.detach()
    for _ in range(int(s["n_iterations"])):
        (w,) = torch.autograd.grad(jt_u, u0, grad_outputs=v, retain_graph=True)
        a = pd * w - pd * (pd * w).sum(1, keepdim=True)
        (v,) = torch.autograd.grad(logits, xv, grad_outputs=a, retain_graph=True)
        v = v / v.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)
    (w,) = torch.autograd.grad(jt_u, u0, grad_outputs=v, create_graph=True)
    return ce + ((p * w.pow(2)).sum(1) - (p * w).sum(1).pow(2)).mean()


def bare_loss(name: str, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    """The bare training loss of penalty `name` at `SETTINGS[name]` (draws: the global
    generator)."""
    return formula(name)(model, x, y, SETTINGS[name])


def bare_step(name: str, model: nn.Module, x: Tensor, y: Tensor) -> Callable[[], None]:
    """One bare optimisation step of `model` (in train mode) with penalty `name`."""
    formula(name)  # fails here, before any work, when there is none
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()

    def step() -> None:
        bare_loss(name, model, x, y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step
