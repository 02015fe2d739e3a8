"""A fragility attack never reports an attack that did not happen as robustness.

When the ascent direction is exactly zero at every step for a sample, the sample is marked
unmeasured (`FragilityResult.measured` False), its metrics are NaN, and one warning names the
real cause: a diverged model, constant maps, a piecewise-linear model without a surrogate, or a
surrogate that met no ReLU. A functional ReLU behind data-dependent control flow (which no
tracer can rewrite) is reached by the surrogate and attacked.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

from robust_train.attacks import fragility_attack
from robust_train.metrics import ExplanationFragility
from tests.support.helpers import TinyCNN

X = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
METRICS = ("topk_intersection", "spearman", "kendall", "center_shift")


class _ConstantMap(nn.Module):
    """logits = W * mean(x): the saliency map is the same constant at every pixel."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(1, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x.mean(dim=(1, 2, 3))[:, None] ** 2)


class _UntraceableFunctionalReLU(nn.Module):
    """F.relu behind data-dependent control flow: torch.fx cannot trace it."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.hidden, self.out = nn.Linear(64, 16), nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.hidden(x.flatten(1))
        if bool(h.sum() > -1e9):  # data-dependent branch
            h = torch.nn.functional.relu(h)
        return self.out(h)


def _assert_unmeasured(res) -> None:
    assert not bool(res.measured.any()) and not bool(res.improved.any())
    for name in METRICS:
        assert all(math.isnan(v) for v in getattr(res, name).tolist()), name


def test_constant_map_is_not_a_perfect_score() -> None:
    model = _ConstantMap()
    with pytest.warns(RuntimeWarning, match="clean explanation maps are constant"):
        res = fragility_attack(model, X, model(X).argmax(1), epsilon=0.1, n_steps=2)
    _assert_unmeasured(res)


def test_untraceable_functional_relu_is_attacked_on_the_surrogate() -> None:
    """It used to stay unmeasured (torch.fx could not trace it to swap in softplus)."""
    model = _UntraceableFunctionalReLU()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = fragility_attack(model, X, model(X).argmax(1), epsilon=0.1, n_steps=2)
    assert res.surrogate_beta == 10.0
    assert bool(res.measured.all()) and bool(res.improved.any())


def test_a_surrogate_that_meets_no_relu_names_that_cause() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.LeakyReLU(0.1), nn.Linear(16, 10))
    with pytest.warns(RuntimeWarning, match="met no ReLU call"):
        res = fragility_attack(model, X, model(X).argmax(1), epsilon=0.1, n_steps=2)
    assert res.surrogate_beta is None
    _assert_unmeasured(res)


def test_relu_modules_without_surrogate_name_piecewise_linearity() -> None:
    model = TinyCNN().eval()
    with pytest.warns(RuntimeWarning, match="piecewise linear.*no softplus surrogate"):
        res = fragility_attack(
            model, X, model(X).argmax(1), epsilon=0.1, n_steps=2, surrogate_beta=None
        )
    _assert_unmeasured(res)


def _diverged_small_cnn() -> nn.Module:
    """A SmallCNN (nn.ReLU modules) after Adam with lr 1e6: every unit dead, constant maps."""
    from robust_train.models import SmallCNN

    torch.manual_seed(0)
    model = SmallCNN(width=8)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e6)
    x, y = torch.rand(32, 1, 8, 8), torch.randint(0, 10, (32,))
    for _ in range(5):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model.eval()


def test_diverged_small_cnn_warning_names_the_real_cause() -> None:
    """it used to blame 'ReLU called functionally' for a model with modules."""
    model = _diverged_small_cnn()
    with pytest.warns(RuntimeWarning) as record:
        res = fragility_attack(model, X, model(X).argmax(1), epsilon=0.1, n_steps=2)
    message = " ".join(str(w.message) for w in record)
    assert "constant" in message and "diverged" in message
    assert "functionally" not in message
    _assert_unmeasured(res)


def test_non_finite_weights_are_named() -> None:
    model = TinyCNN().eval()
    with torch.no_grad():
        model.net[0].weight[0, 0, 0, 0] = float("nan")
    with pytest.warns(RuntimeWarning, match=r"non-finite parameters \(net.0.weight\)"):
        res = fragility_attack(model, X, torch.tensor([0, 1, 2]), epsilon=0.1, n_steps=2)
    _assert_unmeasured(res)


def test_only_the_zero_direction_samples_are_unmeasured() -> None:
    """A black image in a batch of real ones: its map under a bias-free ReLU net is zero."""
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, bias=False),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(256, 10, bias=False),
    )
    x = X.clone()
    x[1] = 0.0
    with pytest.warns(RuntimeWarning, match="1 of 3 sample"):
        res = fragility_attack(model, x, model(x).argmax(1), epsilon=0.05, n_steps=3, k=8)
    assert res.measured.tolist() == [True, False, True]
    assert math.isnan(float(res.topk_intersection[1]))
    assert torch.isfinite(res.topk_intersection[[0, 2]]).all()


def test_metric_class_counts_unmeasured_samples_apart() -> None:
    model = _ConstantMap()
    metric = ExplanationFragility(epsilon=0.1, n_steps=2)
    with pytest.warns(RuntimeWarning):
        metric.update(model, X, model(X).argmax(1))
    values = metric.compute()
    assert int(values["n_unmeasured"]) == 3
    assert math.isnan(float(values["topk_intersection"]))


def test_a_flat_clean_point_is_left_by_a_random_step_and_then_attacked() -> None:
    """A zero-baseline IG map is zero wherever the input is zero: with no more non-zero pixels
    than k, the clean top-k set holds all the mass, the top-k value is -1 around x0 and the
    gradient there is exactly zero. Without a way off it, such a sample stays unmeasured; a
    random step leaves the flat point, and the attack then follows the gradient."""
    from robust_train.attacks._loop import off_flat_point  # noqa: F401  (the step it takes)
    from robust_train.explain import get_explainer

    torch.manual_seed(0)
    model = TinyCNN().eval()
    x = torch.zeros(3, 1, 8, 8)
    x[:, :, 2:6, 3:5] = 0.5 + 0.5 * torch.rand(3, 1, 4, 2)  # 8 lit pixels of 64
    ig = get_explainer("integrated_gradients", n_steps=4)
    clean = ig(model, x, model(x).argmax(1)).abs().flatten(1)
    assert int(clean.ne(0).sum(1).max()) <= 16  # the whole map lies in the clean top-16
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no sample is left unmeasured
        res = fragility_attack(
            model, x, model(x).argmax(1), explainer=ig, epsilon=0.2, n_steps=6, k=16,
            measure_k=8, seed=0,
        )  # fmt: skip
    assert bool(res.measured.all())
    assert bool((res.topk_intersection < 1).any()) and bool(res.improved.any())
