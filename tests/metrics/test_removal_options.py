"""The perturbation measures take one declared option set (`RemovalOptions`), each with its own
default baseline, and every keyword works as before."""

from __future__ import annotations

import inspect

import pytest
import torch

from robust_train.metrics.functional import (
    RemovalOptions,
    faithfulness_correlation,
    fidelity_curves,
)

SHARED = ("perturbation", "imputation_noise", "internal_batch_size", "generator", "seed")


@pytest.mark.parametrize(
    ("measure", "perturbation"), [(fidelity_curves, "mean"), (faithfulness_correlation, "zero")]
)
def test_signature_keeps_every_removal_keyword_and_its_default(measure, perturbation):
    params = inspect.signature(measure).parameters
    assert all(params[name].kind is inspect.Parameter.KEYWORD_ONLY for name in SHARED)
    assert params["perturbation"].default == perturbation
    assert params["imputation_noise"].default == RemovalOptions().imputation_noise == 0.01
    assert params["seed"].default is None and params["internal_batch_size"].default is None


def _batch():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    x, y = torch.rand(2, 1, 4, 4), torch.tensor([0, 2])
    return model, x, y, torch.rand(2, 4, 4)


def test_defaults_are_each_measures_own_baseline():
    model, x, y, maps = _batch()
    curves = fidelity_curves(model, x, y, maps, n_steps=4)
    mean = fidelity_curves(model, x, y, maps, n_steps=4, perturbation="mean")
    zero = fidelity_curves(model, x, y, maps, n_steps=4, perturbation="zero")
    torch.testing.assert_close(curves.mif, mean.mif)
    assert not torch.allclose(curves.mif, zero.mif)
    kw = dict(n_runs=6, subset_size=3, seed=0)
    default = faithfulness_correlation(model, x, y, maps, **kw)
    torch.testing.assert_close(default, faithfulness_correlation(model, x, y, maps, **kw,
                                                                  perturbation="zero"))  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    noise = faithfulness_correlation(
        model, x, y, maps, n_runs=6, subset_size=3, perturbation="noise", generator=gen,
        internal_batch_size=5,
    )  # fmt: skip
    assert noise.shape == (2,)


@pytest.mark.parametrize("measure", [fidelity_curves, faithfulness_correlation])
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"perturbation": "black"}, ValueError, "Unknown `perturbation` 'black'"),
        ({"imputation_noise": -1.0}, ValueError, "`imputation_noise` must be >= 0"),
        ({"internal_batch_size": 0}, ValueError, "`internal_batch_size` must be > 0"),
        ({"perturbaton": "zero"}, TypeError, "did you mean 'perturbation'"),
    ],
)
def test_bad_removal_options_fail_before_any_work(measure, kwargs, error, message):
    with pytest.raises(error, match=message):
        measure(torch.nn.Identity(), "not read", None, "not read", **kwargs)
