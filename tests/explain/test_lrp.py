"""`robust_train.explain.lrp` against Zennit's own attributor, limiting cases and second order.

Reference: `zennit.attribution.Gradient(model, composite)` with `attr_output` the one-hot of the
target, Zennit's composite of the same name (plus `Pass` on `Normalize`) and Zennit's canonizers
(tests/reference/lrp_reference.py). Tolerance (float32, CPU): |lrp - zennit| <= 1e-5 * max|zennit|
+ 1e-5 relative; the values are bitwise equal on this machine's CPU once the BatchNorms have
eps = 0 (Zennit's merged BatchNorm computes x / sqrt(1 + eps), ours x).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.explain import LRP_COMPOSITES, get_explainer, importance_map, lrp, saliency
from robust_train.explain._lrp_canonizers import merge_pairs
from robust_train.explain.lrp import pixel_bounds
from robust_train.models import (
    MNISTConvNet,
    Normalize,
    ResNet18CIFAR,
    SmallCNN,
    TorchvisionClassifier,
)
from tests.reference.lrp_reference import densenet_pairs, randomize_batchnorms, zennit_lrp
from tests.support.helpers import TinyCNN

PROJECT_MODELS = {
    "mnist_cnn": (lambda: MNISTConvNet(channels=[8, 16], hidden=32, mean=0.13, std=0.31), "plain"),
    "small_cnn_bn": (lambda: SmallCNN(width=8, batchnorm=True, input_size=28), "sequential"),
    "resnet18_cifar": (lambda: ResNet18CIFAR(width=4, in_channels=1), "cifar"),
}
TORCHVISION = {
    "resnet18": "resnet",
    "resnet50": "resnet",
    "vgg11_bn": "vgg",
    "densenet121": "densenet",
    "mobilenet_v3_small": "mobilenet",
}


def _compare(
    model: nn.Module, kind: str, shape: tuple[int, ...], composite: str, batch: int = 2
) -> None:
    model = randomize_batchnorms(model).eval()
    x, t = torch.rand(batch, *shape), torch.tensor([1, 7])[:batch]
    low, high = pixel_bounds(model, shape[0])
    ours = lrp(model, x, t, composite=composite)
    theirs = zennit_lrp(model, x, t, composite, kind, low[..., None, None], high[..., None, None])
    assert ours.shape == x.shape and theirs.abs().max() > 0
    scale = float(theirs.abs().max())
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize("composite", LRP_COMPOSITES)
@pytest.mark.parametrize("name", PROJECT_MODELS)
def test_equals_zennit_on_the_project_models(name, composite):
    build, kind = PROJECT_MODELS[name]
    model = build()
    _compare(model, kind, (1, 32, 32) if name == "resnet18_cifar" else (1, 28, 28), composite)


SLOW = pytest.mark.slow  # 2-4 s alone on one core, more under load
# 64 px for the fast tier; the slow cases at 48 px (every stage keeps a map of at least 2x2 but
# the last: a third of the convolutions' cost of 64 px); one 224 px case below
TORCHVISION_CASES = [
    ("resnet18", "epsilon_plus", 64),
    pytest.param("resnet18", "epsilon_gamma_box", 48, marks=SLOW),
    ("mobilenet_v3_small", "epsilon_plus", 64),
    ("mobilenet_v3_small", "alpha2_beta1", 64),
    pytest.param("resnet50", "epsilon_plus", 48, marks=SLOW),
    pytest.param("vgg11_bn", "epsilon_gamma_box", 48, marks=SLOW),
    pytest.param("densenet121", "epsilon_plus", 48, marks=SLOW),
    pytest.param("densenet121", "alpha2_beta1", 48, marks=SLOW),
]


def _torchvision(name: str) -> nn.Module:
    """TorchvisionClassifier(name) with 10 classes; VGG's classifier (Linear, in-place ReLU,
    Dropout, twice, then the head) at width 64 instead of 4,096: the same layers, not its 120M
    parameters."""
    if not name.startswith("vgg"):
        return TorchvisionClassifier(name, num_classes=10)
    model = TorchvisionClassifier(name, num_classes=10, model_kwargs={"init_weights": False})
    head = model.backbone.classifier
    head[0], head[3], head[6] = nn.Linear(512 * 7 * 7, 64), nn.Linear(64, 64), nn.Linear(64, 10)
    return model


@pytest.mark.parametrize(("name", "composite", "size"), TORCHVISION_CASES)
def test_equals_zennit_on_torchvision_models(name, composite, size):
    """Random weights and BatchNorm statistics; in-place ReLUs, residual sums (ResNet blocks get
    Zennit's sum canonizer), concatenation (DenseNet), squeeze-excitation (MobileNetV3)."""
    torch.manual_seed(0)
    _compare(_torchvision(name), TORCHVISION[name], (3, size, size), composite)


@pytest.mark.slow
def test_equals_zennit_at_224px():
    """One image (the smaller cases run two, each its own target)."""
    torch.manual_seed(0)
    model = TorchvisionClassifier("resnet50", num_classes=1000)
    _compare(model, "resnet", (3, 224, 224), "epsilon_plus", batch=1)


@pytest.mark.slow
def test_densenet_merges_only_the_batchnorms_that_read_a_convolution():
    model = TorchvisionClassifier("densenet121", num_classes=10).eval()
    names = {module: name for name, module in model.named_modules()}
    found = {(names[a], names[b]) for a, b in merge_pairs(model, torch.rand(1, 3, 32, 32))}
    assert found == {(a[0], b) for a, b in densenet_pairs(model)} and len(found) == 59


def _bias_free_relu_net(mean: float) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        Normalize([mean], [0.3]),
        nn.Conv2d(1, 4, 3, padding=1, bias=False),
        nn.ReLU(),
        nn.Conv2d(4, 4, 3, padding=1, bias=False),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 36, 5, bias=False),
    ).double()


@pytest.mark.parametrize("mean", [0.0, 0.4])
def test_lrp0_is_gradient_times_input_on_a_bias_free_relu_net(mean):
    """LRP-0 (epsilon -> 0) times the target logit is x' * grad_x' f at the Normalize output
    x' = (x - mean) / std, passed on to x unchanged: (x - mean) * grad_x f, not divided by std."""
    model = _bias_free_relu_net(mean)
    x, t = torch.rand(3, 1, 6, 6, dtype=torch.float64), torch.tensor([0, 2, 4])
    relevance = lrp(model, x, t, composite="epsilon", epsilon=1e-12)
    logit = model(x).gather(1, t[:, None]).view(-1, 1, 1, 1)
    expected = (x - mean) * saliency(model, x, t)
    torch.testing.assert_close(relevance * logit, expected, rtol=1e-5, atol=1e-8)


def test_normalize_passes_relevance_on_unchanged():
    model = MNISTConvNet(channels=[4, 8], hidden=16, mean=0.2, std=0.25).eval()
    x, t = torch.rand(2, 1, 28, 28), torch.tensor([3, 5])
    inner = nn.Sequential(model.features, model.hidden, model.classifier)
    for composite in ("epsilon_plus", "alpha2_beta1"):
        expected = lrp(inner, model.normalize(x), t, composite=composite)
        torch.testing.assert_close(lrp(model, x, t, composite=composite), expected)


def test_box_bounds_are_the_pixel_range_through_normalize():
    low, high = pixel_bounds(MNISTConvNet(mean=0.2, std=0.25), 1)
    torch.testing.assert_close(low, torch.tensor([[-0.8]]))
    torch.testing.assert_close(high, torch.tensor([[3.2]]))
    low, high = pixel_bounds(nn.Sequential(nn.Conv2d(3, 2, 1)), 3)
    assert low.tolist() == [[0.0] * 3] and high.tolist() == [[1.0] * 3]


def _smooth_model() -> nn.Module:
    """Conv -> BatchNorm (merged, random statistics) -> Softplus -> conv -> Softplus -> pools ->
    linear, float64: the LRP map is smooth in the input and the parameters."""
    torch.manual_seed(0)
    model = nn.Sequential(
        Normalize([0.4], [0.3]),
        nn.Conv2d(1, 3, 3, padding=1),
        nn.BatchNorm2d(3),
        nn.Softplus(beta=3.0),
        nn.Conv2d(3, 4, 3, padding=1),
        nn.Softplus(beta=3.0),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 9, 5),
    )
    randomize_batchnorms(model)
    model[2].eps = 1e-5
    return model.double().eval()


@pytest.mark.parametrize(
    ("composite", "epsilon"),
    [("epsilon_plus", 1e-6), ("epsilon", 0.1), ("epsilon_gamma_box", 1e-6), ("alpha2_beta1", 1e-6)],
)
def test_a_later_backward_is_the_true_second_order_gradient(composite, epsilon):
    """The gradient of a function of the map, taken by the CALLER after lrp returned, w.r.t. the
    input and the parameters (conv, merged BatchNorm, linear), equals central differences."""
    model = _smooth_model()
    x0, t = torch.rand(2, 1, 6, 6, dtype=torch.float64), torch.tensor([1, 3])
    weights = torch.linspace(0, 1, 36, dtype=torch.float64).view(6, 6)

    def value(x):
        relevance = lrp(model, x, t, composite=composite, epsilon=epsilon, create_graph=True)
        return (relevance.sum(1).pow(2) * weights).sum()

    x = x0.clone().requires_grad_(True)
    checks = [(model[1].weight, (1, 0, 0, 2)), (model[2].weight, (1,)), (model[2].bias, (2,))]
    checks += [(model[4].weight, (3, 1, 2, 0)), (model[8].weight, (1, 7))]
    grads = torch.autograd.grad(value(x), [x] + [p for p, _ in checks])
    h = 1e-6
    for index in [(0, 0, 1, 2), (1, 0, 3, 3), (0, 0, 5, 0)]:
        up, down = x0.clone(), x0.clone()
        up[index] += h
        down[index] -= h
        fd = (value(up) - value(down)).item() / (2 * h)
        assert grads[0][index].item() == pytest.approx(fd, rel=1e-5, abs=1e-9)
    for (param, index), grad in zip(checks, grads[1:], strict=True):
        with torch.no_grad():
            param[index] += h
            up = value(x0).item()
            param[index] -= 2 * h
            down = value(x0).item()
            param[index] += h
        assert grad[index].item() == pytest.approx((up - down) / (2 * h), rel=1e-5, abs=1e-9)


def test_zennit_own_second_order_misses_terms_that_ours_keeps():
    """Why robust_train.explain._lrp_rules exists: zennit 0.5.1's `Gradient(create_graph=True)`
    detaches the modified weights and drops the top layer's 1/z dependence, so the gradient of
    a function of its map is wrong (here about 17x too small and of the wrong sign)."""
    from zennit.attribution import Gradient
    from zennit.composites import EpsilonPlus
    from zennit.rules import Pass

    model = _smooth_model()
    model[2] = nn.Identity()  # no BatchNorm: no canonizer needed on Zennit's side
    x, t = torch.rand(2, 1, 6, 6, dtype=torch.float64, requires_grad=True), torch.tensor([1, 3])
    with Gradient(model, EpsilonPlus(layer_map=[(Normalize, Pass())]), create_graph=True) as a:
        _, theirs = a(x, torch.eye(5, dtype=torch.float64)[t])
    ours = lrp(model, x, t, create_graph=True)
    torch.testing.assert_close(ours, theirs)  # the same map
    g_theirs, g_ours = (torch.autograd.grad(r.pow(2).sum(), x)[0] for r in (theirs, ours))
    assert (g_theirs - g_ours).abs().max() > 0.1 * g_ours.abs().max()


def _state(model: nn.Module) -> list:
    return [
        (
            id(m),
            m.training,
            dict(m._forward_hooks),
            dict(m._forward_pre_hooks),
            dict(m._backward_hooks),
            {k: id(v) for k, v in m._parameters.items()},
            sorted(m.__dict__.get("_modules", {})),
            "forward" in m.__dict__,
        )
        for m in model.modules()
    ]


@pytest.mark.parametrize("train", [True, False])
def test_nothing_outlives_the_call(train):
    """No hook, canonizer attribute or swapped parameter is left, modes are kept, and a plain
    backward afterwards is the plain gradient (also after an error inside the call)."""
    model = ResNet18CIFAR(width=4, in_channels=1).train(train)
    randomize_batchnorms(model)
    before = [p.detach().clone() for p in model.parameters()]
    state = _state(model)
    x = torch.rand(2, 1, 32, 32, requires_grad=True)
    relevance = lrp(
        model, x, torch.tensor([1, 2]), composite="epsilon_gamma_box", create_graph=True
    )
    assert relevance.requires_grad and _state(model) == state
    with pytest.raises(ValueError, match="target"):
        lrp(model, x, torch.tensor([1, 20]))
    assert _state(model) == state
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    model.eval()
    torch.testing.assert_close(
        torch.autograd.grad(model(x)[:, 1].sum(), x)[0][:1],
        saliency(model, x, torch.tensor([1, 1]))[:1],
    )


def test_composite_and_options_are_validated():
    model, x, t = TinyCNN().eval(), torch.rand(1, 1, 8, 8), torch.tensor([0])
    with pytest.raises(ValueError, match=r"`composite` 'zplus'.*epsilon_plus"):
        lrp(model, x, t, composite="zplus")
    with pytest.raises(ValueError, match="epsilon"):
        lrp(model, x, t, epsilon=-1.0)
    with pytest.raises(TypeError, match="gamma"):
        lrp(model, x, t, gamma="big")
    bound = get_explainer("lrp", composite="alpha2_beta1")
    assert importance_map(bound(model, x, t)).shape == (1, 8, 8)
