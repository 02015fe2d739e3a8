"""VGGBN: layout, config round trip, and the explainers on it: LRP equal to Zennit's (BatchNorm
merged into each convolution), DeepLIFT complete and equal to Captum's where Captum's rules are
the project's, Grad-CAM's default layer, softplus reaching every ReLU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.explain import deeplift, lrp
from robust_train.explain.lrp import pixel_bounds
from robust_train.models import VGGBN, build_model, count_relus, get_model, model_config, softplus
from tests.reference.lrp_reference import randomize_batchnorms, zennit_lrp


def captum_deeplift(model, x, t, baseline):
    import warnings

    from captum.attr import DeepLift

    enabled = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)  # Captum's max-pool rule calls max_unpool2d
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return DeepLift(model).attribute(x, baselines=baseline, target=t)
    finally:
        torch.use_deterministic_algorithms(enabled)


def small(**kwargs):
    torch.manual_seed(0)
    return VGGBN(stages=((8, 8), (16,)), hidden=16, **kwargs)


def test_layout_conv_bn_relu_stages_closed_by_pools():
    net = VGGBN()
    kinds = [type(m).__name__ for m in net.features]
    assert kinds == ["Conv2d", "BatchNorm2d", "ReLU"] * 2 + ["MaxPool2d"] + [
        "Conv2d",
        "BatchNorm2d",
        "ReLU",
    ] * 2 + ["MaxPool2d"]
    assert all(m.bias is None for m in net.features if isinstance(m, nn.Conv2d))
    assert count_relus(net) == 5
    assert net(torch.rand(2, 1, 28, 28)).shape == (2, 10)
    assert net.hidden[1].in_features == 64 * 7 * 7


def test_config_round_trip_and_registry():
    net = get_model("vgg_bn", stages=[[4], [8]], hidden=8, mean=0.1, std=0.3)
    randomize_batchnorms(net)
    rebuilt = build_model(model_config(net))
    rebuilt.load_state_dict(net.state_dict())
    x = torch.rand(3, 1, 28, 28)
    torch.testing.assert_close(rebuilt.eval()(x), net.eval()(x))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"stages": []}, "stages"),
        ({"stages": [[8], []]}, r"stages\[1\]"),
        ({"stages": [[8, 0]]}, r"stages\[0\].*0"),
        ({"input_size": 30}, "input_size.*30.*4"),
        ({"hidden": 0}, "hidden.*0"),
        ({"dropout": 2.0}, "dropout.*2"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        VGGBN(**kwargs)


@pytest.mark.parametrize("composite", ["epsilon_plus", "epsilon_gamma_box", "alpha2_beta1"])
def test_lrp_equals_zennit_with_batchnorm_merged(composite):
    model = randomize_batchnorms(small(mean=0.13, std=0.31)).eval()
    x, t = torch.rand(2, 1, 28, 28), torch.tensor([1, 7])
    low, high = pixel_bounds(model, 1)
    ours = lrp(model, x, t, composite=composite)
    theirs = zennit_lrp(
        model, x, t, composite, "sequential", low[..., None, None], high[..., None, None]
    )
    scale = float(theirs.abs().max())
    assert scale > 0
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5 * scale)


def test_deeplift_is_complete_and_equals_captum_under_captums_max_pool_rule():
    """A ReLU module feeds each max-pool: Captum then computes the gradient rule there (not
    summation-to-delta); the project's default rescale rule is complete."""
    model = randomize_batchnorms(small()).eval()
    x, t = torch.rand(3, 1, 28, 28), torch.tensor([1, 4, 7])
    base = torch.zeros_like(x)
    with torch.no_grad():
        gap = (model(x) - model(base)).gather(1, t[:, None]).squeeze(1)
    total = deeplift(model, x, t).sum(dim=(1, 2, 3))
    torch.testing.assert_close(total, gap, atol=1e-6, rtol=1e-4)
    ref = captum_deeplift(model, x, t, base)
    ours = deeplift(model, x, t, maxpool="gradient")
    torch.testing.assert_close(ours, ref, atol=1e-5 * float(ref.detach().abs().max()), rtol=0)


def test_softplus_swaps_every_relu():
    net = softplus(small(), beta=2.0)
    assert count_relus(net) == 0
    assert sum(isinstance(m, nn.Softplus) for m in net.modules()) == 4
