"""The bare formulas of benchmarks/train_bare.py compute what the library's training step computes.

For smoothness, lipschitz, curvature and igr, the bare loss (plain torch, written from the
formula) and RobustClassifier.training_step's loss, on the same tiny model and batch and with the
same random draws (the term's generator and the global generator seeded alike: both are CPU
Mersenne twisters, so `torch.rand(shape, generator=g)` after `g.manual_seed(s)` equals
`torch.rand_like(x)` after `torch.manual_seed(s)`), agree in value and in parameter gradients.
"""

from __future__ import annotations

import copy
import importlib
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from robust_train import RobustClassifier
from robust_train.regularizers import get_penalty

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
NAMES = ("smoothness", "lipschitz", "curvature", "igr")


@pytest.fixture(scope="module")
def train_bare():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("train_bare")
    finally:
        sys.path.remove(str(BENCHMARKS))


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
    loss = train_bare._loss(name, model, x, y)
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
    bare_value = train_bare._loss(name, bare_model, x, y)
    bare_grads = _grads(bare_model, bare_value)
    assert bare_model[1] is relu
    assert _close(bare_value.detach(), value), (float(bare_value), float(value))
    assert _close(bare_grads, grads), float((bare_grads - grads).abs().max())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the zero-direction warning
        no_surrogate, _ = _library(name, {**settings, "ascent_beta": None}, model, x, y)
    assert abs(float(no_surrogate - value)) > 1e-4 * float(value)


def test_every_registered_penalty_has_a_bare_formula(train_bare):
    from robust_train.regularizers import PENALTIES

    assert set(train_bare.BARE) == set(PENALTIES) == set(train_bare.SETTINGS)
