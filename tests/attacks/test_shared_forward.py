"""The attack's label check reuses the explainer's forward of the iterate when there is one (one
forward of the original model per step for saliency), and equals a separate no-grad forward."""

import torch
from torch import nn

from robust_train.attacks import _loop, fragility_attack
from robust_train.attacks.fragility import _context
from robust_train.explain import get_explainer


class Counting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.net(x)


def test_saliency_step_forwards_the_model_once() -> None:
    torch.manual_seed(0)
    model, x = Counting(), torch.rand(5, 1, 4, 4)
    target = model(x).argmax(1)
    counts = []
    for n_steps in (2, 5):
        model.calls = 0
        fragility_attack(model, x, target, epsilon=0.1, n_steps=n_steps, k=4, seed=0)
        counts.append(model.calls)
    assert counts[1] - counts[0] == 3  # one forward per step: the map's, which gives the label


def test_logits_equal_a_separate_forward_for_every_explainer() -> None:
    torch.manual_seed(1)
    model, x = Counting().eval(), torch.rand(6, 1, 4, 4)
    target = model(x).argmax(1)
    for explainer in ("saliency", "input_x_gradient", get_explainer("integrated_gradients")):
        ctx = _context(
            model,
            x,
            target,
            explainer=explainer,
            objective="topk",
            epsilon=0.1,
            step_size=None,
            n_steps=1,
            k=4,
            target_region=None,
            n_restarts=1,
            surrogate_beta=10.0,
            measure_k=None,
            generator=None,
            seed=0,
            progress=False,
            internal_batch_size=4,
        )
        logits, maps = _loop.forward_and_maps(ctx, x)
        with torch.no_grad():
            assert torch.allclose(logits, model(x), atol=1e-6)
        assert not logits.requires_grad and maps.shape == (6, 4, 4)
