"""SmallCNN: shapes, ReLU modules for softplus, double backprop, and accuracy on digits."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from robust_train.data import DigitsDataModule
from robust_train.models import SmallCNN, count_relus, softplus


@pytest.mark.parametrize(
    ("size", "channels", "n_pools"), [(8, 1, 1), (28, 1, 2), (32, 3, 3), (16, 2, 2)]
)
def test_shapes_and_pools(size, channels, n_pools):
    model = SmallCNN(in_channels=channels, num_classes=7, input_size=size, width=4)
    assert sum(isinstance(m, nn.AvgPool2d) for m in model.modules()) == n_pools
    assert model(torch.rand(3, channels, size, size)).shape == (3, 7)


def test_relus_are_separate_non_inplace_modules():
    model = SmallCNN(width=4)
    relus = [m for m in model.modules() if isinstance(m, nn.ReLU)]
    assert len(relus) == count_relus(model) == 3
    assert len({id(m) for m in relus}) == 3 and not any(m.inplace for m in relus)


def test_softplus_with_large_beta_approaches_relu_model():
    model = SmallCNN(width=8).eval()
    x = torch.rand(4, 1, 8, 8)
    smooth = softplus(model, beta=1e4)
    assert count_relus(smooth) == 0
    torch.testing.assert_close(smooth(x), model(x), atol=1e-3, rtol=0)
    assert not torch.allclose(softplus(model, beta=1.0)(x), model(x), atol=1e-3)


def _saliency_penalty(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    x = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(model(x)[:, 0].sum(), x, create_graph=True)
    return grad.pow(2).sum()


def test_double_backprop_matches_finite_differences():
    torch.manual_seed(0)
    model = softplus(SmallCNN(width=4, batchnorm=True), beta=5.0).double().eval()
    x = torch.rand(2, 1, 8, 8, dtype=torch.float64)
    weight = model.features[0].weight
    (analytic,) = torch.autograd.grad(_saliency_penalty(model, x), weight)
    h, idx = 1e-6, (1, 0, 1, 2)
    with torch.no_grad():
        weight[idx] += h
    plus = _saliency_penalty(model, x).item()
    with torch.no_grad():
        weight[idx] -= 2 * h
    minus = _saliency_penalty(model, x).item()
    assert analytic[idx].item() == pytest.approx((plus - minus) / (2 * h), rel=1e-5)
    assert analytic[idx].abs() > 0


def test_double_backprop_through_relus_in_train_mode():
    model = SmallCNN(width=4, batchnorm=True, dropout=0.2).train()
    _saliency_penalty(model, torch.rand(4, 1, 8, 8)).backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert grads["classifier.bias"] is None  # the input gradient does not depend on the last bias
    del grads["classifier.bias"]
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    assert grads["features.0.weight"].abs().sum() > 0


def test_dropout_and_batchnorm_variants():
    model = SmallCNN(width=4, dropout=0.5, batchnorm=True)
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 3
    assert model.features[0].bias is None
    x = torch.rand(8, 1, 8, 8)
    model.train()
    assert not torch.equal(model(x), model(x))
    model.eval()
    assert torch.equal(model(x), model(x))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"width": 0}, "width"),
        ({"dropout": 1.5}, "dropout"),
        ({"in_channels": 1.0}, "in_channels"),
        ({"mean": [0.1, 0.2]}, "entries"),
    ],
)
def test_invalid_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        SmallCNN(**kwargs)


@pytest.mark.slow
def test_reaches_95_percent_on_digits_in_20_epochs():
    dm = DigitsDataModule(batch_size=64, seed=0)
    dm.setup()
    model = SmallCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    start = time.perf_counter()
    for _ in range(20):
        model.train()
        for x, y in dm.train_dataloader():
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x).argmax(1) == y).sum()) for x, y in dm.test_dataloader())
    accuracy = correct / len(dm.test_set)
    print(
        f"SmallCNN digits: test accuracy {accuracy:.4f} after 20 epochs in "
        f"{time.perf_counter() - start:.1f}s"
    )
    assert accuracy >= 0.95
