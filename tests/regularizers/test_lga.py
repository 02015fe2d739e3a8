"""LGA (Joo et al., AAAI 2023) against a slow per-image reference written from the paper, its
limiting cases, parameter gradients, argument checks and a short real Lightning fit."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from robust_train import RobustClassifier
from robust_train.regularizers import LocalGradientAlignment, get_penalty, local_gradient_alignment
from tests.support.helpers import LinearModel, SmoothMLP, TinyCNN, digits_tensors


def reference_lga(model, x, y, radius, l2_weight, cos_weight, seed):
    """Per image: g = d logit_y / dx at x and at x' = clip(x + U(-r, r)), then
    l2_weight * ||g - g'||^2 + cos_weight * (1 - cos(g, g')) / 2 (the paper's Eq. and code)."""
    u = torch.rand(x.shape, generator=torch.Generator().manual_seed(seed))
    x_prime = (x + (2 * u - 1) * radius).clamp(0, 1)
    values = []
    for i in range(x.shape[0]):
        grads = []
        for point in (x[i : i + 1], x_prime[i : i + 1]):
            point = point.clone().requires_grad_(True)
            (g,) = torch.autograd.grad(model(point)[0, y[i]], point, create_graph=True)
            grads.append(g.flatten())
        g, g_prime = grads
        cos = torch.dot(g, g_prime) / (g.norm() * g_prime.norm())
        values.append(l2_weight * ((g - g_prime) ** 2).sum() + cos_weight * (1 - cos) / 2)
    return torch.stack(values)


@pytest.mark.parametrize("weights", [(1.0, 1.0), (0.01, 0.1), (0.0, 1.0), (1.0, 0.0)])
def test_matches_the_reference(weights):
    model = SmoothMLP()
    x, y = torch.rand(5, 1, 8, 8), torch.tensor([0, 3, 5, 7, 9])
    ours = local_gradient_alignment(
        model, x, y, radius=0.2, l2_weight=weights[0], cos_weight=weights[1],
        generator=torch.Generator().manual_seed(3),
    )  # fmt: skip
    expected = reference_lga(model, x, y, 0.2, *weights, seed=3)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-7)


def test_reuses_the_task_forward_with_the_same_value():
    model = SmoothMLP()
    x, y = torch.rand(4, 1, 8, 8).requires_grad_(True), torch.tensor([1, 2, 3, 4])
    term = LocalGradientAlignment(radius=0.1, seed=0)
    shared = term(model, x, y, model(x))
    alone = local_gradient_alignment(
        model, x.detach(), y, radius=0.1, generator=torch.Generator().manual_seed(0)
    )
    torch.testing.assert_close(shared, alone)


def test_a_linear_model_has_perfectly_aligned_gradients():
    model = LinearModel()
    x, y = torch.rand(3, 1, 8, 8), torch.tensor([0, 1, 2])
    value = local_gradient_alignment(model, x, y, radius=0.3)
    torch.testing.assert_close(value, torch.zeros(3), atol=1e-6, rtol=0)


@pytest.mark.parametrize("detach_clean", [True, False])
def test_parameter_gradients_flow_and_match_the_reference(detach_clean):
    model = TinyCNN().train()
    x, y = torch.rand(4, 1, 8, 8), torch.tensor([0, 1, 2, 3])
    term = get_penalty("lga", radius=0.3, detach_clean=detach_clean, seed=1)
    weights = [p for p in model.parameters() if p.dim() > 1]  # a ReLU net's last bias: no path
    term(model, x, y).mean().backward()
    ours = [p.grad.clone() for p in weights]
    assert all(bool(torch.isfinite(g).all()) and float(g.abs().sum()) > 0 for g in ours)
    model.zero_grad()
    reference_lga(model, x, y, 0.3, 1.0, 1.0, seed=1).mean().backward()
    expected = [p.grad for p in weights]
    differs = any(not torch.allclose(a, b, atol=1e-6) for a, b in zip(ours, expected, strict=True))
    # with the clean gradient detached (the authors' default) only g(x') carries the graph
    assert differs == detach_clean
    if not detach_clean:
        for a, b in zip(ours, expected, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"radius": 1.0}, "`radius`"),
        ({"radius": -0.1}, "`radius` must be > 0, got -0.1"),
        ({"l2_weight": -1.0}, "`l2_weight` must be >= 0, got -1.0"),
        ({"cos_weight": "a"}, "`cos_weight` must be a number, got 'a'"),
        ({"detach_clean": 1}, "`detach_clean` must be a bool, got 1"),
        ({"radios": 0.1}, "did you mean 'radius'"),
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message.replace("(", r"\(")):
        LocalGradientAlignment(**kwargs)


def test_trainer_fit_of_a_few_steps():
    x, y = digits_tensors()
    train = DataLoader(TensorDataset(x[:96], y[:96]), batch_size=32)
    model = TinyCNN()
    module = RobustClassifier(model, [get_penalty("lga", weight=1.0, radius=0.3, seed=0)])
    before = [p.detach().clone() for p in model.parameters()]
    trainer = pl.Trainer(
        max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(module, train)
    metrics = trainer.callback_metrics
    assert torch.isfinite(metrics["train/loss"]) and float(metrics["train/penalty/lga"]) > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
