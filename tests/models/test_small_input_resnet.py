"""SmallInputResNet: the three stems' resolutions on 28x28 digits, refusals, config round trip,
and LRP (equal to Zennit's with its ResNet canonizer) and DeepLIFT (complete) on it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.explain import deeplift, lrp
from robust_train.explain.lrp import pixel_bounds
from robust_train.models import SmallInputResNet, build_model, get_model, model_config
from robust_train.models.small_input_resnet import STEMS
from tests.reference.lrp_reference import randomize_batchnorms, zennit_lrp


def _layer4_side(net: nn.Module) -> int:
    seen = []
    handle = net.backbone.layer4.register_forward_hook(lambda m, i, o: seen.append(o.shape[-1]))
    with torch.no_grad():
        net(torch.rand(1, 1, 28, 28))
    handle.remove()
    return seen[0]


@pytest.mark.parametrize(("stem", "side", "kernel"), [("torchvision", 1, 7), ("3x3_pool", 2, 3),
                                                      ("3x3", 4, 3)])  # fmt: skip
def test_stems_set_the_resolution_of_the_last_stage(stem, side, kernel):
    net = SmallInputResNet("resnet18", num_classes=10, in_channels=1, stem=stem).eval()
    assert net.backbone.conv1.kernel_size == (kernel, kernel)
    assert net.backbone.conv1.stride == ((2, 2) if stem == "torchvision" else (1, 1))
    assert isinstance(net.backbone.maxpool, nn.Identity) == (stem == "3x3")
    assert _layer4_side(net) == side
    assert net(torch.rand(2, 1, 28, 28)).shape == (2, 10)


def test_refuses_an_unknown_stem_and_a_model_without_a_resnet_stem():
    with pytest.raises(ValueError, match="stem.*conv5"):
        SmallInputResNet(stem="conv5")
    with pytest.raises(ValueError, match="'squeezenet1_1'.*ResNet-family"):
        SmallInputResNet("squeezenet1_1")
    assert set(STEMS) == {"torchvision", "3x3_pool", "3x3"}


def test_config_round_trip_and_registry():
    net = get_model("resnet_small_input", stem="3x3")  # name: resnet18 by default
    rebuilt = build_model(model_config(net))
    assert type(rebuilt) is SmallInputResNet and rebuilt.stem == "3x3"
    rebuilt.load_state_dict(net.state_dict())
    x = torch.rand(2, 1, 28, 28)
    torch.testing.assert_close(rebuilt.eval()(x), net.eval()(x))


@pytest.mark.parametrize(
    "composite", ["epsilon_plus", pytest.param("epsilon_gamma_box", marks=pytest.mark.slow)]
)
def test_lrp_equals_zennit_with_merged_batchnorms_and_residual_sums(composite):
    torch.manual_seed(0)
    model = randomize_batchnorms(SmallInputResNet(stem="3x3_pool")).eval()
    x, t = torch.rand(2, 1, 28, 28), torch.tensor([1, 7])
    low, high = pixel_bounds(model, 3)
    ours = lrp(model, x, t, composite=composite)
    theirs = zennit_lrp(
        model, x, t, composite, "resnet", low[..., None, None], high[..., None, None]
    )
    scale = float(theirs.abs().max())
    assert scale > 0
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5 * scale)


def test_deeplift_is_complete_through_residual_sums_and_the_stem_pool():
    torch.manual_seed(0)
    model = randomize_batchnorms(SmallInputResNet(stem="3x3_pool")).eval()
    x, t = torch.rand(2, 1, 28, 28), torch.tensor([1, 4])
    with torch.no_grad():
        gap = (model(x) - model(torch.zeros_like(x))).gather(1, t[:, None]).squeeze(1)
    total = deeplift(model, x, t).sum(dim=(1, 2, 3))
    torch.testing.assert_close(total, gap, atol=1e-5, rtol=1e-4)
