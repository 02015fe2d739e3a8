"""A penalty term that replaces the task loss (adversarial training, IG-SUM-NORM): the natural
cross-entropy is logged but contributes nothing to the optimised loss or its gradient."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from robust_train import RobustClassifier
from robust_train.regularizers import AdversarialTraining, ExplanationSmoothness
from tests.support.helpers import TinyCNN


def _grads(loss: torch.Tensor, model: torch.nn.Module) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, [p for p in model.parameters()], allow_unused=False))


def test_replacing_term_alone_optimises_only_its_own_value():
    torch.manual_seed(0)
    net = TinyCNN().eval()  # eval: no BatchNorm/Dropout state between the two passes
    term = AdversarialTraining(weight=0.7, epsilon=0.1, n_steps=2, step_size=0.05, seed=3)
    module = RobustClassifier(net, penalties=[term])
    x, y = torch.rand(6, 1, 8, 8), torch.tensor([0, 1, 2, 3, 4, 5])
    loss = module.training_step((x, y), 0)
    assert loss is not None
    fresh = AdversarialTraining(weight=0.7, epsilon=0.1, n_steps=2, step_size=0.05, seed=3)
    expected = 0.7 * fresh(net, x, y).mean()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    for got, want in zip(_grads(loss, net), _grads(expected, net), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_replacing_term_beside_a_penalty_keeps_the_penalty_and_drops_natural_ce():
    torch.manual_seed(0)
    net = TinyCNN().eval()
    adv = AdversarialTraining(weight=1.0, epsilon=0.1, n_steps=1, step_size=0.1, seed=1)
    smooth = ExplanationSmoothness(weight=0.5, radius=0.05, seed=2)
    module = RobustClassifier(net, penalties=[adv, smooth])
    x, y = torch.rand(4, 1, 8, 8), torch.tensor([0, 1, 2, 3])
    loss = module.training_step((x, y), 0)
    assert loss is not None
    adv2 = AdversarialTraining(weight=1.0, epsilon=0.1, n_steps=1, step_size=0.1, seed=1)
    smooth2 = ExplanationSmoothness(weight=0.5, radius=0.05, seed=2)
    xg = x.clone().requires_grad_(True)
    logits = net(xg)
    expected = adv2(net, xg, y).mean() + 0.5 * smooth2(net, xg, y, logits).mean()
    natural = F.cross_entropy(logits, y)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    assert (
        abs(float(loss.detach()) - float((expected + natural).detach())) > 1e-3
    )  # the natural CE is not in it
