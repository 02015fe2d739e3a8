"""The smoothness ascent takes its direction on a softplus surrogate (`ascent_beta`).

A ReLU network's saliency map is piecewise constant in x, so d(distance)/d(delta) is exactly zero
and the ascent without a surrogate never moves. References here: the distance written out at
hand-made points, a central finite difference on an explicit softplus copy of the model
(`robust_train.models.softplus.softplus`), and random sign steps of the same size.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.explain.gradient import saliency
from robust_train.explain.maps import importance_map
from robust_train.models.softplus import smooth_relus, smoothing_active, softplus
from robust_train.regularizers import (
    ExplanationSmoothness,
    LocalLipschitzPenalty,
    explanation_smoothness,
    get_penalty,
)
from robust_train.regularizers import smoothness as sm
from robust_train.regularizers._penalty_parts import map_distance, sample_in_ball
from tests.support.helpers import SmoothMLP, TinyCNN

RADIUS = 0.1


def relu_mlp(seed: int = 0, activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), activation(), nn.Linear(32, 10))


class FunctionalReLU(nn.Module):
    """F.relu in forward: the ReLU module it holds is never called, so swapping it does nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.body = relu_mlp()

    def forward(self, x: Tensor) -> Tensor:
        h = F.relu(self.body[1](self.body[0](x)))
        return self.body[3](h)


def _batch(b: int = 16, seed: int = 0) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, 1, 8, 8, generator=g), torch.randint(0, 10, (b,), generator=g)


def _gen(seed: int = 3) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _distance_at(model: nn.Module, x: Tensor, y: Tensor, x_pert: Tensor) -> Tensor:
    """d(I(x), I(x')) on `model`, written out: sum-normalised L1 of the saliency maps."""
    clean = importance_map(saliency(model, x, y))
    return map_distance(clean, importance_map(saliency(model, x_pert, y)), "l1").detach()


def _record_ascent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Spy on `_ascent_step`: (delta before, delta after, gradient followed) of every step."""
    calls: list[tuple[Tensor, Tensor, Tensor]] = []
    real = sm._ascent_step

    def spy(*args: object) -> tuple[Tensor, Tensor]:
        before = args[4]
        assert isinstance(before, Tensor)
        after, g = real(*args)  # type: ignore[arg-type]
        calls.append((before.clone(), after.clone(), g.clone()))
        return after, g

    monkeypatch.setattr(sm, "_ascent_step", spy)
    return calls


def test_without_surrogate_the_ascent_on_a_relu_model_never_moves_and_warns(monkeypatch):
    """The limiting case: ascent_beta=None on a ReLU model gives a zero gradient, an unchanged
    delta and the value of no ascent at all, bit for bit; the function says so."""
    model, (x, y) = relu_mlp(), _batch()
    calls = _record_ascent(monkeypatch)
    with pytest.warns(RuntimeWarning, match="`ascent_beta` is None"):
        stuck = explanation_smoothness(
            model, x, y, radius=RADIUS, n_ascent_steps=2, ascent_beta=None, generator=_gen()
        )
    random = explanation_smoothness(model, x, y, radius=RADIUS, generator=_gen())
    assert len(calls) == 2
    for before, after, g in calls:
        assert not bool(g.any())
        assert torch.equal(before, after)
    assert torch.equal(stuck, random)


def test_surrogate_ascent_moves_delta_in_the_ball_and_the_value_is_the_model_s(monkeypatch):
    model, (x, y) = relu_mlp(), _batch()
    calls = _record_ascent(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the direction is not zero: no warning
        value = explanation_smoothness(
            model, x, y, radius=RADIUS, n_ascent_steps=2, generator=_gen()
        )
    assert len(calls) == 2
    start = sample_in_ball(x, RADIUS, 1, "linf", _gen())
    assert torch.equal(calls[0][0], start)
    delta = calls[-1][1]
    moved = (delta - start).flatten(1).abs().amax(1)
    assert bool((moved > 0).all())
    assert float(delta.abs().max()) <= RADIUS + 1e-7  # float32 0.1
    x_pert = (x + delta).clamp(0, 1)
    assert float((x_pert - x).abs().max()) <= RADIUS + 1e-7
    assert 0 <= float(x_pert.min()) and float(x_pert.max()) <= 1
    # the value is the distance on the ReLU model itself at x' (not on the surrogate)
    assert torch.allclose(value.detach(), _distance_at(model, x, y, x_pert), atol=1e-6)
    assert all(isinstance(m, nn.ReLU) for m in model if not isinstance(m, (nn.Linear, nn.Flatten)))


def test_surrogate_direction_is_the_finite_difference_gradient_on_a_softplus_copy():
    """g of the first ascent step = d/d delta of d(I_model(x), I_softplus(x + delta)), checked
    coordinate by coordinate against a central difference on an explicit Softplus(10) copy."""
    model = relu_mlp().double()
    x, y = _batch(4)
    x = x.double()
    reference = importance_map(saliency(model, x, y)).detach()
    delta = sample_in_ball(x, RADIUS, 1, "linf", _gen())
    with smooth_relus(10.0) as relus:
        _, g = sm._ascent_step(model, saliency, x, y, delta, reference, "l1", 0.05, RADIUS, "linf")
    assert relus.calls == 1
    copy = softplus(model, 10.0)

    def objective(d: Tensor) -> float:
        pert = importance_map(saliency(copy, (x + d).clamp(0, 1), y))
        return float(map_distance(reference, pert, "l1").sum())

    eps = 1e-6
    inside = ((x + delta) > 2 * eps) & ((x + delta) < 1 - 2 * eps)
    coords = inside.nonzero()[:: max(1, int(inside.sum()) // 40)]
    checked = 0
    for i, c, h, w in coords.tolist():
        e = torch.zeros_like(delta)
        e[i, c, h, w] = eps
        fd = (objective(delta + e) - objective(delta - e)) / (2 * eps)
        assert abs(float(g[i, c, h, w]) - fd) <= 1e-5 * max(1.0, abs(fd)), (i, h, w)
        checked += abs(fd) > 1e-4
    assert checked >= len(coords) // 2  # most checked gradients are far from zero


def test_surrogate_ascent_raises_the_relu_model_s_distance_more_than_random_sign_steps():
    """On the ReLU model itself, one surrogate step from the random start raises the distance
    (strictly) for most samples, and beats the mean of random sign steps of the same size for
    most samples (without the surrogate: 0 and about a third of them)."""
    model, (x, y) = TinyCNN(seed=1), _batch(32, seed=1)
    start = sample_in_ball(x, RADIUS, 1, "linf", _gen())
    reference = importance_map(saliency(model, x, y)).detach()
    with smooth_relus(10.0):
        ascended, _ = sm._ascent_step(
            model, saliency, x, y, start, reference, "l1", RADIUS / 2, RADIUS, "linf"
        )
    d_start = _distance_at(model, x, y, (x + start).clamp(0, 1))
    d_ascent = _distance_at(model, x, y, (x + ascended).clamp(0, 1))
    g = torch.Generator().manual_seed(7)
    d_random = torch.stack(
        [
            _distance_at(model, x, y, (x + step).clamp(0, 1))
            for step in (
                (start + RADIUS / 2 * (2 * torch.randint(0, 2, x.shape, generator=g) - 1)).clamp(
                    -RADIUS, RADIUS
                )
                for _ in range(8)
            )
        ]
    ).mean(0)
    assert float((d_ascent > d_start).float().mean()) >= 0.75
    assert float((d_ascent > d_random).float().mean()) >= 0.75
    # and the whole penalty agrees with this first step
    value = explanation_smoothness(
        model, x, y, radius=RADIUS, n_ascent_steps=1, generator=_gen()
    ).detach()
    assert torch.allclose(value, d_ascent, atol=1e-6)


def test_relus_compute_relu_again_afterwards_even_when_the_explainer_raises():
    model = TinyCNN().eval()
    x, y = _batch(4)
    before = model(x).detach()

    def explainer(net: nn.Module, inputs: Tensor, target: Tensor, **kwargs: object) -> Tensor:
        if smoothing_active():
            raise RuntimeError("explainer failed inside the ascent")
        return saliency(net, inputs, target, **kwargs)  # type: ignore[arg-type]

    with pytest.raises(RuntimeError, match="inside the ascent"):
        explanation_smoothness(model, x, y, explainer=explainer, n_ascent_steps=1)
    assert not smoothing_active()
    assert torch.equal(model(x).detach(), before)
    assert all(type(m) is not nn.Softplus for m in model.modules())


@pytest.mark.parametrize("ball", ["linf", "l2"])
def test_on_a_softplus_model_the_surrogate_changes_nothing(ball):
    """No ReLU module: value and parameter gradients bit-equal to ascent_beta=None."""
    model, (x, y) = SmoothMLP(), _batch()
    results = []
    for beta in (10.0, None):
        model.zero_grad()
        value = explanation_smoothness(
            model,
            x,
            y,
            radius=RADIUS,
            ball=ball,
            n_ascent_steps=2,
            ascent_beta=beta,
            generator=_gen(),
        )
        value.sum().backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]  # the last bias: None
        results.append((value.detach(), [g.clone() for g in grads]))
    (v1, g1), (v2, g2) = results
    assert torch.equal(v1, v2) and len(g1) == len(g2) == 3
    assert all(torch.equal(a, b) for a, b in zip(g1, g2, strict=True))


def _caught(term: ExplanationSmoothness, model: nn.Module, n_calls: int) -> list[str]:
    x, y = _batch()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(n_calls):
            term(model, x, y)
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_term_warns_once_naming_the_cause_and_the_fix():
    stuck = _caught(LocalLipschitzPenalty(ascent_beta=None, seed=0), relu_mlp(), 3)
    assert len(stuck) == 1
    assert "'lipschitz'" in stuck[0] and "set `ascent_beta`" in stuck[0]

    # F.relu in forward is reached by the surrogate (it used to warn: the module swap missed it)
    assert _caught(LocalLipschitzPenalty(seed=0), FunctionalReLU(), 2) == []

    other = _caught(ExplanationSmoothness(n_ascent_steps=1, seed=0), relu_mlp(0, nn.Hardtanh), 2)
    assert len(other) == 1 and "met no ReLU call" in other[0]

    assert _caught(LocalLipschitzPenalty(seed=0), relu_mlp(), 3) == []
    assert _caught(ExplanationSmoothness(seed=0), relu_mlp(), 2) == []  # no ascent, no check


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), "10", True])
def test_ascent_beta_is_checked_everywhere(bad):
    x, y = _batch(2)
    for make in (
        lambda: explanation_smoothness(relu_mlp(), x, y, ascent_beta=bad),
        lambda: ExplanationSmoothness(ascent_beta=bad),
        lambda: get_penalty("lipschitz", ascent_beta=bad),
        lambda: get_penalty("igr", ascent_beta=bad),
    ):
        with pytest.raises((TypeError, ValueError), match=r"`ascent_beta`.*" + repr(bad)[:3]):
            make()


def test_presets_default_to_the_surrogate_and_igr_moves_on_a_relu_model():
    for name in ("smoothness", "lipschitz", "igr"):
        assert get_penalty(name).options.ascent_beta == 10.0
        assert get_penalty(name, ascent_beta=None).options.ascent_beta is None
    model, (x, y) = relu_mlp(), _batch()
    values = {}
    for beta in (10.0, None):
        term = get_penalty("igr", n_ascent_steps=1, n_ig_steps=3, seed=0, ascent_beta=beta)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            values[beta] = term(model, x, y).detach()
    random = get_penalty("igr", n_ascent_steps=0, n_ig_steps=3, seed=0)(model, x, y).detach()
    # without the surrogate IG still moves through its (x - baseline) factor; with it, further
    assert not torch.equal(values[10.0], values[None])
    assert float(values[10.0].mean()) > float(random.mean())
