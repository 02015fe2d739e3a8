"""The attack's label check reuses the explainer's forward of the iterate when there is one (one
forward of the original model per step for saliency, beside the forward on the softplus
surrogate that gives the direction), and equals a separate no-grad forward."""

import torch
from torch import nn

from robust_train.attacks import AttackGoal, AttackOptions, _loop, fragility_attack
from robust_train.attacks.fragility import _context
from robust_train.explain import get_explainer
from robust_train.models.softplus import smoothing_active


class Counting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += not smoothing_active()  # forwards of the original model only
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
            goal=AttackGoal(explainer, "topk"),
            generator=None,
            seed=0,
            progress=False,
            options=AttackOptions(epsilon=0.1, n_steps=1, k=4, internal_batch_size=4),
        )
        logits, maps = _loop.forward_and_maps(ctx, x)
        with torch.no_grad():
            assert torch.allclose(logits, model(x), atol=1e-6)
        assert not logits.requires_grad and maps.shape == (6, 4, 4)


def test_integrated_gradients_step_takes_the_label_from_its_path() -> None:
    # the default IG (trapezoid, zero baseline) forwards the iterate as its alpha = 1 path step;
    # the small batch fits one path chunk, so a step forwards the original model once
    torch.manual_seed(0)
    model, x = Counting(), torch.rand(5, 1, 4, 4)
    target = model(x).argmax(1)
    explainer = get_explainer("integrated_gradients", n_steps=4)
    counts = []
    for n_steps in (2, 5):
        model.calls = 0
        fragility_attack(
            model, x, target, explainer=explainer, epsilon=0.1, n_steps=n_steps, k=4, seed=0
        )
        counts.append(model.calls)
    assert counts[1] - counts[0] == 3


def _logits_seen(rows: torch.Tensor, inputs: torch.Tensor, model: nn.Module):
    seen = _loop._LogitsOf(rows)
    seen(model, (inputs,), model(inputs))
    return seen.logits


def test_logits_hook_matches_only_a_whole_equal_block() -> None:
    torch.manual_seed(2)
    model = Counting().eval()
    rows, other = torch.rand(3, 1, 4, 4), torch.rand(3, 1, 4, 4)
    with torch.no_grad():
        expected = model(rows)
        for inputs in (rows, torch.cat([other, rows]), torch.cat([rows, other, other])):
            assert torch.allclose(_logits_seen(rows, inputs, model), expected, atol=1e-6)
        shifted = torch.cat([other[:1], rows, other[:2]])  # equal rows, not on a block boundary
        assert _logits_seen(rows, shifted, model) is None
        assert _logits_seen(rows, torch.cat([other, rows[:2]]), model) is None  # not whole blocks
        assert _logits_seen(rows, torch.cat([other, rows + 1e-7]), model) is None


def _attack_fields(result) -> list[torch.Tensor]:
    return [
        result.adversarial,
        result.attacked_map,
        result.label_kept,
        result.n_label_changes,
        result.topk_intersection,
        result.spearman,
    ]


def test_integrated_gradients_attack_equals_the_attack_with_a_separate_label_forward(
    monkeypatch,
) -> None:
    # reference: the label check by its own no-grad forward (a hook that never matches)
    torch.manual_seed(3)
    model, x = Counting().eval(), torch.rand(6, 1, 4, 4)
    target = model(x).argmax(1)
    kw = dict(epsilon=0.2, step_size=0.05, n_steps=6, k=4, seed=0, internal_batch_size=4)
    for explainer in (
        get_explainer("integrated_gradients", n_steps=5),
        get_explainer("integrated_gradients", n_steps=5, method="riemann_left", baseline=0.5),
    ):
        ours = fragility_attack(model, x, target, explainer=explainer, **kw)
        with monkeypatch.context() as patch:
            patch.setattr(_loop._LogitsOf, "__call__", lambda self, module, args, output: None)
            reference = fragility_attack(model, x, target, explainer=explainer, **kw)
        for a, b in zip(_attack_fields(ours), _attack_fields(reference), strict=True):
            assert torch.allclose(a.double(), b.double(), equal_nan=True)
