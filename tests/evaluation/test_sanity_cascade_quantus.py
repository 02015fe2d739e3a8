"""Every point of the cascading randomisation (not only its end) against Quantus's MPRT: the
same layers in the same top-down order, and on Quantus's randomised network at each stage the
same rank correlation of the absolute maps."""

from __future__ import annotations

import pytest
import torch

from robust_train.evaluation.parts.sanity import randomization_similarity, randomized_states
from robust_train.explain import get_explainer
from robust_train.models import MNISTConvNet
from tests.support.quantus_refs import quantus_mprt


@pytest.mark.parametrize("explainer", ["saliency", "input_x_gradient"])
def test_each_stage_of_the_cascade_equals_quantus_mprt(explainer):
    pytest.importorskip("quantus")
    from quantus.helpers.model.pytorch_model import PyTorchModel

    torch.manual_seed(0)
    model = MNISTConvNet(channels=[4, 8], hidden=16).eval()
    x = torch.rand(5, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    y = model(x).argmax(1)
    explain = get_explainer(explainer)

    theirs = quantus_mprt(model, x, y, explain, last=False)
    stages = [name for name, _ in randomized_states(model, seed=7)]
    assert stages == [name for name in theirs if name != "original"]  # the same cascade
    wrapped = PyTorchModel(model=model, channel_first=True, softmax=False, device="cpu")
    seen = []
    for name, random_model in wrapped.get_random_layer_generator(order="top_down", seed=7):
        ours = randomization_similarity(model, random_model, x, y, explain, 10)
        expected = torch.tensor(theirs[name], dtype=torch.float32)
        torch.testing.assert_close(ours["random_weights_spearman"], expected, atol=1e-6, rtol=0)
        seen.append(name)
    assert seen == stages
