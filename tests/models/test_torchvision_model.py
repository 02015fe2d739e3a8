"""TorchvisionClassifier: heads, ReLU exposure, channels, pretrained-weight loading (offline)."""

from __future__ import annotations

import socket

import pytest
import torch
import torchvision
from torch import nn

from robust_train.models import (
    ResNet18CIFAR,
    SmallCNN,
    TorchvisionClassifier,
    count_relus,
    get_model,
    softplus,
)
from robust_train.models.normalize import IMAGENET_MEAN, IMAGENET_STD
from robust_train.models.pretrained import hub_checkpoint_path, resolve_weights
from robust_train.models.torchvision_parts import adapt_first_conv, find_head

CHEAP_HEADS = [
    ("resnet18", "fc"),
    ("squeezenet1_1", "classifier.1"),
    ("mobilenet_v3_small", "classifier.3"),
    ("shufflenet_v2_x0_5", "fc"),
    ("mnasnet0_5", "classifier.1"),
    ("densenet121", "classifier"),
    ("efficientnet_b0", "classifier.1"),
    ("regnet_x_400mf", "fc"),
    ("googlenet", "fc"),
]


def _input_gradient_penalty(model: nn.Module, x: torch.Tensor) -> None:
    x = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(model(x).logsumexp(1).sum(), x, create_graph=True)
    grad.pow(2).sum().backward()


@pytest.mark.parametrize(("name", "head"), CHEAP_HEADS)
def test_head_is_replaced_and_double_backprop_runs(name, head):
    model = TorchvisionClassifier(name, num_classes=7).eval()
    assert find_head(model.backbone)[2] == head
    x = torch.rand(2, 3, 64, 64)
    assert model(x).shape == (2, 7)
    _input_gradient_penalty(model, x)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.backbone.parameters())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "head", "kwargs", "size"),
    [
        ("vit_b_16", "heads.head", {"model_kwargs": {"image_size": 32}}, 32),
        ("convnext_tiny", "classifier.2", {}, 32),
        ("swin_t", "head", {}, 64),
    ],
)
def test_attention_and_gelu_families(name, head, kwargs, size):
    model = TorchvisionClassifier(name, num_classes=3, **kwargs).eval()
    assert find_head(model.backbone)[2] == head
    _input_gradient_penalty(model, torch.rand(1, 3, size, size))  # ViT: math attention kernel


def test_densenet_forward_equals_torchvision_and_exposes_final_relu():
    model = TorchvisionClassifier("densenet121", num_classes=4).eval()
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), model.backbone(model.normalize(x)))  # F.relu path
    smooth = softplus(model, beta=1e4)
    assert count_relus(smooth) == 0 and isinstance(smooth.final_relu, nn.Softplus)


def test_googlenet_relu_modules_keep_outputs_and_state_dict_keys():
    model = TorchvisionClassifier("googlenet", num_classes=5).eval()
    reference = torchvision.models.googlenet(
        weights=None, num_classes=5, aux_logits=False, init_weights=False
    )
    reference.load_state_dict(model.backbone.state_dict())  # same keys after the BasicConv2d swap
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference.eval()(model.normalize(x)))
    assert count_relus(model) == 57 and count_relus(softplus(model, 10.0)) == 0


def test_mobilenet_v3_hardsigmoid_is_equal_and_twice_differentiable():
    model = TorchvisionClassifier("mobilenet_v3_small", num_classes=5).eval()
    reference = torchvision.models.mobilenet_v3_small(weights=None, num_classes=5).eval()
    reference.load_state_dict(model.backbone.state_dict())
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(model.normalize(x)))
    assert not any(isinstance(m, nn.Hardsigmoid) for m in model.modules())
    _input_gradient_penalty(model, x)


def test_gray_input_is_repeated_to_rgb():
    gray = TorchvisionClassifier("resnet18", num_classes=3, in_channels=1).eval()
    rgb = TorchvisionClassifier("resnet18", num_classes=3).eval()
    rgb.load_state_dict(gray.state_dict())
    x = torch.rand(2, 1, 32, 32)
    torch.testing.assert_close(gray(x), rgb(x.repeat(1, 3, 1, 1)))


def test_other_channel_counts_rebuild_the_stem_preserving_constant_response():
    stem = nn.Sequential(nn.Conv2d(3, 5, 3, padding=1))
    constant = torch.full((1, 3, 6, 6), 0.7)
    expected = stem(constant)
    adapt_first_conv(stem, 4)
    assert stem[0].in_channels == 4
    torch.testing.assert_close(stem(torch.full((1, 4, 6, 6), 0.7)), expected)
    model = TorchvisionClassifier("resnet18", num_classes=3, in_channels=4)
    assert model(torch.rand(2, 4, 32, 32)).shape == (2, 3) and model.normalize.mean.numel() == 4


def test_normalisation_comes_from_the_weights_without_downloading(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    model = TorchvisionClassifier("resnet18", weights="IMAGENET1K_V1", load_weights=False)
    preset = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.transforms()
    assert model.normalize.mean.tolist() == pytest.approx(preset.mean)
    assert TorchvisionClassifier("resnet18").normalize.std.tolist() == pytest.approx(IMAGENET_STD)
    assert IMAGENET_MEAN == pytest.approx(preset.mean)
    assert not any(tmp_path.rglob("*.pth"))


def test_resolve_weights():
    enum = torchvision.models.ResNet18_Weights
    assert resolve_weights("resnet18", "DEFAULT") is enum.DEFAULT
    assert resolve_weights("resnet18", "ResNet18_Weights.IMAGENET1K_V1") is enum.IMAGENET1K_V1
    assert resolve_weights("resnet18", None) is None
    with pytest.raises(ValueError, match="IMAGENET1K_V1"):
        resolve_weights("resnet18", "IMAGENET_V9")
    with pytest.raises(ValueError, match="resnet1800"):
        TorchvisionClassifier("resnet1800")


def _network_reachable() -> bool:
    try:
        socket.getaddrinfo("download.pytorch.org", 443)
        return True
    except OSError:
        return False


@pytest.mark.skipif(_network_reachable(), reason="needs to be offline (the download would succeed)")
def test_offline_download_error_names_folder_file_and_remedies(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    folder = tmp_path / "hub" / "checkpoints"
    with pytest.raises(RuntimeError) as info:
        TorchvisionClassifier("resnet18", num_classes=10, weights="DEFAULT")
    message = str(info.value)
    assert str(folder) in message and "resnet18-f37072fd.pth" in message
    assert "weights_path" in message and "place it at" in message
    assert (
        hub_checkpoint_path(torchvision.models.ResNet18_Weights.DEFAULT)
        == folder / "resnet18-f37072fd.pth"
    )


def test_file_placed_in_hub_folder_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    source = torchvision.models.resnet18(weights=None)
    target = hub_checkpoint_path(torchvision.models.ResNet18_Weights.DEFAULT)
    target.parent.mkdir(parents=True)
    torch.save(source.state_dict(), target)
    model = TorchvisionClassifier("resnet18", weights="DEFAULT")  # 1000 classes: keeps the head
    for key, value in source.state_dict().items():
        assert torch.equal(model.backbone.state_dict()[key], value), key


def test_weights_path_loads_a_saved_state_dict(tmp_path):
    source = torchvision.models.resnet18(weights=None)
    path = tmp_path / "resnet18.pth"
    torch.save(source.state_dict(), path)
    model = TorchvisionClassifier("resnet18", num_classes=7, weights_path=str(path))
    loaded = model.backbone.state_dict()
    for key, value in source.state_dict().items():
        if not key.startswith("fc."):
            assert torch.equal(loaded[key], value), key
    assert loaded["fc.weight"].shape == (7, 512)
    five = torchvision.models.resnet18(weights=None, num_classes=5)
    torch.save(five.state_dict(), path)
    same = TorchvisionClassifier("resnet18", num_classes=5, weights_path=str(path))
    assert torch.equal(same.backbone.fc.weight, five.fc.weight)


def test_weights_path_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.pth"):
        TorchvisionClassifier("resnet18", weights_path=str(tmp_path / "missing.pth"))
    path = tmp_path / "resnet34.pth"
    torch.save(torchvision.models.resnet34(weights=None).state_dict(), path)
    with pytest.raises(RuntimeError, match=r"unexpected keys \['layer1.2"):
        TorchvisionClassifier("resnet18", weights_path=str(path))


def test_get_model_registry():
    assert isinstance(get_model("small_cnn", width=4), SmallCNN)
    assert isinstance(get_model("resnet18_cifar", width=4), ResNet18CIFAR)
    model = get_model("squeezenet1_1", num_classes=3)
    assert isinstance(model, TorchvisionClassifier) and model.name == "squeezenet1_1"
    with pytest.raises(ValueError, match="small_cnn"):
        get_model("no_such_model")
