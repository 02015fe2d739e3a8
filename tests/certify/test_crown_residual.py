"""CROWN through residual sums: on a block whose sum is linear the back-substitution is exact (the
extreme values over the box, reached at its vertices); on the package's ResNet block (BatchNorm,
projection shortcut) the CROWN pre-activation bounds contain the exact values at every vertex and
random points, are never looser than the interval ones and tighter somewhere, and the map bounds
built on them contain the saliency map at those points."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from robust_train.certify.crown import crown_tightener
from robust_train.certify.deterministic import explanation_bounds
from robust_train.certify.graph import trace_network
from robust_train.certify.interval import forward_bounds, input_box
from robust_train.explain import saliency
from robust_train.models.resnet_cifar import BasicBlock


class LinearSum(nn.Module):
    """x + conv(x) -> ReLU -> linear: the ReLU's input is an affine map of x through a sum."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 3, padding=1)
        self.relu = nn.ReLU()
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(9, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.relu(x + self.conv(x)))


class Block(nn.Module):
    """The package's ResNet basic block (projection shortcut, stride 2), then a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.block = BasicBlock(1, 2, stride=2)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(8, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


def vertices_and_points(x: torch.Tensor, eps: float, n_random: int) -> torch.Tensor:
    box = input_box(x, eps)
    lo, width = box.lower.flatten(), (box.upper - box.lower).flatten()
    corners = torch.tensor(list(itertools.product((0, 1), repeat=x.numel())), dtype=x.dtype)
    random = torch.rand(n_random, x.numel(), dtype=x.dtype)
    return (lo + torch.cat([corners, random]) * width).view(-1, *x.shape[1:])


def relu_inputs(net: nn.Module, points: torch.Tensor) -> dict[str, torch.Tensor]:
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        m.register_forward_hook(lambda m, i, o, key=key: seen.__setitem__(key, i[0]))
        for key, m in net.named_modules()
        if isinstance(m, nn.ReLU)
    ]
    net(points)
    for hook in hooks:
        hook.remove()
    return seen


def bounds_both_ways(net: nn.Module, x: torch.Tensor, eps: float) -> tuple[list, dict, dict]:
    steps = trace_network(net)
    coarse = forward_bounds(steps, input_box(x, eps))
    fine = forward_bounds(steps, input_box(x, eps), crown_tightener(steps, rows_per_chunk=5))
    return [s for s in steps if s.kind == "relu"], coarse, fine


def test_crown_is_exact_through_a_linear_residual_sum() -> None:
    torch.manual_seed(0)
    net = LinearSum().double().eval()
    x = torch.rand(1, 1, 3, 3, dtype=torch.float64) * 0.6 + 0.2
    with torch.no_grad():  # centre the pre-activations on 0, so that the ball flips signs
        net.conv.bias -= relu_inputs(net, x)["relu"].mean()
    (relu,), coarse, fine = bounds_both_ways(net, x, 0.1)
    exact = relu_inputs(net, vertices_and_points(x, 0.1, 0))["relu"]
    box, loose = fine[relu.args[0]], coarse[relu.args[0]]
    unstable = (loose.lower < 0) & (loose.upper > 0)
    # CROWN ran on the unstable neurons: there it must equal the extremes over the vertices.
    assert unstable.any()
    torch.testing.assert_close(box.lower[unstable], exact.amin(0, keepdim=True)[unstable])
    torch.testing.assert_close(box.upper[unstable], exact.amax(0, keepdim=True)[unstable])
    assert (box.upper - box.lower)[unstable].sum() < (loose.upper - loose.lower)[unstable].sum()


def test_crown_through_a_resnet_block_is_sound_and_tighter() -> None:
    torch.manual_seed(4)
    net = Block().double()
    for bn in (net.block.bn1, net.block.bn2, net.block.shortcut[1]):
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.5, 2.0)
    net.eval()
    x = torch.rand(2, 1, 3, 3, dtype=torch.float64)
    eps = 0.15
    relus, coarse, fine = bounds_both_ways(net, x, eps)
    points = torch.cat([vertices_and_points(x[i : i + 1], eps, 200) for i in range(2)])
    seen = relu_inputs(net, points)
    tighter = 0
    assert relus[-1].path == "block.relu2"  # the ReLU after the residual sum
    for relu in relus:
        c, f = coarse[relu.args[0]], fine[relu.args[0]]
        assert (f.lower >= c.lower - 1e-12).all() and (f.upper <= c.upper + 1e-12).all()
        tighter = int((f.lower > c.lower + 1e-9).sum() + (f.upper < c.upper - 1e-9).sum())
        z = seen[str(relu.path)].view(2, -1, *f.lower.shape[1:])
        assert (f.lower.unsqueeze(1) <= z + 1e-12).all(), relu.path
        assert (z <= f.upper.unsqueeze(1) + 1e-12).all(), relu.path
    assert tighter > 0  # back-substitution through the sum tightened some bound
    target = net(x).argmax(1)
    b = explanation_bounds(net, x, target, epsilon=eps, method="crown")
    per_image = points.view(2, -1, *x.shape[1:])
    for i in range(2):
        exact = saliency(net, per_image[i], target[i].expand(per_image.shape[1]))
        assert (b.lower[i] <= exact + 1e-12).all() and (exact <= b.upper[i] + 1e-12).all()
    loose = explanation_bounds(net, x, target, epsilon=eps, method="interval")
    assert ((b.upper - b.lower) <= (loose.upper - loose.lower) + 1e-12).all()
