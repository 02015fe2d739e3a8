"""ResNet18CIFAR: architecture, ReLU modules, and double backprop (gradgradcheck)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.models import ResNet18CIFAR, count_relus, softplus
from robust_train.models.normalize import CIFAR10_MEAN


def test_parameter_count_matches_the_standard_cifar_resnet18():
    # 11,173,962 trainable parameters: the usual CIFAR ResNet-18 (3x3 stem, no max pool, 10
    # classes).
    model = ResNet18CIFAR()
    assert sum(p.numel() for p in model.parameters()) == 11_173_962
    assert not any(isinstance(m, nn.MaxPool2d) for m in model.modules())
    assert model.conv1.kernel_size == (3, 3) and model.conv1.stride == (1, 1)


def test_output_shape_and_cifar_normalisation():
    model = ResNet18CIFAR(num_classes=4, width=4)
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 4)
    assert model.normalize.mean.tolist() == pytest.approx(list(CIFAR10_MEAN))
    gray = ResNet18CIFAR(in_channels=1, width=4)
    assert gray.normalize.mean.tolist() == pytest.approx([sum(CIFAR10_MEAN) / 3])
    assert gray(torch.rand(2, 1, 32, 32)).shape == (2, 10)


def test_relus_are_separate_non_inplace_modules():
    model = ResNet18CIFAR(width=4)
    relus = [m for m in model.modules() if isinstance(m, nn.ReLU)]
    assert len(relus) == count_relus(model) == 17  # stem + 2 per block x 8 blocks
    assert len({id(m) for m in relus}) == 17 and not any(m.inplace for m in relus)
    assert count_relus(softplus(model, 10.0)) == 0


def test_second_derivatives_of_softplus_copy_pass_gradgradcheck():
    torch.manual_seed(0)
    model = softplus(ResNet18CIFAR(num_classes=3, width=2), beta=10.0).double().eval()
    x = torch.rand(1, 3, 8, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda inp: model(inp), (x,), atol=1e-5, rtol=1e-3)


def test_double_backprop_in_train_mode_with_relus():
    model = ResNet18CIFAR(width=4).train()
    x = torch.rand(4, 3, 16, 16, requires_grad=True)
    (grad,) = torch.autograd.grad(model(x).logsumexp(1).sum(), x, create_graph=True)
    grad.pow(2).sum().backward()
    assert model.conv1.weight.grad is not None and model.conv1.weight.grad.abs().sum() > 0
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
