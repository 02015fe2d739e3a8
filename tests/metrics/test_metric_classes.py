"""LocalLipschitz and Fidelity torchmetrics classes: accumulation, fixed-size state, merging."""

from __future__ import annotations

import math

import pytest
import torch

from robust_train.explain import saliency
from robust_train.metrics import Fidelity, LocalLipschitz
from robust_train.metrics.functional import (
    fidelity_curves,
    fidelity_estimate,
    local_lipschitz_estimate,
    mean_confidence_interval,
)
from tests.support.helpers import SmoothMLP, TinyCNN


def _states(metric) -> dict[str, torch.Tensor]:
    return {name: getattr(metric, name).clone() for name in metric._defaults}


def _assert_states_close(a, b) -> None:
    sa, sb = _states(a), _states(b)
    assert sa.keys() == sb.keys()
    for name in sa:
        torch.testing.assert_close(sa[name], sb[name], msg=name)


def _fidelity_batch(seed: int = 0, batch: int = 6):
    g = torch.Generator().manual_seed(seed)
    return (
        TinyCNN().eval(),
        torch.rand(batch, 1, 8, 8, generator=g),
        torch.rand(batch, 8, 8, generator=g),
    )


# ---------------------------------------------------------------- LocalLipschitz


def test_lipschitz_two_halves_equal_one_update_and_state_is_fixed_size():
    values = torch.rand(10, generator=torch.Generator().manual_seed(0)) * 3
    whole, halves = LocalLipschitz(saliency), LocalLipschitz(saliency)
    shapes = {k: v.shape for k, v in _states(halves).items()}
    whole.update(values=values)
    halves.update(values=values[:4])
    halves.update(values=values[4:])
    _assert_states_close(whole, halves)
    assert {k: v.shape for k, v in _states(halves).items()} == shapes
    out = halves.compute()
    torch.testing.assert_close(out["mean"], values.mean())
    torch.testing.assert_close(out["max"], values.max())
    torch.testing.assert_close(out["std"], values.std(), rtol=1e-4, atol=1e-6)


def test_lipschitz_update_with_model_equals_functional():
    model = SmoothMLP().eval()
    g = torch.Generator().manual_seed(1)
    x, t = torch.rand(5, 1, 8, 8, generator=g), torch.tensor([0, 1, 2, 3, 4])
    settings = {"n_samples": 6, "radius": 0.05, "search": "gradient", "n_steps": 3}
    metric = LocalLipschitz(saliency, seed=7, **settings)
    metric.update(model, x, t)
    expected = local_lipschitz_estimate(
        model, x, t, explainer=saliency, generator=torch.Generator().manual_seed(7), **settings
    )
    torch.testing.assert_close(metric.compute()["mean"], expected.mean())
    torch.testing.assert_close(metric.compute()["max"], expected.max())


def test_lipschitz_merge_and_distributed_reductions():
    values = torch.rand(9, generator=torch.Generator().manual_seed(2))
    whole, a, b = LocalLipschitz(saliency), LocalLipschitz(saliency), LocalLipschitz(saliency)
    whole.update(values=values)
    a.update(values=values[:5])
    b.update(values=values[5:])
    assert a._reductions["maximum"].__name__ == "dim_zero_max"
    assert all(a._reductions[k].__name__ == "dim_zero_sum" for k in ("total", "total_sq", "count"))
    # two "processes": each state reduced over the stacked per-process states
    reduced = {
        k: a._reductions[k](torch.stack([getattr(a, k), getattr(b, k)])) for k in a._defaults
    }
    for k, v in reduced.items():
        torch.testing.assert_close(v, getattr(whole, k))
    a.merge_state(b)
    _assert_states_close(a, whole)


def test_lipschitz_update_arguments():
    metric = LocalLipschitz(saliency)
    with pytest.raises(ValueError, match="values"):
        metric.update(SmoothMLP(), values=torch.rand(2))
    with pytest.raises(ValueError, match="model"):
        metric.update(SmoothMLP())
    with pytest.raises(ValueError, match=">= 0"):
        metric.update(values=torch.tensor([-1.0]))
    with pytest.raises(ValueError, match="non-finite"):
        metric.update(values=torch.tensor([float("nan")]))
    with pytest.raises(ValueError, match=r"\(B,\)"):
        metric.update(values=torch.rand(2, 2))


# ---------------------------------------------------------------- Fidelity


def test_fidelity_two_halves_equal_one_update_and_state_is_fixed_size():
    model, x, imp = _fidelity_batch()
    whole, halves = Fidelity(n_steps=8), Fidelity(n_steps=8)
    shapes = {k: v.shape for k, v in _states(halves).items()}
    whole.update(model, x, None, imp)
    halves.update(model, x[:2], None, imp[:2])
    halves.update(model, x[2:], None, imp[2:])
    _assert_states_close(whole, halves)
    assert (
        {k: v.shape for k, v in _states(halves).items()}
        == shapes
        == {
            "mif_sum": (9,),
            "lif_sum": (9,),
            "mif_auc_sum": (),
            "lif_auc_sum": (),
            "fidelity_sum": (),
            "fidelity_sq_sum": (),
            "count": (),
        }
    )


def test_fidelity_compute_equals_functional_means():
    model, x, imp = _fidelity_batch(3)
    metric = Fidelity(n_steps=5, perturbation="zero", score="probability")
    metric.update(model, x, None, imp)
    curves = fidelity_curves(
        model, x, None, imp, n_steps=5, perturbation="zero", score="probability"
    )
    estimate = fidelity_estimate(curves)
    out = metric.compute()
    ci = mean_confidence_interval(estimate)
    torch.testing.assert_close(out["fidelity"], estimate.mean())
    torch.testing.assert_close(out["fidelity_low"], ci.low.float(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out["fidelity_high"], ci.high.float(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out["mif_curve"], curves.mif.mean(0))
    torch.testing.assert_close(out["lif_curve"], curves.lif.mean(0))
    torch.testing.assert_close(out["mif_auc"], torch.trapezoid(curves.mif, curves.fractions).mean())
    torch.testing.assert_close(out["lif_auc"] - out["mif_auc"], estimate.mean())
    torch.testing.assert_close(out["fractions"], curves.fractions)


def test_fidelity_merge_and_distributed_reductions():
    model, x, imp = _fidelity_batch(4)
    whole, a, b = Fidelity(n_steps=4), Fidelity(n_steps=4), Fidelity(n_steps=4)
    whole.update(model, x, None, imp)
    a.update(curves=fidelity_curves(model, x[:3], None, imp[:3], n_steps=4))
    b.update(model, x[3:], None, imp[3:])
    assert all(fn.__name__ == "dim_zero_sum" for fn in a._reductions.values())
    reduced = {
        k: a._reductions[k](torch.stack([getattr(a, k), getattr(b, k)])) for k in a._defaults
    }
    for k, v in reduced.items():
        torch.testing.assert_close(v, getattr(whole, k))
    a.merge_state(b)
    _assert_states_close(a, whole)
    a.reset()
    assert float(a.count) == 0 and a.mif_sum.shape == (5,)


def test_fidelity_with_explainer_and_predicted_class():
    model, x, _ = _fidelity_batch(5)
    metric = Fidelity(n_steps=4, explainer="saliency")
    metric.update(model, x)
    pred = model(x).argmax(1)
    curves = fidelity_curves(model, x, pred, saliency(model, x, pred), n_steps=4)
    torch.testing.assert_close(metric.compute()["fidelity"], fidelity_estimate(curves).mean())


def test_fidelity_update_arguments():
    model, x, imp = _fidelity_batch()
    metric = Fidelity(n_steps=4)
    with pytest.raises(ValueError, match="fractions"):
        metric.update(curves=fidelity_curves(model, x, None, imp, n_steps=5))
    with pytest.raises(ValueError, match="explainer"):
        metric.update(model, x)
    with pytest.raises(ValueError, match="not both"):
        metric.update(model, x, None, imp, curves=fidelity_curves(model, x, None, imp, n_steps=4))
    with pytest.raises(ValueError, match="n_steps"):
        Fidelity(n_steps=0)
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert math.isnan(float(Fidelity(n_steps=2).compute()["fidelity_low"]))


def test_forward_returns_the_batch_value_and_accumulates():
    metric = LocalLipschitz(saliency)
    batch = metric(values=torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(batch["mean"], torch.tensor(1.5))
    metric(values=torch.tensor([6.0]))
    torch.testing.assert_close(metric.compute()["mean"], torch.tensor(3.0))
    torch.testing.assert_close(metric.compute()["max"], torch.tensor(6.0))
