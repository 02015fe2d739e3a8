"""The geometry of the certificate against slow, readable references written from the argument:
the worst map of the box, ties against the reference set, pixel by pixel."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import norm

from robust_train.certify import box_overlap, overlap_radii, pixel_radii, reference_set


def _bounds(seed: int, batch: int = 3, h: int = 4, w: int = 5, tied: bool = False):
    """Random nested bounds lower <= upper; `tied` draws them from a few values (ties)."""
    gen = torch.Generator().manual_seed(seed)
    if tied:
        levels = torch.tensor([0.0, 0.05, 0.3, 0.3, 0.7, 0.95])
        lower = levels[torch.randint(0, 6, (batch, h, w), generator=gen)].double()
        upper = (lower + 0.04).clamp(max=1.0)
        upper[lower == 0.95] = 1.0
    else:
        lower = torch.rand(batch, h, w, generator=gen, dtype=torch.float64) * 0.9
        upper = (lower + 0.1 * torch.rand(batch, h, w, generator=gen, dtype=torch.float64)).clamp(
            max=1.0
        )
    return lower, upper


def _worst_count(lower, upper, ref, k, r, sigma) -> list[int]:
    """Slow reference: S pixels at Phi^-1(lower) - r/sigma, the others at Phi^-1(upper) + r/sigma
    (z units, where the comparison is the same as in probabilities), ties against S; count S in
    the first k."""
    out = []
    for b in range(lower.shape[0]):
        cells = []
        for lo, hi, s in zip(lower[b].flatten(), upper[b].flatten(), ref[b].flatten(), strict=True):
            value = norm.ppf(float(lo)) - r / sigma if s else norm.ppf(float(hi)) + r / sigma
            cells.append((value, bool(s)))
        cells.sort(key=lambda c: (-c[0], c[1]))  # larger first; at a tie, non-S first
        out.append(sum(s for _, s in cells[:k]))
    return out


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("k", [1, 6, 12, 19])
def test_certified_overlap_is_the_worst_map_of_the_box(k, tied) -> None:
    sigma = 0.3
    lower, upper = _bounds(k, tied=tied)
    ref = reference_set(lower, k)
    radii = overlap_radii(lower, upper, ref, sigma)
    assert radii.shape == (3, k)
    assert (radii[:, 1:] <= radii[:, :-1]).all()  # non-increasing: a prefix is certified
    for r in (0.0, 0.01, 0.05, 0.1, 0.2, 0.4, 0.8):
        expected = _worst_count(lower, upper, ref, k, r, sigma)
        assert (radii > r).sum(1).tolist() == expected, (k, r)


@pytest.mark.parametrize("tied", [False, True])
def test_pixel_radius_keeps_that_pixel_against_any_tie_order(tied) -> None:
    sigma, k = 0.5, 6
    lower, upper = _bounds(3, tied=tied)
    ref = reference_set(lower, k)
    per_pixel = pixel_radii(lower, ref, overlap_radii(lower, upper, ref, sigma))
    assert (per_pixel[~ref] == 0).all() and (per_pixel >= 0).all()
    z_lo, z_hi = norm.ppf(lower.numpy()), norm.ppf(upper.numpy())

    def kept(b: int, i: int, r: float) -> bool:  # every pixel tied with i goes before it
        zl, zh, s = z_lo[b].flatten(), z_hi[b].flatten(), ref[b].flatten().numpy()
        values = [zl[j] - r / sigma if s[j] else zh[j] + r / sigma for j in range(len(s))]
        return sum(values[j] >= values[i] for j in range(len(s)) if j != i) < k

    for b in range(3):
        for i in ref[b].flatten().nonzero().flatten().tolist():
            radius = float(per_pixel[b].flatten()[i])
            if radius > 0:
                assert kept(b, i, radius * (1 - 1e-6)), (b, i, radius)
            assert not kept(b, i, radius * (1 + 1e-6) + 1e-9), (b, i, radius)


def test_box_overlap_brackets_every_map_of_the_box() -> None:
    gen = torch.Generator().manual_seed(5)
    low, high = _bounds(4, batch=2, h=3, w=3, tied=True)
    k = 3
    ref = reference_set(torch.rand(2, 3, 3, generator=gen), k)
    smallest, largest = box_overlap(low, high, ref, k)
    seen = []
    for _ in range(3000):
        u = torch.rand(2, 3, 3, generator=gen, dtype=torch.float64)
        q = low + u * (high - low)
        q = torch.where(torch.rand(2, 3, 3, generator=gen) < 0.3, low, q)  # include the faces
        q = torch.where(torch.rand(2, 3, 3, generator=gen) < 0.3, high, q)
        shared = []
        for b in range(2):  # a random order among tied values: the worst and best ones occur
            jitter = 1e-12 * torch.rand(9, generator=gen, dtype=torch.float64)
            top = torch.argsort(q[b].flatten() + jitter, descending=True)[:k]
            shared.append(float(ref[b].flatten()[top].sum()) / k)
        seen.append(shared)
    seen_t = torch.tensor(seen, dtype=torch.float64)
    assert (seen_t >= smallest - 1e-12).all() and (seen_t <= largest + 1e-12).all()
    assert torch.allclose(seen_t.min(0).values, smallest)  # reached, at a vertex of the box
    assert torch.allclose(seen_t.max(0).values, largest)


def test_no_room_outside_the_reference_means_an_infinite_radius() -> None:
    lower = torch.tensor([[[0.5, 0.4, 0.1]]], dtype=torch.float64)
    ref = reference_set(lower, 3)  # k = H*W: every pixel is in S, nothing can enter
    radii = overlap_radii(lower, lower + 0.1, ref, 0.2)
    assert torch.isinf(radii).all() and math.isinf(float(pixel_radii(lower, ref, radii).min()))
