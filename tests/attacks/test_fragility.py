"""fragility_attack: reference equality, budget and label invariants, monotonicity, model state."""

from __future__ import annotations

import pytest
import torch

from robust_train.attacks import FragilityResult, fragility_attack
from robust_train.explain.gradient import saliency
from robust_train.models.softplus import softplus
from tests.reference.attacks_fragility_reference import reference_attack
from tests.support.helpers import SmoothMLP, TinyCNN

OBJECTIVES = ("topk", "mass_center", "targeted", "random_sign")


def _region(h: int = 8, w: int = 8) -> torch.Tensor:
    region = torch.zeros(1, h, w, dtype=torch.bool)
    region[:, :, : w // 2] = True
    return region


def _kwargs(objective: str) -> dict:
    return {"target_region": _region()} if objective == "targeted" else {}


def _attack(model, x, objective, **kwargs) -> FragilityResult:
    target = model(x).argmax(1)
    return fragility_attack(
        model, x, target, objective=objective, **{**_kwargs(objective), **kwargs}
    )


@pytest.mark.parametrize(
    "objective, model_cls", [("topk", SmoothMLP), ("topk", TinyCNN), ("mass_center", TinyCNN)]
)
def test_equals_per_sample_reference(objective, model_cls) -> None:
    model = model_cls().double().eval()
    x = torch.rand(3, 1, 8, 8, dtype=torch.float64)
    target = model(x).argmax(1)
    res = fragility_attack(
        model, x, target, objective=objective, epsilon=0.1, step_size=0.02, n_steps=6, k=8
    )
    surrogate = model if model_cls is SmoothMLP else softplus(model, 10.0)
    assert res.surrogate_beta == (None if model_cls is SmoothMLP else 10.0)
    for i in range(3):
        adv, score = reference_attack(
            model,
            surrogate,
            x[i],
            int(target[i]),
            objective=objective,
            epsilon=0.1,
            step_size=0.02,
            n_steps=6,
            k=8,
        )
        assert torch.allclose(res.adversarial[i], adv, atol=1e-10)
        got = res.topk_intersection[i] if objective == "topk" else res.center_shift[i]
        assert got.item() == pytest.approx(score, abs=1e-8)
    assert res.improved.any()  # the attack did move something


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_budget_range_and_label_invariants(objective) -> None:
    total_changes = 0
    for seed in range(4):
        model = TinyCNN(seed=seed, batchnorm=seed % 2 == 1).eval()
        x = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(seed))
        x[0] = 0.0  # pixels at the [0, 1] bounds must stay inside
        x[1] = 1.0
        eps = (0.05, 0.3, 0.6, 0.95)[seed]
        res = _attack(model, x, objective, epsilon=eps, n_steps=4, n_restarts=2, seed=seed)
        assert (res.adversarial - x).abs().max() <= eps + 1e-6
        assert res.adversarial.min() >= 0 and res.adversarial.max() <= 1
        clean_pred = model(x).argmax(1)
        adv_pred = model(res.adversarial).argmax(1)
        assert torch.equal(res.label_kept, adv_pred == clean_pred)
        assert res.label_kept.all()  # a label-changing iterate is never returned
        assert torch.equal(res.adversarial[~res.improved], x[~res.improved])
        total_changes += int(res.n_label_changes.sum())
    assert total_changes > 0  # large budgets did produce label-changing iterates, all rejected


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_more_steps_never_worse(objective) -> None:
    model = TinyCNN(seed=1).eval()
    x = torch.rand(8, 1, 8, 8)
    # with a fixed step (the default from 16 steps on: epsilon / 8) the first iterates do not
    # depend on n_steps
    short, long = (
        _attack(
            model, x, objective, epsilon=0.1, n_steps=n, n_restarts=2, seed=3, k=6, step_size=0.02
        )
        for n in (5, 10)
    )
    assert short.step_size == long.step_size
    if objective in ("topk", "random_sign"):
        worse = (long.topk_intersection > short.topk_intersection) | (
            (long.topk_intersection == short.topk_intersection) & (long.spearman > short.spearman)
        )
        assert not worse.any()
        assert (
            long.topk_intersection < short.topk_intersection
        ).any() or objective == "random_sign"
    elif objective == "mass_center":
        assert (long.center_shift >= short.center_shift).all()
        assert (long.center_shift > short.center_shift).any()
    else:
        assert (long.region_mass >= short.region_mass).all()
        assert (long.region_mass > short.region_mass).any()


def test_attack_beats_random_noise_on_trained_digits(trained_digits) -> None:
    model, x, y = trained_digits
    correct = model(x).argmax(1) == y
    xs, ys = x[correct][:48], y[correct][:48]
    runs = {
        obj: fragility_attack(model, xs, ys, objective=obj, epsilon=0.1, n_steps=50, k=8, seed=0)
        for obj in ("random_sign", "topk", "mass_center")
    }
    topk = {obj: r.topk_intersection.mean().item() for obj, r in runs.items()}
    shift = {obj: r.center_shift.mean().item() for obj, r in runs.items()}
    # measured: top-k intersection random 0.80, topk 0.56; center shift random 0.12, mass 0.48 px
    assert topk["topk"] < topk["random_sign"] - 0.12, topk
    assert topk["random_sign"] < 1.0  # noise alone moves the map a little
    assert shift["mass_center"] > 2.0 * shift["random_sign"], shift
    assert shift["mass_center"] > 0.3, shift
    assert runs["topk"].spearman.nanmean() < runs["random_sign"].spearman.nanmean()
    targeted = fragility_attack(
        model, xs, ys, objective="targeted", epsilon=0.1, n_steps=20, target_region=_region()
    )
    assert targeted.region_mass.mean() > targeted.clean_region_mass.mean() + 0.05


def test_model_state_grads_and_flags_untouched() -> None:
    model = TinyCNN(batchnorm=True, dropout=0.5).train()
    model.net[1].eval()  # a mixed state must come back exactly
    modes = [m.training for m in model.modules()]
    flags = [p.requires_grad for p in model.parameters()]
    running_mean = model.net[1].running_mean.clone()
    x = torch.rand(4, 1, 8, 8)
    res = fragility_attack(model, x, torch.tensor([0, 1, 2, 3]), epsilon=0.1, n_steps=3)
    assert [m.training for m in model.modules()] == modes
    assert [p.requires_grad for p in model.parameters()] == flags
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(model.net[1].running_mean, running_mean)
    assert not x.requires_grad and not res.adversarial.requires_grad
    assert not res.clean_map.requires_grad and not res.attacked_map.requires_grad


def test_batching_explainer_names_and_seeds_agree() -> None:
    model = SmoothMLP().double().eval()
    x = torch.rand(5, 1, 8, 8, dtype=torch.float64)
    target = torch.tensor([0, 1, 2, 3, 4])
    base = fragility_attack(model, x, target, epsilon=0.1, n_steps=4, n_restarts=2, seed=7)
    by_name = fragility_attack(
        model,
        x,
        target,
        explainer=saliency,
        epsilon=0.1,
        n_steps=4,
        n_restarts=2,
        generator=torch.Generator().manual_seed(7),
        internal_batch_size=2,
    )
    assert torch.allclose(base.adversarial, by_name.adversarial, atol=1e-12)
    assert base.explainer == by_name.explainer == "saliency"
    other = fragility_attack(model, x, target, epsilon=0.1, n_steps=4, n_restarts=2, seed=8)
    assert not torch.allclose(base.adversarial, other.adversarial)  # restarts are random
    assert base.k == 8 and base.measure_k == 8 and base.step_size == pytest.approx(2 * 0.1 / 4)
    many = fragility_attack(model, x, target, epsilon=0.1, n_steps=16, seed=7)
    assert many.step_size == pytest.approx(0.1 / 8)  # the default from 16 steps on


@pytest.mark.parametrize(
    "name, bound",
    [
        ("input_x_gradient", {}),
        ("integrated_gradients", {"n_steps": 4}),
        ("smoothgrad", {"n_samples": 3, "seed": 0}),
    ],
)
def test_other_explainers_can_be_attacked(name, bound) -> None:
    from robust_train.explain import get_explainer

    model = TinyCNN().eval()
    x = torch.rand(3, 1, 8, 8)
    explainer = get_explainer(name, **bound) if bound else name
    res = fragility_attack(
        model, x, model(x).argmax(1), explainer=explainer, epsilon=0.1, n_steps=3, progress=True
    )
    assert res.explainer == name and res.improved.any()
    assert (res.adversarial - x).abs().max() <= 0.1 + 1e-6


class _FunctionalReLU(torch.nn.Module):
    """ReLU called in forward: no module to swap; the torch.fx rewrite finds the call."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.out = torch.nn.Linear(64, 16), torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.nn.functional.relu(self.hidden(x.flatten(1))))


def test_functional_relu_is_smoothed_and_attacked() -> None:
    """a model calling F.relu used to score a perfect top-k intersection 1.0
    because the direction was zero; the surrogate now rewrites the call and the attack moves."""
    torch.manual_seed(0)
    x = torch.rand(4, 1, 8, 8)
    model = _FunctionalReLU()
    res = fragility_attack(model, x, model(x).argmax(1), epsilon=0.1, n_steps=5, k=8)
    assert res.surrogate_beta == 10.0 and bool(res.measured.all())
    assert res.improved.any() and bool((res.topk_intersection < 1).any())


def test_maps_that_cannot_be_differentiated_raise() -> None:
    x = torch.rand(2, 1, 8, 8)
    linear = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    with pytest.raises(ValueError, match="does not depend on the input"):
        fragility_attack(linear, x, torch.tensor([0, 1]), epsilon=0.1, n_steps=2)

    def detached(model, inputs, target, *, create_graph=False):
        return saliency(model, inputs, target).detach()

    with pytest.raises(ValueError, match="'detached'.*not a differentiable"):
        fragility_attack(TinyCNN(), x, torch.tensor([0, 1]), explainer=detached, epsilon=0.1)
    # random signs need no gradient: a detaching explainer is fine there
    res = fragility_attack(
        TinyCNN(),
        x,
        torch.tensor([0, 1]),
        explainer=detached,
        objective="random_sign",
        epsilon=0.1,
        n_steps=2,
    )
    assert res.explainer == "detached"


def test_concatenate_results() -> None:
    model = TinyCNN().eval()
    a = _attack(model, torch.rand(2, 1, 8, 8), "topk", epsilon=0.1, n_steps=2)
    b = _attack(model, torch.rand(3, 1, 8, 8), "topk", epsilon=0.1, n_steps=2)
    both = FragilityResult.concatenate([a, b])
    assert len(both) == 5 and torch.equal(both.spearman[2:], b.spearman)
    c = _attack(model, torch.rand(1, 1, 8, 8), "topk", epsilon=0.2, n_steps=2)
    with pytest.raises(ValueError, match="epsilon"):
        FragilityResult.concatenate([a, c])
