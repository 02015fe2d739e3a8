"""`random_sign` is noise at the budget (Ghorbani et al. 2019): x + eps * s, s uniform random signs,
clipped to [0, 1], the worst (lowest top-k intersection) of `noise_draws` label-keeping draws;
checked against a slow per-image loop written from that definition. The old random walk of small
sign steps is `random_walk`."""

from __future__ import annotations

import warnings

import pytest
import torch

from robust_train.attacks import fragility_attack
from robust_train.attacks._setup import restart_seeds
from robust_train.evaluation import MONITOR_DEFAULTS, PROTOCOLS, EvaluationSettings
from robust_train.explain import get_explainer, importance_map
from robust_train.explain.similarity import spearman_correlation, topk_intersection
from tests.support.helpers import TinyCNN


def reference_noise(model, explain, x, target, *, epsilon, draws, seed, k):
    """Per image: for each draw, x' = clip(x + eps * s, 0, 1) with that draw's signs; a draw whose
    predicted label differs from the clean one is skipped; keep the lowest top-k intersection
    (ties: lowest Spearman); the clean image (intersection 1) when no draw keeps the label.
    The signs are those of the attack's draws (one generator per draw, seeded up front), so the
    two can be compared image by image."""
    signs = []
    for s in restart_seeds(None, seed, draws):
        gen = torch.Generator().manual_seed(s)
        signs.append(torch.randn(x.shape, generator=gen).sign())
    out = []
    for i in range(len(x)):
        xi, ti = x[i : i + 1], target[i : i + 1]
        label = model(xi).argmax(1)
        clean = importance_map(explain(model, xi, ti)).detach()
        best = (1.0, 1.0)
        for s in signs:
            xa = (xi + epsilon * s[i : i + 1]).clamp(0, 1)
            if not torch.equal(model(xa).argmax(1), label):
                continue
            mapped = importance_map(explain(model, xa, ti)).detach()
            score = (
                float(topk_intersection(clean, mapped, k)),
                float(spearman_correlation(clean, mapped)),
            )
            best = min(best, score)
        out.append(best[0])
    return torch.tensor(out)


@pytest.mark.parametrize("explainer", ["saliency", "grad_cam"])
def test_equals_the_slow_reference_image_by_image(trained_digits, explainer) -> None:
    model, x, y = trained_digits
    keep = (model(x).argmax(1) == y).nonzero().squeeze(1)[:24]
    x, y = x[keep], y[keep]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a blank Grad-CAM map is unmeasured
        res = fragility_attack(  # the default noise_draws: 10
            model, x, y, explainer=explainer, objective="random_sign", epsilon=0.3, k=8, seed=3
        )
    ref = reference_noise(model, get_explainer(explainer), x, y, epsilon=0.3, draws=10, seed=3, k=8)
    measured = res.measured
    assert int(measured.sum()) >= 8
    torch.testing.assert_close(res.topk_intersection[measured], ref[measured], atol=1e-6, rtol=0)
    assert bool(res.label_kept.all())
    assert (res.n_restarts, res.n_steps, res.step_size) == (10, 1, 0.3)


def test_every_pixel_moves_by_the_budget_unless_the_image_range_clips_it(trained_digits) -> None:
    model, x, y = trained_digits
    keep = (model(x).argmax(1) == y).nonzero().squeeze(1)[:24]
    x, y = x[keep], y[keep]
    eps = 0.3
    res = fragility_attack(model, x, y, objective="random_sign", epsilon=eps, k=8, seed=0)
    moved = res.improved
    assert int(moved.sum()) >= 20
    adv, x0 = res.adversarial[moved], x[moved]
    up, down = (x0 + eps).clamp(0, 1), (x0 - eps).clamp(0, 1)
    on_a_corner = torch.isclose(adv, up, atol=1e-6) | torch.isclose(adv, down, atol=1e-6)
    assert bool(on_a_corner.all())
    # the random walk of 50 steps of 0.01 stays well inside the ball
    walk = fragility_attack(
        model, x, y, objective="random_walk", epsilon=eps, step_size=0.01, n_steps=50, k=8, seed=0
    )
    inside = (walk.adversarial - x).abs().flatten(1).mean(1)
    at_budget = (res.adversarial - x).abs().flatten(1).mean(1)
    assert float(inside[walk.improved].mean()) < 0.5 * float(at_budget[moved].mean())


def test_the_worst_of_more_draws_is_never_higher_and_the_noise_beats_the_walk(
    trained_digits,
) -> None:
    model, x, y = trained_digits
    keep = (model(x).argmax(1) == y).nonzero().squeeze(1)[:32]
    x, y = x[keep], y[keep]
    means = []
    previous = None
    for draws in (1, 4, 10):
        res = fragility_attack(
            model, x, y, objective="random_sign", epsilon=0.3, noise_draws=draws, k=8, seed=0
        )
        if previous is not None:
            assert bool((res.topk_intersection <= previous + 1e-7).all())
        previous = res.topk_intersection
        means.append(float(res.topk_intersection.mean()))
    assert means[2] < means[0]
    walk = fragility_attack(
        model, x, y, objective="random_walk", epsilon=0.3, step_size=0.01, n_steps=50, k=8, seed=0
    )
    assert means[2] < float(walk.topk_intersection.mean()) - 0.1


def test_noise_draws_is_a_checked_option_with_a_flag_and_defaults() -> None:
    with pytest.raises(ValueError, match="`noise_draws` must be > 0, got 0"):
        fragility_attack(
            TinyCNN(), torch.rand(2, 1, 8, 8), torch.tensor([0, 1]), objective="random_sign",
            noise_draws=0,
        )  # fmt: skip
    assert EvaluationSettings().noise_draws == 10 and PROTOCOLS["rar"].noise_draws == 10
    assert MONITOR_DEFAULTS["noise_draws"] == 3


def test_the_evaluate_flag_is_documented(cli) -> None:
    done = cli("evaluate", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "--noise-draws" in text and "x + epsilon * random signs" in text
    assert "--direction" in text
