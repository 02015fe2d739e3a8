"""Grad-CAM: equal to Captum's LayerGradCam + bilinear interpolation, layer by name at call time,
in-place ReLUs after the layer, hooks removed, clear errors, differentiable."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torchvision
from torch import nn

from robust_train.explain import explainer_spec, grad_cam, importance_map
from robust_train.explain.layers import find_layer
from robust_train.explain.similarity import topk_intersection
from robust_train.models import MNISTConvNet, ResNet18CIFAR, SmallCNN, TorchvisionClassifier
from tests.support.helpers import TinyCNN, random_torchvision


def captum_grad_cam(model, x, t, layer_name):
    from captum.attr import LayerAttribution, LayerGradCam

    layer = dict(model.named_modules())[layer_name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        attr = LayerGradCam(model, layer).attribute(x, t, relu_attributions=True)
    return LayerAttribution.interpolate(attr, tuple(x.shape[-2:]), "bilinear")


MODELS = {
    "mnist_convnet_28": (lambda: MNISTConvNet(channels=(8, 16), hidden=32), 1, 28),
    "small_cnn_64": (lambda: SmallCNN(input_size=64, width=8, batchnorm=True), 1, 64),
    "resnet18_cifar_64": (lambda: ResNet18CIFAR(), 3, 64),
    "torchvision_classifier_64": (lambda: TorchvisionClassifier("resnet18", num_classes=10), 3, 64),
    "resnet50_64": (lambda: random_torchvision("resnet50"), 3, 64),
    "vgg11_bn_64": (lambda: random_torchvision("vgg11_bn"), 3, 64),
    "vgg11_inplace_relu_64": (lambda: random_torchvision("vgg11"), 3, 64),
    "densenet121_64": (lambda: random_torchvision("densenet121"), 3, 64),
    "mobilenet_v3_small_64": (lambda: random_torchvision("mobilenet_v3_small"), 3, 64),
}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("layer", ["default", "first_conv"])
def test_equals_captum_layer_grad_cam_interpolated(name, layer):
    """Float32 CPU: equal to Captum within atol 1e-6 + rtol 1e-4 of the map's largest value (the
    same operations in the same order: 0 difference was measured on every model here)."""
    build, channels, size = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    x, t = torch.rand(2, channels, size, size), torch.tensor([1, 4])
    layer_name = find_layer(model, None)[0] if layer == "default" else _first_conv(model)
    ours = grad_cam(model, x, t, layer=None if layer == "default" else layer_name)
    ref = captum_grad_cam(model, x, t, layer_name)
    assert ours.shape == (2, 1, size, size) and bool((ours >= 0).all())
    scale = float(ref.detach().abs().max())
    torch.testing.assert_close(ours, ref, atol=1e-6 + 1e-4 * scale, rtol=0)
    if layer == "first_conv":  # the full-resolution layer gives a map that is not all zero
        assert scale > 0


def _first_conv(model):
    return next(n for n, m in model.named_modules() if isinstance(m, nn.Conv2d))


def test_default_layer_is_the_last_convolutional_blocks_rectified_output():
    """The activation after the last Conv2d (the pool right after it when there is one), or the
    block holding that Conv2d when the block's forward is code (tests/explain/
    test_grad_cam_default_layer.py checks the rule on more models and by fidelity)."""
    assert find_layer(MNISTConvNet(), None)[0] == "features.5"  # Conv, ReLU, MaxPool
    assert find_layer(torchvision.models.resnet18(), None)[0] == "layer4.1"
    assert find_layer(TinyCNN(), None)[0] == "net.3"  # the ReLU; an adaptive pool follows


class _SlowGradCam:
    """Grad-CAM from the paper, written out on a Sequential split at the layer (no hooks)."""

    def __call__(self, head, tail, x, t):
        activation = head(x)
        logits = tail(activation)
        (grads,) = torch.autograd.grad(logits.gather(1, t[:, None]).sum(), activation)
        weights = grads.mean(dim=(2, 3), keepdim=True)
        cam = torch.relu((weights * activation).sum(1, keepdim=True))
        return nn.functional.interpolate(cam, size=x.shape[-2:], mode="bilinear")


def test_in_place_relu_after_the_layer_does_not_overwrite_the_activation():
    """Conv2d -> ReLU(inplace=True) (VGG without BN): the recorded A is the conv's real output,
    negative values included; a hook that kept the output itself would see ReLU(A)."""
    torch.manual_seed(0)
    conv = nn.Conv2d(1, 6, 3, padding=1)
    tail = nn.Sequential(nn.ReLU(inplace=True), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(96, 3))
    model = nn.Sequential(conv, *tail).eval()
    x, t = torch.rand(3, 1, 8, 8), torch.tensor([0, 1, 2])
    ours = grad_cam(model, x, t, layer="0")
    head_copy, tail_copy = copy.deepcopy(conv), copy.deepcopy(tail)
    tail_copy[0].inplace = False
    expected = _SlowGradCam()(head_copy, tail_copy, x, t)
    torch.testing.assert_close(ours, expected, atol=1e-6, rtol=1e-5)
    naive = _SlowGradCam()(conv, nn.Sequential(nn.Identity(), *tail[1:]), x, t)  # A = ReLU(A)
    assert not torch.allclose(naive, expected, atol=1e-4)


def test_layer_is_looked_up_on_the_model_given_at_call_time():
    model = TinyCNN().eval()
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.net[2].weight.mul_(-1.0)
    x, t = torch.rand(2, 1, 8, 8), torch.tensor([0, 3])
    for layer in ("net.0", "net.2"):
        mine, theirs = grad_cam(model, x, t, layer=layer), grad_cam(other, x, t, layer=layer)
        torch.testing.assert_close(mine, captum_grad_cam(model, x, t, layer))
        torch.testing.assert_close(theirs, captum_grad_cam(other, x, t, layer))
        assert not torch.allclose(mine, theirs)
    assert all(not m._forward_hooks for m in (*model.modules(), *other.modules()))


def test_capabilities_are_registered():
    spec = explainer_spec("grad_cam")
    assert spec.layer and spec.differentiable and not spec.piecewise_constant


def test_bad_layers_raise_clear_errors_and_leave_no_hook():
    model = TinyCNN().eval()
    x, t = torch.rand(1, 1, 8, 8), torch.tensor([0])
    with pytest.raises(ValueError, match=r"`layer` 'net\.9' is not a module of TinyCNN.*'net\.0'"):
        grad_cam(model, x, t, layer="net.9")
    with pytest.raises(TypeError, match="`layer` must be a module name"):
        grad_cam(model, x, t, layer=2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"returned shape \(1, 10\).*\(B=1, K, h, w\)"):
        grad_cam(model, x, t, layer="net.6")  # the Linear head
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    with pytest.raises(ValueError, match="Sequential has no nn.Conv2d.*pass `layer`"):
        grad_cam(mlp, x, t)
    shared = nn.Conv2d(1, 1, 3, padding=1)
    twice = nn.Sequential(shared, nn.ReLU(), shared, nn.Flatten(), nn.Linear(64, 3))
    with pytest.raises(ValueError, match="called 2 times in one forward"):
        grad_cam(twice, x, t, layer="0")
    assert all(not m._forward_hooks for m in (*model.modules(), *twice.modules()))


def test_sparse_maps_do_not_share_their_zero_pixels_in_top_k():
    """What the docstring says of ties: two maps with fewer than k positive pixels, on disjoint
    pixels, share nothing (the index tie-break used to fill both top-k sets with the same
    top-left zero pixels and scored this pair 0.75)."""
    a, b = torch.zeros(1, 8, 8), torch.zeros(1, 8, 8)
    a[0, 6, 6], b[0, 7, 7] = 1.0, 1.0
    assert float(topk_intersection(a, b, 4)) == 0.0
    assert float(topk_intersection(a, b, 1)) == 0.0
    assert float(topk_intersection(a, a * 3, 4)) == 1.0


def test_create_graph_map_matches_finite_differences():
    """d(sum w * map)/dx and /dweight through the Grad-CAM map (float64)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.Softplus(beta=3.0), nn.AvgPool2d(2),
        nn.Conv2d(4, 4, 3, padding=1), nn.Softplus(beta=3.0), nn.Flatten(), nn.Linear(64, 3),
    ).double().eval()  # fmt: skip
    x = torch.rand(2, 1, 8, 8, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([0, 2])
    w = torch.randn(2, 1, 8, 8, dtype=torch.float64)

    def value():
        return (w * grad_cam(model, x, t, layer="3", create_graph=True)).sum()

    weight = model[0].weight
    grad_x, grad_w = torch.autograd.grad(value(), [x, weight])
    for tensor, grad, index in [(x, grad_x, (0, 0, 3, 4)), (x, grad_x, (1, 0, 5, 2))] + [
        (weight, grad_w, (2, 0, 1, 1))
    ]:
        with torch.no_grad():
            tensor[index] += 1e-6
            up = value().item()
            tensor[index] -= 2e-6
            down = value().item()
            tensor[index] += 1e-6
        assert grad[index].item() == pytest.approx((up - down) / 2e-6, rel=1e-5, abs=1e-9)


@pytest.mark.slow
def test_224_smoke_resnet18_is_differentiable():
    model = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.rand(1, 3, 224, 224, requires_grad=True)
    cam = grad_cam(model, x, torch.tensor([3]), layer="layer4", create_graph=True)
    assert cam.shape == (1, 1, 224, 224)
    (grad,) = torch.autograd.grad(importance_map(cam).pow(2).sum(), x)
    assert torch.isfinite(grad).all()
