"""Similarity metrics against scipy and limiting cases."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.stats
import torch

from robust_train.explain.similarity import (
    center_of_mass,
    center_of_mass_shift,
    kendall_tau,
    spearman_correlation,
    topk_intersection,
    topk_mask,
    topk_support,
)


def _scipy(stat, a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on constant input and returns NaN
        return np.array(
            [
                stat(x.flatten().double().numpy(), y.flatten().double().numpy()).statistic
                for x, y in zip(a, b, strict=True)
            ]
        )


def _tied_maps(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer-valued maps of random size: many ties, sometimes a constant map."""
    g = torch.Generator().manual_seed(seed)
    h, w = (int(v) for v in torch.randint(1, 9, (2,), generator=g))
    levels = int(torch.randint(1, 6, (1,), generator=g))
    a = torch.randint(0, levels, (4, h, w), generator=g).float()
    b = torch.randint(0, levels, (4, h, w), generator=g).float()
    b[0] = a[0]  # identical maps
    b[1] = a[1].flatten().flip(0).view(h, w)  # reversed order
    return a, b


@pytest.mark.parametrize(
    "stat, ours",
    [(scipy.stats.spearmanr, spearman_correlation), (scipy.stats.kendalltau, kendall_tau)],
)
def test_rank_statistics_equal_scipy_with_ties(stat, ours) -> None:
    n_nan = 0
    for seed in range(150):
        a, b = _tied_maps(seed)
        expected = _scipy(stat, a, b)
        got = ours(a, b).double().numpy()
        assert got.shape == (4,)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected), err_msg=f"seed {seed}")
        np.testing.assert_allclose(got, expected, atol=1e-6, err_msg=f"seed {seed}")
        n_nan += int(np.isnan(expected).sum())
    assert 0 < n_nan < 300  # the seeds exercise constant maps as well as ordinary ones


@pytest.mark.parametrize(
    "stat, ours",
    [(scipy.stats.spearmanr, spearman_correlation), (scipy.stats.kendalltau, kendall_tau)],
)
def test_rank_statistics_equal_scipy_continuous_and_correlated(stat, ours) -> None:
    a = torch.rand(3, 32, 32)
    b = a + 0.3 * torch.rand(3, 32, 32)  # strongly but not perfectly correlated
    b[2] = torch.rand(32, 32)
    expected = _scipy(stat, a, b)
    assert expected[0] > 0.5 and abs(expected[2]) < 0.2
    np.testing.assert_allclose(ours(a, b).double().numpy(), expected, atol=1e-6)


def test_kendall_large_map_matches_scipy() -> None:
    a = (torch.rand(2, 224, 224) * 50).round()  # 224 x 224 with ties: O(N log^2 N) path, no N^2
    b = a + torch.randint(-3, 4, a.shape).float()
    np.testing.assert_allclose(
        kendall_tau(a, b).double().numpy(), _scipy(scipy.stats.kendalltau, a, b), atol=1e-6
    )


def test_rank_statistics_limits() -> None:
    a = torch.rand(2, 5, 5)
    assert torch.allclose(spearman_correlation(a, a), torch.ones(2))
    assert torch.allclose(kendall_tau(a, a), torch.ones(2))
    assert torch.allclose(spearman_correlation(a, -a), -torch.ones(2))
    assert torch.allclose(kendall_tau(a, 2 * a + 1), torch.ones(2))  # monotone maps: same ranks
    const = torch.ones(2, 5, 5)
    assert torch.isnan(spearman_correlation(a, const)).all()
    assert torch.isnan(kendall_tau(const, a)).all()
    assert spearman_correlation(a.double(), a.double()).dtype == torch.float64


def test_topk_intersection_identical_maps_is_one_even_with_ties() -> None:
    a = torch.randint(0, 3, (5, 6, 6)).float()  # heavy ties at every k
    for k in range(1, 37):
        assert torch.equal(topk_intersection(a, a.clone(), k), torch.ones(5))


def test_topk_intersection_against_set_reference() -> None:
    for seed in range(30):
        g = torch.Generator().manual_seed(seed)
        a, b = torch.rand(3, 7, 5, generator=g), torch.rand(3, 7, 5, generator=g)
        k = int(torch.randint(1, 36, (1,), generator=g))
        got = topk_intersection(a, b, k)
        for i in range(3):
            top_a = set(np.argsort(-a[i].flatten().numpy())[:k].tolist())
            top_b = set(np.argsort(-b[i].flatten().numpy())[:k].tolist())
            assert got[i].item() == pytest.approx(len(top_a & top_b) / k)
    assert topk_intersection(a, b, 35).eq(1).all()  # k = H*W: every pixel is in both sets


def _support_reference(m: torch.Tensor, k: int) -> set[int]:
    """The k largest positive pixels, written out: positive values, largest first, ties to the
    lower index, the first k."""
    values = m.flatten().tolist()
    positive = [i for i, v in enumerate(values) if v > 0]
    return set(sorted(positive, key=lambda i: (-values[i], i))[:k])


def test_sparse_maps_compare_their_positive_pixels_only() -> None:
    """Maps cut to exactly 0 (Grad-CAM's ReLU; IG on a zero background): the zero pixels are not
    among a map's most important, so they are never agreement; |S_a & S_b| / max(|S_a|, |S_b|)."""
    for seed in range(40):
        g = torch.Generator().manual_seed(seed)
        a = (torch.rand(3, 6, 7, generator=g) - 0.8).clamp_min(0)
        b = (torch.rand(3, 6, 7, generator=g) - 0.7).clamp_min(0)
        b[0] = a[0] * 2  # the same ranking on the same support: 1
        k = int(torch.randint(1, 43, (1,), generator=g))
        got = topk_intersection(a, b, k)
        for i in range(3):
            sa, sb = _support_reference(a[i], k), _support_reference(b[i], k)
            if not sa and not sb:
                assert torch.isnan(got[i])
            else:
                assert got[i].item() == pytest.approx(len(sa & sb) / max(len(sa), len(sb)))
        assert got[0] == 1.0 or not _support_reference(a[0], k)
        assert torch.equal(topk_support(a, k), topk_mask(a, k) & (a > 0))


def test_zero_pixels_are_not_agreement_between_sparse_maps() -> None:
    """Two maps with disjoint positive pixels share nothing, however many zeros both have (the
    old index tie-break counted the zero pixels both put into their top-k as shared)."""
    a, b = torch.zeros(2, 10, 10), torch.zeros(2, 10, 10)
    a[:, 5, :3], b[:, 6, :3] = 1.0, 1.0  # 3 positive pixels each, disjoint
    assert topk_intersection(a, b, 50).tolist() == [0.0, 0.0]
    assert topk_intersection(a, a, 50).tolist() == [1.0, 1.0]
    b[1, 5, 0] = 2.0  # one clean pixel kept, 3 more named: 1 of max(3, 4)
    assert topk_intersection(a, b, 50)[1].item() == pytest.approx(0.25)
    assert topk_intersection(a, torch.zeros_like(a), 50).tolist() == [0.0, 0.0]
    assert torch.isnan(topk_intersection(torch.zeros_like(a), torch.zeros_like(a), 50)).all()


def test_topk_ties_go_to_the_lower_index() -> None:
    maps = torch.tensor([[[0.0, 2.0, 2.0], [2.0, 1.0, 0.0]]])
    assert topk_mask(maps, 2).flatten().tolist() == [False, True, True, False, False, False]
    shifted = torch.tensor([[[0.0, 2.0, 0.0], [2.0, 2.0, 0.0]]])  # same values, ties elsewhere
    assert topk_intersection(maps, shifted, 2).item() == 0.5


def test_center_of_mass_shift_equals_the_shift() -> None:
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        dy, dx = (int(v) for v in torch.randint(-4, 5, (2,), generator=g))
        blob = torch.rand(2, 6, 6, generator=g)
        a = torch.zeros(2, 16, 16)
        b = torch.zeros(2, 16, 16)
        a[:, 5:11, 5:11] = blob
        b[:, 5 + dy : 11 + dy, 5 + dx : 11 + dx] = 3.0 * blob  # scale must not matter
        expected = torch.full((2,), float(np.hypot(dy, dx)))
        assert torch.allclose(center_of_mass_shift(a, b), expected, atol=1e-4)
        assert torch.allclose(
            center_of_mass(b) - center_of_mass(a),
            torch.tensor([[dy, dx]] * 2, dtype=torch.float32),
            atol=1e-4,
        )


def test_center_of_mass_uniform_and_zero_maps() -> None:
    assert torch.allclose(center_of_mass(torch.ones(1, 5, 8)), torch.tensor([[2.0, 3.5]]))
    assert torch.isnan(center_of_mass_shift(torch.zeros(1, 3, 3), torch.ones(1, 3, 3))).all()


def test_center_of_mass_is_differentiable() -> None:
    maps = torch.rand(2, 4, 4, requires_grad=True)
    (grad,) = torch.autograd.grad(center_of_mass(maps)[:, 1].sum(), maps)
    assert grad.abs().sum() > 0


@pytest.mark.parametrize(
    "fn",
    [
        spearman_correlation,
        kendall_tau,
        center_of_mass_shift,
        lambda a, b: topk_intersection(a, b, 2),
    ],
)
def test_bad_maps(fn) -> None:
    good = torch.rand(2, 4, 4)
    with pytest.raises(ValueError, match="map_b.*same shape|same shape"):
        fn(good, torch.rand(2, 4, 5))
    with pytest.raises(ValueError, match=r"map_a.*\(B, H, W\)"):
        fn(torch.rand(2, 1, 4, 4), good)
    with pytest.raises(ValueError, match="map_a.*empty"):
        fn(torch.rand(0, 4, 4), torch.rand(0, 4, 4))
    with pytest.raises(ValueError, match="map_b.*non-finite"):
        fn(good, torch.full((2, 4, 4), float("nan")))
    with pytest.raises(TypeError, match="map_a.*floating"):
        fn(torch.ones(2, 4, 4, dtype=torch.long), good)


@pytest.mark.parametrize("k", [0, 17, -1, 2.5, True])
def test_topk_bad_k_names_k_and_size(k) -> None:
    with pytest.raises(ValueError, match=r"`k`.*\[1, 16\].*4x4"):
        topk_intersection(torch.rand(1, 4, 4), torch.rand(1, 4, 4), k)


def test_center_shift_rejects_negative_maps() -> None:
    with pytest.raises(ValueError, match="map_b.*non-negative"):
        center_of_mass_shift(torch.rand(1, 3, 3), -torch.rand(1, 3, 3))
