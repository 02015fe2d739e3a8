"""The bare formulas of benchmarks/train_bare.py compute what the library's training step computes.

For smoothness, lipschitz, curvature and igr, the bare loss (plain torch, written from the
formula) and RobustClassifier.training_step's loss, on the same tiny model and batch and with the
same random draws (the term's generator and the global generator seeded alike: both are CPU
Mersenne twisters, so `torch.rand(shape, generator=g)` after `g.manual_seed(s)` equals
`torch.rand_like(x)` after `torch.manual_seed(s)`), agree in value and in parameter gradients.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import Tensor, nn

from robust_train import RobustClassifier
from robust_train.regularizers import PENALTIES, PenaltyTerm, get_penalty, register_penalty

NAMES = ("smoothness", "lipschitz", "curvature", "igr")


@pytest.fixture(scope="module")
def train_bare():
    from benchmarks import train_bare

    return train_bare


def _tiny(side: int, activation: type[nn.Module] | None = None) -> nn.Module:
    """Conv -> softplus (or `activation`) -> pool -> linear, 5 classes; the convolution scaled up
    so that its outputs reach the bend of the softplus (curvature ~1e-2, not ~1e-5, of the CE)."""
    torch.manual_seed(1)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.Softplus(beta=5.0) if activation is None else activation(),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * (side // 2) ** 2, 5),
    )
    with torch.no_grad():
        model[0].weight.mul_(10.0)
    return model


def _batch(side: int) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(2)
    return torch.rand(4, 1, side, side, generator=g), torch.tensor([0, 3, 1, 4])


def _grads(model: nn.Module, loss: Tensor) -> Tensor:
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _library(name: str, settings: dict, model: nn.Module, x: Tensor, y: Tensor):
    module = RobustClassifier(copy.deepcopy(model), penalties=[get_penalty(name, **settings)])
    module.train()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*self.log.*")
        loss = module.training_step((x, y), 0)
    return loss.detach(), _grads(module.model, loss)


def _bare(train_bare, name: str, seed: int, model: nn.Module, x: Tensor, y: Tensor):
    model = copy.deepcopy(model)
    torch.manual_seed(seed)
    loss = train_bare.bare_loss(name, model, x, y)
    return loss.detach(), _grads(model, loss)


def _close(a: Tensor, b: Tensor, tol: float = 1e-5) -> bool:
    """|a - b| <= tol * max(1, |b|_max): 1e-5 absolute at unit scale, relative beyond."""
    return bool((a - b).abs().max() <= tol * max(1.0, float(b.abs().max())))


@pytest.mark.parametrize("side, weight", [(8, None), (12, 5.0)])
@pytest.mark.parametrize("name", NAMES)
def test_bare_loss_and_gradients_equal_the_library_step(
    train_bare, monkeypatch, name, side, weight
):
    """As benchmarked (SETTINGS), and with a larger weight, where the penalty dominates the CE
    and the 1e-5 tolerance is tight on the penalty itself."""
    if weight is not None:
        monkeypatch.setitem(
            train_bare.SETTINGS, name, {**train_bare.SETTINGS[name], "weight": weight}
        )
    settings = train_bare.SETTINGS[name]
    seed = int(settings["seed"])
    model, (x, y) = _tiny(side), _batch(side)
    value, grads = _library(name, settings, model, x, y)
    bare_value, bare_grads = _bare(train_bare, name, seed, model, x, y)
    assert _close(bare_value, value), (float(bare_value), float(value))
    assert _close(bare_grads, grads), float((bare_grads - grads).abs().max())

    # The penalty is a visible part of the loss, and the draws matter: another seed gives
    # another value, so the agreement above is that of matched draws, not of a draw-free limit.
    ce = nn.functional.cross_entropy(model(x), y).detach()
    assert float(value - ce) > 1e-3 * float(ce)
    other, _ = _bare(train_bare, name, seed + 1, model, x, y)
    assert abs(float(other - value)) > 1e-3 * float(value - ce)


@pytest.mark.parametrize("name", ["lipschitz", "igr"])
def test_bare_ascent_on_a_relu_model_takes_the_softplus_direction_like_the_library(
    train_bare, monkeypatch, name
):
    """On a ReLU network the ascent direction comes from Softplus(10) in both (the terms' default
    ascent_beta); with ascent_beta=None the library's value differs (its ascent would not move),
    so the agreement is that of the surrogate ascent. The model keeps its ReLU modules."""
    monkeypatch.setitem(train_bare.SETTINGS, name, {**train_bare.SETTINGS[name], "weight": 5.0})
    settings = train_bare.SETTINGS[name]
    model, (x, y) = _tiny(12, nn.ReLU), _batch(12)
    value, grads = _library(name, settings, model, x, y)
    bare_model = copy.deepcopy(model)
    relu = bare_model[1]
    torch.manual_seed(int(settings["seed"]))
    bare_value = train_bare.bare_loss(name, bare_model, x, y)
    bare_grads = _grads(bare_model, bare_value)
    assert bare_model[1] is relu
    assert _close(bare_value.detach(), value), (float(bare_value), float(value))
    assert _close(bare_grads, grads), float((bare_grads - grads).abs().max())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the zero-direction warning
        no_surrogate, _ = _library(name, {**settings, "ascent_beta": None}, model, x, y)
    assert abs(float(no_surrogate - value)) > 1e-4 * float(value)


def test_every_bare_formula_is_a_registered_penalty_that_its_settings_build(train_bare):
    assert set(train_bare.BARE) == set(train_bare.SETTINGS) and train_bare.BARE
    assert set(train_bare.BARE) <= set(PENALTIES)
    for name in train_bare.BARE:
        assert get_penalty(name, **train_bare.term_settings(name)).name == name
    # the penalties shipped with a bare formula keep theirs
    assert set(NAMES) | {"adversarial", "gradnorm", "ig_norm", "ig_sum_norm", "ssr"} <= set(
        train_bare.BARE
    )


class _CheapSaliencySquare(PenaltyTerm):
    """A penalty registered by this test alone (as a new unit's one file would), no bare formula;
    its constructor takes no seed, and the benchmark times it at its defaults."""

    double_backprop = True

    def __init__(self, weight: float = 1.0, scale: float = 1.0, name: str | None = None) -> None:
        super().__init__(weight, name)
        self.scale = scale

    def penalty(self, model, inputs, target, logits):
        inputs = inputs.detach().requires_grad_(True)
        z = model(inputs).gather(1, target[:, None]).sum()
        (g,) = torch.autograd.grad(z, inputs, create_graph=True)
        return self.scale * g.flatten(1).pow(2).sum(1)


@pytest.fixture
def new_penalty():
    register_penalty("cheap_saliency_square")(_CheapSaliencySquare)
    yield "cheap_saliency_square"
    PENALTIES.pop("cheap_saliency_square", None)


def test_a_new_penalty_without_a_bare_formula_is_discovered_and_told_what_to_add(
    train_bare, new_penalty
):
    """Registered, not known to train_bare.py: listed as missing, timed at its defaults
    beside the others (no bare step), and asking for its bare step names the decorator."""
    from benchmarks import bench_train_step

    assert new_penalty in train_bare.missing()
    assert train_bare.term_settings(new_penalty) == {}  # its defaults; no seed: not taken
    with pytest.raises(train_bare.MissingBareFormula, match=r"@bare_formula\('cheap_saliency"):
        train_bare.bare_step(new_penalty, _tiny(8), *_batch(8))
    with pytest.raises(ValueError, match="Unknown `penalty` 'nope'"):
        train_bare.formula("nope")
    x, y = _batch(8)
    steps, notes = bench_train_step.registry_steps(_tiny(8), x, y, torch.device("cpu"))
    assert new_penalty in steps and f"{new_penalty}, bare" not in steps
    assert "ig_norm, bare" in steps and len(notes) == len(train_bare.missing())
    assert any(f"'{new_penalty}'" in n and "benchmarks/train_bare.py" in n for n in notes)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*self.log.*")
        steps[new_penalty]()  # the library step runs


def test_a_bare_formula_registered_elsewhere_joins_the_comparison(train_bare, new_penalty):
    """Registering one (what train_bare.py would hold) is all the benchmark needs."""

    def loss(model, x, y, s):
        xv = x.detach().requires_grad_(True)
        logits = model(xv)
        (g,) = torch.autograd.grad(logits.gather(1, y[:, None]).sum(), xv, create_graph=True)
        ce = nn.functional.cross_entropy(logits, y)
        return ce + s["scale"] * g.flatten(1).pow(2).sum(1).mean()

    train_bare.bare_formula(new_penalty, scale=2.0)(loss)
    try:
        assert new_penalty not in train_bare.missing()
        model, (x, y) = _tiny(8), _batch(8)
        value, grads = _library(new_penalty, train_bare.term_settings(new_penalty), model, x, y)
        bare_value, bare_grads = _bare(train_bare, new_penalty, 0, model, x, y)
        assert _close(bare_value, value) and _close(bare_grads, grads)
    finally:
        train_bare.BARE.pop(new_penalty), train_bare.SETTINGS.pop(new_penalty)
