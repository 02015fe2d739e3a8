"""The pieces the two perturbation measures (fidelity curves, faithfulness correlation) share:
one check of their common settings, and the baseline of removed pixels, here the ROAD imputation
with noise drawn once per image, against a slow per-image, per-run reference."""

from __future__ import annotations

import pytest
import torch

from robust_train.metrics.functional import faithfulness_correlation, fidelity_curves
from robust_train.metrics.functional._fidelity_fill import linear_imputation
from robust_train.metrics.functional.faithfulness import pearson_rows
from tests.support.helpers import TinyCNN


def _fidelity(model, x, y, maps, **kwargs):
    return fidelity_curves(model, x, y, maps, n_steps=4, **kwargs)


def _faithfulness(model, x, y, maps, **kwargs):
    return faithfulness_correlation(model, x, y, maps, n_runs=4, subset_size=3, **kwargs)


@pytest.mark.parametrize("measure", [_fidelity, _faithfulness])
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"perturbation": "gray"}, "Unknown `perturbation` 'gray'"),
        ({"imputation_noise": -0.5}, "`imputation_noise` must be >= 0, got -0.5"),
        ({"internal_batch_size": 0}, "`internal_batch_size` must be > 0, got 0"),
    ],
)
def test_both_measures_refuse_a_bad_shared_setting_alike(measure, kwargs, message):
    model = TinyCNN().eval()
    x, y = torch.rand(2, 1, 8, 8), torch.tensor([0, 1])
    with pytest.raises(ValueError, match=message):
        measure(model, x, y, torch.rand(2, 8, 8), **kwargs)


def test_faithfulness_with_noisy_imputation_equals_a_per_run_reference():
    torch.manual_seed(0)
    model = TinyCNN().eval()
    x, y = torch.rand(2, 1, 8, 8), torch.tensor([1, 2])
    maps = torch.randn(2, 8, 8)
    runs, size, std, seed = 5, 6, 0.05, 7
    subsets = torch.stack([torch.randperm(64)[: runs * size].view(runs, size) for _ in range(2)])
    ours = faithfulness_correlation(
        model, x, y, maps, n_runs=runs, subset_size=size, subsets=subsets,
        perturbation="imputation", imputation_noise=std,
        seed=seed, internal_batch_size=3,
    )  # fmt: skip
    # The documented draws: one Gaussian noise image per image, shared by all of its runs.
    noise = std * torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
    drops, sums = torch.zeros(2, runs), torch.zeros(2, runs)
    with torch.no_grad():
        for b in range(2):
            clean = model(x[b : b + 1])[0, y[b]]
            for r in range(runs):
                removed = torch.zeros(64, dtype=torch.bool)
                removed[subsets[b, r]] = True
                removed = removed.view(1, 1, 8, 8)
                start = x[b : b + 1].mean((2, 3), keepdim=True)
                filled = linear_imputation(x[b : b + 1], removed, start) + noise[b : b + 1]
                image = torch.where(removed, filled, x[b : b + 1])
                drops[b, r] = clean - model(image)[0, y[b]]
                sums[b, r] = maps[b].flatten()[subsets[b, r]].sum()
    torch.testing.assert_close(ours, pearson_rows(sums, drops), atol=1e-5, rtol=1e-4)
    other = faithfulness_correlation(
        model, x, y, maps, n_runs=runs, subset_size=size, subsets=subsets,
        perturbation="imputation", imputation_noise=std,
        seed=seed + 1,
    )  # fmt: skip
    assert not torch.allclose(ours, other)  # the noise is really drawn and used
