"""The multi-map penalty on networks with BatchNorm (`model_mode`): by default ("unchanged") its
forwards run in the model's training mode and update the running statistics with the perturbed
points; "frozen" computes the same value and gradient but leaves the running statistics as they
were; "eval" equals the penalty of the model put in eval mode by hand, each image's penalty then
depends on that image only, and every module's own flag comes back. In every mode the gradient
reaches the BatchNorm parameters."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.regularizers.multi_map import MultiMapSmoothness

OPTIONS = {
    "explainers": ["saliency", "input_x_gradient", "grad_cam"],
    "map_weights": [0.5, 1.0, 1.5],
    "layer": "3",
    "distance": "l1",
    "radius": 0.1,
    "n_ascent_steps": 1,
}


def bn_net() -> nn.Sequential:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Conv2d(4, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
        nn.Flatten(), nn.Linear(6 * 8 * 8, 3),
    )  # fmt: skip
    with torch.no_grad():  # running statistics unlike a fresh layer's and unlike a batch's
        for bn in (net[1], net[4]):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)
    return net.train()


def batch(n: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.rand(n, 3, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


def buffers(net: nn.Module) -> list[torch.Tensor]:
    return [b.clone() for b in net.buffers()]


@pytest.mark.parametrize("mode", ["frozen", "eval"])
def test_running_statistics_and_modes_are_left_as_they_were(mode):
    net, (x, y) = bn_net(), batch()
    net[4].eval()  # a frozen BatchNorm inside a training model stays frozen
    before = buffers(net)
    value = MultiMapSmoothness(seed=0, model_mode=mode, **OPTIONS)(net, x, y)
    assert value.shape == (6,) and bool(torch.isfinite(value).all())
    assert float(value.detach().sum()) > 0
    assert all(torch.equal(a, b) for a, b in zip(before, buffers(net), strict=True))
    assert [m.training for m in net] == [True] * 4 + [False] + [True] * 3


def test_default_trains_batchnorm_on_the_perturbed_points():
    net, (x, y) = bn_net(), batch()
    before = net[1].num_batches_tracked.clone()
    MultiMapSmoothness(seed=0, **OPTIONS)(net, x, y)
    # clean maps, one ascent step and the final maps: three forwards update the statistics
    assert int(net[1].num_batches_tracked - before) == 3
    assert not torch.allclose(net[1].running_mean, bn_net()[1].running_mean)


def test_frozen_equals_unchanged_and_eval_equals_the_model_in_eval_mode():
    x, y = batch()
    in_train = MultiMapSmoothness(seed=0, **OPTIONS)(bn_net(), x, y)
    frozen = MultiMapSmoothness(seed=0, model_mode="frozen", **OPTIONS)(bn_net(), x, y)
    value = MultiMapSmoothness(seed=0, model_mode="eval", **OPTIONS)(bn_net(), x, y)
    reference = MultiMapSmoothness(seed=0, **OPTIONS)(bn_net().eval(), x, y)
    torch.testing.assert_close(frozen, in_train, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(value, reference, rtol=1e-5, atol=1e-7)
    assert not torch.allclose(value, in_train, rtol=1e-3)


@pytest.mark.parametrize(("mode", "independent"), [("eval", True), ("unchanged", False)])
def test_each_image_penalty_depends_on_that_image_only(mode, independent):
    x, y = batch()
    other = x.clone()
    other[1:] = torch.rand(5, 3, 8, 8, generator=torch.Generator().manual_seed(7))
    a = MultiMapSmoothness(seed=0, model_mode=mode, **OPTIONS)(bn_net(), x, y)
    b = MultiMapSmoothness(seed=0, model_mode=mode, **OPTIONS)(bn_net(), other, y)
    assert torch.allclose(a[0], b[0], rtol=1e-5, atol=1e-7) == independent


@pytest.mark.parametrize("mode", ["unchanged", "frozen", "eval"])
def test_gradient_reaches_batchnorm_parameters_after_a_training_forward(mode):
    net, (x, y) = bn_net(), batch()
    loss = torch.nn.functional.cross_entropy(net(x), y)  # the module's clean forward first
    before = buffers(net)
    penalty = MultiMapSmoothness(seed=0, model_mode=mode, **OPTIONS)(net, x, y)
    kept = all(torch.equal(a, b) for a, b in zip(before, buffers(net), strict=True))
    assert kept == (mode != "unchanged")
    (loss + penalty.mean()).backward()
    for bn in (net[1], net[4]):
        assert bn.weight.grad is not None and float(bn.weight.grad.abs().sum()) > 0


def test_bad_model_mode_is_refused_with_its_value():
    with pytest.raises(ValueError, match=r"model_mode.*'train'"):
        MultiMapSmoothness(model_mode="train")
