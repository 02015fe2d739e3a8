"""The composed penalty: equal to its terms computed one by one (and to RobustClassifier's loss
with the same terms in a list, batch fractions included), the cycle schedule's mean, what it
declares, its refusals, and a config that names it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train import RobustClassifier
from robust_train.regularizers import PENALTIES, get_penalty
from robust_train.regularizers.composed import ComposedPenalty


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.Softplus(), nn.Linear(8, 3))


def data(b: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.rand(b, 1, 4, 4, generator=g), torch.randint(0, 3, (b,), generator=g)


SPECS = [
    {"penalty": "gradnorm", "weight": 0.5},
    {"penalty": "smoothness", "weight": 2.0, "radius": 0.1, "distance": "cosine", "seed": 4},
]


def test_the_sum_of_its_terms_computed_one_by_one():
    model, (x, y) = net(), data()
    value = ComposedPenalty(terms=SPECS)(model, x, y)
    parts = [
        get_penalty(s["penalty"], **{k: v for k, v in s.items() if k != "penalty"}) for s in SPECS
    ]
    expected = sum(p.weight * p(model, x, y) for p in parts)
    assert value.shape == (8,)
    torch.testing.assert_close(value, expected)


def test_a_terms_own_batch_fraction_keeps_the_loss_of_the_terms_given_one_by_one():
    """Composed and RobustClassifier(penalties=[...]) optimise the same loss (and gradient)."""
    specs = [
        {"penalty": "gradnorm", "weight": 0.5, "batch_fraction": 0.25},
        {"penalty": "smoothness", "weight": 2.0, "radius": 0.1, "batch_fraction": 0.5, "seed": 4},
    ]
    x, y = data()
    composed = RobustClassifier(net(), [ComposedPenalty(terms=specs)])
    listed = RobustClassifier(
        net(),
        [
            get_penalty(s["penalty"], **{k: v for k, v in s.items() if k != "penalty"})
            for s in specs
        ],
    )
    losses = []
    for module in (composed, listed):
        _, _, _, loss = module._loss_parts(x, y, 1.0)
        grads = torch.autograd.grad(loss, list(module.model.parameters()))
        losses.append((loss, grads))
    torch.testing.assert_close(losses[0][0], losses[1][0])
    for a, b in zip(losses[0][1], losses[1][1], strict=True):
        torch.testing.assert_close(a, b)


def test_the_composed_batch_fraction_gives_every_term_the_same_rows():
    model, (x, y) = net(), data()
    term = ComposedPenalty(terms=[{"penalty": "gradnorm"}], batch_fraction=0.5)
    value = term(model, x, y)
    alone = get_penalty("gradnorm")(model, x[:4], y[:4])
    torch.testing.assert_close(value, alone)


def test_the_cycle_runs_one_term_per_call_and_keeps_the_mean():
    model, (x, y) = net(), data()
    deterministic = [{"penalty": "gradnorm", "weight": 0.5}, {"penalty": "gradnorm", "weight": 3.0}]
    full = ComposedPenalty(terms=deterministic)(model, x, y)
    cycle = ComposedPenalty(terms=deterministic, schedule="cycle")
    calls = [cycle(model, x, y) for _ in range(4)]
    torch.testing.assert_close(calls[0], 2 * 0.5 * get_penalty("gradnorm")(model, x, y))
    torch.testing.assert_close(calls[1], 2 * 3.0 * get_penalty("gradnorm")(model, x, y))
    torch.testing.assert_close((calls[0] + calls[1]) / 2, full)
    torch.testing.assert_close(calls[2], calls[0])
    assert "schedule='cycle'" in repr(cycle)


def test_what_it_declares_follows_its_terms():
    light = ComposedPenalty(terms=[{"penalty": "curvature"}])
    heavy = ComposedPenalty(terms=[{"penalty": "curvature"}, {"penalty": "gradnorm"}])
    assert heavy.double_backprop and heavy.needs_input_grad
    assert light.double_backprop is False and light.full_precision
    assert PENALTIES["composed"] is ComposedPenalty


def test_equal_names_are_told_apart_and_seeds_follow_the_composed_seed():
    term = ComposedPenalty(seed=7, terms=[{"penalty": "smoothness"}, {"penalty": "smoothness"}])
    assert [t.name for t in term.members] == ["smoothness0", "smoothness1"]
    first = torch.Generator().manual_seed(7)
    assert torch.equal(term.members[0].generator.get_state(), first.get_state())


@pytest.mark.parametrize(
    ("terms", "error", "match"),
    [
        ([], ValueError, "non-empty list"),
        ((), ValueError, "non-empty list"),
        ({"penalty": "gradnorm"}, ValueError, "non-empty list"),
        ([{"weight": 1.0}], ValueError, r"terms\[0\]` must name its penalty"),
        ([3], TypeError, r"terms\[0\]` must be a PenaltyTerm"),
        ([{"penalty": "nope"}], ValueError, "nope"),
        ([{"penalty": "adversarial"}], ValueError, "replaces the task loss"),
        ([{"penalty": "gradnorm", "weight": -1.0}], ValueError, "weight"),
    ],
)
def test_bad_terms_fail_at_construction(terms, error, match):
    with pytest.raises(error, match=match):
        ComposedPenalty(terms=terms)


def test_a_bad_schedule_fails_at_construction():
    with pytest.raises(ValueError, match="schedule"):
        ComposedPenalty(terms=[{"penalty": "gradnorm"}], schedule="random")


def test_a_config_names_it_with_its_terms(tmp_path):
    """The LightningCLI path: a YAML with the composed term and its terms as plain dicts."""
    import yaml

    from robust_train.app.lightning_cli import lightning_main

    config = {
        "trainer": {"max_epochs": 1, "limit_train_batches": 1, "limit_val_batches": 0,
                    "logger": False,
                    "enable_progress_bar": False, "enable_model_summary": False},
        "model": {
            "model": {"class_path": "robust_train.models.SmallCNN"},
            "penalties": [{"class_path": "robust_train.regularizers.composed.ComposedPenalty",
                           "init_args": {"weight": 0.5, "schedule": "cycle", "terms": SPECS}}],
        },
        "data": {"class_path": "robust_train.data.DigitsDataModule"},
    }  # fmt: skip
    path = tmp_path / "composed.yaml"
    path.write_text(yaml.safe_dump(config))
    cli = lightning_main(["--config", str(path), "--checkpoint_root", str(tmp_path)], run=False)
    (term,) = cli.model.terms  # type: ignore[attr-defined]
    assert isinstance(term, ComposedPenalty) and term.schedule == "cycle"
    assert [t.weight for t in term.members] == [0.5, 2.0]


def test_its_default_terms_are_the_gradient_family_and_deeplift():
    term = get_penalty("composed")
    assert [type(t).__name__ for t in term.members] == ["MultiMapSmoothness", "TopKMassPenalty"]
    assert term.members[1].options.explainer == "deeplift"
