"""VGGBN's global-pool head: it averages (or, with "max", takes the maximum of) the last stage
over its positions before the fully connected layers (equal to the head computed by hand), so
the hidden layer's size no longer depends on the image size, the config round trip keeps it,
LRP still equals Zennit's through either pool, and a bad value is refused."""

from __future__ import annotations

import pytest
import torch

from robust_train.explain import deeplift, lrp
from robust_train.explain.lrp import pixel_bounds
from robust_train.models import VGGBN, build_model, model_config
from tests.reference.lrp_reference import randomize_batchnorms, zennit_lrp


def pooled(input_size: int = 16, head: bool | str = True) -> VGGBN:
    torch.manual_seed(0)
    net = VGGBN(in_channels=3, input_size=input_size, stages=((4,), (6,)), hidden=5,
                global_pool=head)  # fmt: skip
    return randomize_batchnorms(net).eval()


def test_head_is_the_average_of_the_last_stage():
    net, x = pooled(), torch.rand(3, 3, 16, 16)
    features = net.features(net.normalize(x))
    linear = net.hidden[2]
    by_hand = net.classifier(torch.relu(linear(features.mean(dim=(2, 3)))))
    torch.testing.assert_close(net(x), by_hand)
    assert linear.in_features == 6
    assert VGGBN(input_size=32, stages=((4,), (6,)), global_pool=True).hidden[2].in_features == 6
    assert VGGBN(input_size=32, stages=((4,), (6,))).hidden[1].in_features == 6 * 8 * 8


def test_config_round_trip_keeps_the_head():
    net = pooled()
    copy = build_model(model_config(net))
    copy.load_state_dict(net.state_dict())
    x = torch.rand(2, 3, 16, 16)
    torch.testing.assert_close(copy.eval()(x), net(x))


@pytest.mark.parametrize("head", [True, "max"])
def test_lrp_equals_zennit_through_the_head(head):
    net, x, t = pooled(head=head), torch.rand(2, 3, 16, 16), torch.tensor([1, 7])
    low, high = pixel_bounds(net, 3)
    ours = lrp(net, x, t, composite="epsilon_plus")
    theirs = zennit_lrp(
        net, x, t, "epsilon_plus", "sequential", low[..., None, None], high[..., None, None]
    )
    scale = float(theirs.abs().max())
    assert scale > 0
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5 * scale)


def test_bad_global_pool_is_refused():
    with pytest.raises(ValueError, match=r"global_pool.*'yes'"):
        VGGBN(global_pool="yes")


def test_max_head_is_the_maximum_of_the_last_stage():
    net, x = pooled(head="max"), torch.rand(3, 3, 16, 16)
    features = net.features(net.normalize(x))
    by_hand = net.classifier(torch.relu(net.hidden[2](features.amax(dim=(2, 3)))))
    torch.testing.assert_close(net(x), by_hand)
    assert isinstance(net.hidden[0], torch.nn.MaxPool2d)  # the max-pool rules of the explainers
    copy = build_model(model_config(net))
    copy.load_state_dict(net.state_dict())
    torch.testing.assert_close(copy.eval()(x), net(x))
    avg = VGGBN(input_size=16, stages=((4,),), global_pool="avg").hidden[0]
    assert isinstance(avg, torch.nn.AdaptiveAvgPool2d)  # "avg" is True's head


def test_deeplift_is_complete_through_the_max_head():
    net, x, t = pooled(head="max"), torch.rand(2, 3, 16, 16), torch.tensor([1, 7])
    base = torch.rand(2, 3, 16, 16)
    attributions = deeplift(net, x, t, baseline=base)
    with torch.no_grad():
        gap = (net(x) - net(base)).gather(1, t[:, None])[:, 0]
    torch.testing.assert_close(attributions.sum(dim=(1, 2, 3)), gap, rtol=1e-4, atol=1e-5)
