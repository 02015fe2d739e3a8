"""MNISTConvNet: RAR's layout, ReLU modules for softplus, config round trip, double backprop."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.models import MNISTConvNet, build_model, count_relus, get_model, model_config


def test_rar_layout_by_default():
    net = MNISTConvNet()
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    assert [(c.in_channels, c.out_channels, c.kernel_size) for c in convs] == [
        (1, 32, (5, 5)),
        (32, 64, (5, 5)),
    ]
    assert [(lin.in_features, lin.out_features) for lin in linears] == [
        (7 * 7 * 64, 1024),
        (1024, 10),
    ]
    assert sum(isinstance(m, nn.MaxPool2d) for m in net.modules()) == 2
    assert count_relus(net) == 3


def test_config_round_trip_and_registry():
    net = get_model("mnist_cnn", channels=(8, 16), hidden=32)
    rebuilt = build_model(model_config(net))
    rebuilt.load_state_dict(net.state_dict())
    x = torch.rand(3, 1, 28, 28)
    torch.testing.assert_close(rebuilt(x), net(x))


def test_double_backprop_reaches_first_layer():
    net = MNISTConvNet(channels=(4, 8), hidden=16)
    x = torch.rand(2, 1, 28, 28, requires_grad=True)
    (g,) = torch.autograd.grad(net(x)[:, 0].sum(), x, create_graph=True)
    g.pow(2).sum().backward()
    assert float(net.features[0].weight.grad.abs().sum()) > 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"input_size": 30}, "input_size.*30"),
        ({"channels": (8,)}, "channels"),
        ({"hidden": 0}, "hidden.*0"),
        ({"dropout": 1.5}, "dropout.*1.5"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        MNISTConvNet(**kwargs)
