"""DeepLIFT (rescale rule): equal to Captum's DeepLift where Captum applies its own rules,
complete on ResNet / VGG / DenseNet, per-call handling, and a map whose derivative is the true
derivative of the DeepLIFT map (central finite differences, float64)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from robust_train.explain import deeplift, explainer_spec, importance_map, input_x_gradient
from robust_train.models import MNISTConvNet, ResNet18CIFAR, SmallCNN
from robust_train.models.softplus import smooth_relus, softplus
from tests.support.helpers import TinyCNN, random_torchvision


def captum_deeplift(model, x, t, baseline):
    from captum.attr import DeepLift

    enabled = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)  # Captum's max-pool rule calls max_unpool2d,
    try:  # which has no deterministic kernel (a deterministic fit earlier may have turned it on)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return DeepLift(model).attribute(
                x, baselines=baseline, target=t, return_convergence_delta=True
            )
    finally:
        torch.use_deterministic_algorithms(enabled)


def conv_pool_net(size):
    """Max-pools between convolutions: Captum's hooks then apply its max-pool rule as written."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * (size // 4) ** 2, 10),
    )  # fmt: skip


class MaxPoolTinyCNN(nn.Module):
    """TinyCNN with a max-pool after each ReLU module (the layout Captum mishandles)."""

    def __init__(self, size):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(8 * (size // 4) ** 2, 10),
        )  # fmt: skip

    def forward(self, x):
        return self.net(x)


# name -> (model builder, image size, channels, our maxpool rule Captum's values equal)
CAPTUM_CASES = {
    "small_cnn_28": (lambda s: SmallCNN(input_size=s, width=8), 28, 1, "rescale"),
    "small_cnn_bn_64": (
        lambda s: SmallCNN(input_size=s, width=8, batchnorm=True),
        64,
        1,
        "rescale",
    ),
    "tiny_cnn_64": (lambda s: TinyCNN(size=s), 64, 1, "rescale"),
    "resnet18_cifar_32": (lambda s: ResNet18CIFAR(), 32, 3, "rescale"),
    "conv_pool_28": (conv_pool_net, 28, 1, "rescale"),
    "conv_pool_64": (conv_pool_net, 64, 1, "rescale"),
    "mnist_convnet_28": (lambda s: MNISTConvNet(channels=(8, 16), hidden=32), 28, 1, "gradient"),
    "mnist_convnet_64": (
        lambda s: MNISTConvNet(input_size=s, channels=(8, 16), hidden=32),
        64,
        1,
        "gradient",
    ),
    "maxpool_tiny_cnn_64": (MaxPoolTinyCNN, 64, 1, "gradient"),
}


@pytest.mark.parametrize("name", CAPTUM_CASES)
@pytest.mark.parametrize("baseline", ["zeros", "random"])
def test_equals_captum_deeplift(name, baseline):
    """Float32 CPU: |ours - Captum| <= 1e-5 x the largest |attribution| (measured: <= 1e-6)."""
    build, size, channels, rule = CAPTUM_CASES[name]
    torch.manual_seed(0)
    model = build(size).eval()
    x = torch.rand(3, channels, size, size)
    x[:, :, : size // 4] = 0.0  # a background band, where x == x0 and the fallbacks are used
    base = torch.zeros_like(x) if baseline == "zeros" else torch.rand_like(x) * 0.5
    t = torch.tensor([1, 4, 7])
    ref, _ = captum_deeplift(model, x, t, base)
    ours = deeplift(model, x, t, baseline=base if baseline == "random" else None, maxpool=rule)
    scale = float(ref.detach().abs().max())
    assert scale > 0
    torch.testing.assert_close(ours, ref, atol=1e-5 * scale, rtol=0)


def _gap(model, x, x0, t):
    with torch.no_grad():
        return (model(x) - model(x0)).gather(1, t[:, None]).squeeze(1)


def test_captum_loses_completeness_when_a_max_pool_follows_a_relu_module():
    """Captum on MNISTConvNet computes `maxpool="gradient"` (test above), which is not
    summation-to-delta: its gap is a sizeable part of the logit gap, as is ours with that rule;
    with the rescale rule ours is float rounding."""
    torch.manual_seed(0)
    model = MNISTConvNet(channels=(8, 16), hidden=32).eval()
    x, t = torch.rand(3, 1, 28, 28), torch.tensor([1, 4, 7])
    gap = _gap(model, x, torch.zeros_like(x), t)
    _, delta = captum_deeplift(model, x, t, torch.zeros_like(x))
    assert float((delta / gap).abs().max()) > 1e-3
    total = deeplift(model, x, t, maxpool="gradient").sum(dim=(1, 2, 3))
    torch.testing.assert_close(total - gap, delta, atol=1e-6, rtol=1e-4)
    total = deeplift(model, x, t).sum(dim=(1, 2, 3))
    torch.testing.assert_close(total, gap, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("arch", ["resnet18", "vgg11_bn", "densenet121", "resnet50"])
def test_completeness_on_torchvision_models(arch):
    """Linear layers, in-place ReLU, max-pool (ResNet's overlapping 3x3 stride-2 stem pool), BN
    (eval), residual sums, concatenation: sum of attributions = f_t(x) - f_t(x0)."""
    model = random_torchvision(arch)
    torch.manual_seed(1)
    x, t = torch.rand(2, 3, 64, 64), torch.tensor([1, 4])
    base = torch.full_like(x, 0.5)
    for baseline in (None, base):
        x0 = torch.zeros_like(x) if baseline is None else base
        gap = _gap(model, x, x0, t)
        total = deeplift(model, x, t, baseline=baseline).sum(dim=(1, 2, 3))
        torch.testing.assert_close(total, gap, atol=1e-6, rtol=1e-4)


def test_overlapping_pool_shares_are_summed_so_completeness_holds():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1),
        nn.MaxPool2d(3, 2, 1), nn.Flatten(), nn.Linear(4 * 16, 3),
    ).eval()  # fmt: skip
    x, t = torch.rand(4, 1, 8, 8), torch.tensor([0, 1, 2, 0])
    total = deeplift(model, x, t).sum(dim=(1, 2, 3))
    torch.testing.assert_close(total, _gap(model, x, torch.zeros_like(x), t), atol=1e-6, rtol=1e-4)


class ReusedReLU(nn.Module):
    """One ReLU module called twice, and a functional ReLU (as torchvision's blocks do)."""

    def __init__(self, separate=False):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(16, 8), nn.Linear(8, 8)
        self.c = nn.Linear(8, 3)
        self.relu, self.relu2 = nn.ReLU(inplace=True), nn.ReLU()
        self.separate = separate

    def forward(self, x):
        h = self.relu(self.a(x.flatten(1)))
        h = (self.relu2 if self.separate else self.relu)(self.b(h))
        return self.c(h if self.separate else F.relu(h) - h + h)


def test_a_module_called_twice_and_functional_relus_are_rescaled_per_call():
    x, t = torch.rand(5, 1, 4, 4), torch.tensor([0, 1, 2, 0, 1])
    reused, separate = ReusedReLU(), ReusedReLU(separate=True)
    ref, _ = captum_deeplift(separate.eval(), x, t, torch.zeros_like(x))
    expected = deeplift(separate, x, t)
    torch.testing.assert_close(expected, ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(deeplift(reused.eval(), x, t), expected, atol=1e-6, rtol=1e-5)


def test_limiting_cases():
    torch.manual_seed(0)
    linear = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    x, t = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 2, 0])
    torch.testing.assert_close(deeplift(linear, x, t), input_x_gradient(linear, x, t))
    net = TinyCNN(size=4).eval()
    assert float(deeplift(net, x, t, baseline=x.clone()).abs().max()) == 0.0
    one = nn.Sequential(nn.Flatten(), nn.Tanh(), nn.Linear(16, 3))  # rescale rule by hand
    x0 = torch.full_like(x, 0.25)
    slope = (torch.tanh(x) - torch.tanh(x0)) / (x - x0)
    expected = (x - x0) * slope * one[2].weight[t].view_as(x)
    torch.testing.assert_close(deeplift(one, x, t, baseline=0.25), expected)


def test_under_the_softplus_surrogate_it_explains_the_softplus_network():
    model = TinyCNN(size=8).eval()
    x, t = torch.rand(3, 1, 8, 8), torch.tensor([0, 5, 9])
    with smooth_relus(4.0):
        smooth = deeplift(model, x, t)
    torch.testing.assert_close(smooth, deeplift(softplus(model, 4.0), x, t))


def _fd_check(model, x, base, t, checks):
    w = torch.randn_like(x)

    def value():
        return (w * deeplift(model, x, t, baseline=base, create_graph=True)).sum()

    grads = torch.autograd.grad(value(), [tensor for tensor, _ in checks])
    for (tensor, index), grad in zip(checks, grads, strict=True):
        with torch.no_grad():
            tensor[index] += 1e-6
            up = value().item()
            tensor[index] -= 2e-6
            down = value().item()
            tensor[index] += 1e-6
        assert grad[index].item() == pytest.approx((up - down) / 2e-6, rel=1e-5, abs=1e-10)


@pytest.mark.parametrize("activation", [nn.ReLU, nn.Sigmoid, nn.ELU])
def test_derivative_is_the_true_derivative_of_the_deeplift_map(activation):
    """d(sum w * map)/dx and /dweight by autograd equal central finite differences (float64),
    through two nonlinear layers and two max-pools (where a graph through the DeepLIFT chain
    itself, not the true forward, would be wrong)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), activation(), nn.MaxPool2d(2),
        nn.Conv2d(4, 4, 3, padding=1), activation(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16, 8), activation(), nn.Linear(8, 3),
    ).double().eval()  # fmt: skip
    x = torch.rand(2, 1, 8, 8, dtype=torch.float64, requires_grad=True)
    base = torch.rand(2, 1, 8, 8, dtype=torch.float64) * 0.3
    weight = model[3].weight
    checks = [(x, (0, 0, 3, 4)), (x, (1, 0, 6, 1)), (x, (0, 0, 0, 7)), (weight, (1, 2, 0, 1))]
    _fd_check(model, x, base, torch.tensor([0, 2]), checks)


def test_graph_and_no_graph_give_the_same_map():
    model = random_torchvision("resnet18")
    x, t = torch.rand(2, 3, 64, 64), torch.tensor([1, 4])
    plain = deeplift(model, x, t)
    graph = deeplift(model, x, t, create_graph=True)
    assert graph.requires_grad and not plain.requires_grad
    torch.testing.assert_close(graph, plain, atol=1e-7, rtol=1e-5)


def test_capabilities_and_argument_errors():
    spec = explainer_spec("deeplift")
    assert spec.differentiable and not spec.piecewise_constant and not spec.layer
    model, x, t = TinyCNN().eval(), torch.rand(1, 1, 8, 8), torch.tensor([0])
    with pytest.raises(ValueError, match="`baseline` must have shape"):
        deeplift(model, x, t, baseline=torch.zeros(2, 8, 8))
    with pytest.raises(ValueError, match="`eps` must be > 0"):
        deeplift(model, x, t, eps=0.0)
    with pytest.raises(ValueError, match="`maxpool`.*'rescale'"):
        deeplift(model, x, t, maxpool="max")


def test_mobilenet_v3_runs_with_squeeze_excitation_products():
    model = random_torchvision("mobilenet_v3_small")
    x = torch.rand(2, 3, 64, 64, requires_grad=True)
    attr = deeplift(model, x, torch.tensor([1, 4]), create_graph=True)
    (grad,) = torch.autograd.grad(importance_map(attr).sum(), x)
    assert torch.isfinite(attr).all() and torch.isfinite(grad).all()


@pytest.mark.slow
def test_224_smoke_resnet18_is_complete_and_differentiable():
    model = random_torchvision("resnet18")
    x = torch.rand(1, 3, 224, 224, requires_grad=True)
    t = torch.tensor([3])
    attr = deeplift(model, x, t, create_graph=True)
    torch.testing.assert_close(
        attr.sum(dim=(1, 2, 3)), _gap(model, x, torch.zeros_like(x), t), atol=1e-5, rtol=1e-4
    )
    (grad,) = torch.autograd.grad(importance_map(attr).pow(2).sum(), x)
    assert torch.isfinite(grad).all()
