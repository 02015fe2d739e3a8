"""RankedReference gives the values of topk_intersection and spearman_correlation (which match
scipy), with and without ties, constant and NaN rows."""

import pytest
import torch
from scipy.stats import spearmanr

from robust_train.explain.ranked_reference import RankedReference
from robust_train.explain.similarity import spearman_correlation, topk_intersection


def _maps(seed: int, quantize: float | None = None) -> torch.Tensor:
    maps = torch.rand(6, 5, 7, generator=torch.Generator().manual_seed(seed))
    if quantize == -1.0:  # sparse: about 6 of 35 pixels positive, the rest exactly 0
        return (maps - 0.83).clamp_min(0)
    return maps if quantize is None else (maps / quantize).round() * quantize


@pytest.mark.parametrize("quantize", [None, 0.25, 0.5, -1.0])
@pytest.mark.parametrize("k", [1, 9, 35])
def test_equals_the_general_functions(quantize: float | None, k: int) -> None:
    clean, other = _maps(0, quantize), _maps(1, quantize)
    other[0] = clean[0]  # identical maps: intersection 1, Spearman 1
    inter, rho = RankedReference(clean, k).compare(other)
    assert torch.equal(inter, topk_intersection(clean, other, k))
    assert torch.allclose(rho, spearman_correlation(clean, other), atol=1e-6, equal_nan=True)
    assert inter[0] == 1.0 and rho[0] == pytest.approx(1.0)
    for row in range(6):
        expected = spearmanr(clean[row].flatten(), other[row].flatten()).statistic
        assert float(rho[row]) == pytest.approx(expected, abs=1e-6)


def test_rows_without_ties_use_one_sort_and_agree_with_ties_elsewhere() -> None:
    clean, other = _maps(2), _maps(3)
    other[1] = 0.0  # a constant row: Spearman undefined (NaN), as scipy
    other[2, 0, :3] = 0.5  # a row with a tie at the top
    inter, rho = RankedReference(clean, 4).compare(other)
    assert torch.isnan(rho[1]) and not torch.isnan(rho[[0, 2, 3]]).any()
    assert torch.equal(inter, topk_intersection(clean, other, 4))
    assert torch.allclose(rho, spearman_correlation(clean, other), equal_nan=True)


def test_shape_mismatch_names_the_arguments() -> None:
    with pytest.raises(ValueError, match="`reference` and `maps`"):
        RankedReference(_maps(0), 3).compare(torch.rand(6, 4, 7))
