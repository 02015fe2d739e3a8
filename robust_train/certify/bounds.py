"""From per-pixel confidence bounds of a smoothed map to certified top-k overlap and radii.

The argument (Levine, Singla & Feizi 2019, arXiv 1905.12105; the Lipschitz lemma of Salman et
al. 2019): for h: R^d -> [0, 1] and H(x) = E[h(x + N(0, sigma^2 I))], z(x) = Phi^-1(H(x)) is
1/sigma-Lipschitz, so for ||x' - x||_2 <= r

    Phi(z(x) - r / sigma) <= H(x') <= Phi(z(x) + r / sigma),

and this holds with the true H(x) replaced by any lower (upper) bound of it, Phi being
increasing. With simultaneous bounds lower_i <= p_i(x) <= upper_i of every pixel (probability
>= 1 - alpha, `robust_train.certify.statistics`), every p(x') of the ball lies in the box
L_i(r) = Phi(Phi^-1(lower_i) - r/sigma) <= p_i(x') <= U_i(r) = Phi(Phi^-1(upper_i) + r/sigma).

Reference set S: the k pixels of largest count at x (ties to the lower index). The smallest
overlap |S cap top_k(q)| over the box is reached at q_i = L_i on S and q_j = U_j off S (lowering a
pixel of S or raising one outside can only push S pixels out), with ties broken against S. So a
pixel of S at position rho in S (sorted by its lower bound, descending) stays in the top-k while
fewer than k - rho pixels j outside S have U_j(r) >= L_i(r), that is while

    r < R_rho = sigma / 2 * (Phi^-1(lower_i) - m-th largest Phi^-1(upper_j) off S), m = k - rho.

R_rho does not grow with rho, the certified pixels are a prefix of S, and the certified overlap
at radius r is exactly #{rho : R_rho > r} / k: the smallest overlap over the whole box, so it holds
for every x' of the ball. A pixel whose lower bound ties with other S pixels gets the smallest R
of its tie group as its own radius (which of them the adversary keeps is its choice).
"""

from __future__ import annotations

import torch
from torch import Tensor

from robust_train.explain.similarity import topk_mask

__all__ = ["box_overlap", "overlap_radii", "pixel_radii", "reference_set"]


def overlap_radii(lower: Tensor, upper: Tensor, reference: Tensor, sigma: float) -> Tensor:
    """R (B, k), non-increasing: the certified overlap at radius r is `(R > r).sum(1) / k`.

    Args:
        lower, upper: simultaneous bounds (B, H, W) of the smoothed map at x.
        reference: bool (B, H, W), the k-pixel reference set S of each image (same k for all).
        sigma: the smoothing noise (pixel units).

    Examples:
        >>> lo = torch.tensor([[[0.9, 0.8], [0.1, 0.0]]], dtype=torch.float64)
        >>> hi = torch.tensor([[[1.0, 0.95], [0.2, 0.05]]], dtype=torch.float64)
        >>> r = overlap_radii(lo, hi, lo > 0.5, 1.0)
        >>> [round(v, 4) for v in r.flatten().tolist()]  # (z(.9) - z(.05)) / 2, (z(.8) - z(.2)) / 2
        [1.4632, 0.8416]
    """
    k = int(reference[0].sum())
    batch = lower.shape[0]
    z_in = torch.special.ndtri(lower.double()).flatten(1)
    z_out = torch.special.ndtri(upper.double()).flatten(1)
    flat = reference.flatten(1)
    z_in = z_in[flat].view(batch, k).sort(dim=1, descending=True).values
    z_out = z_out[~flat].view(batch, -1).sort(dim=1, descending=True).values
    missing = max(0, k - z_out.shape[1])  # fewer than m pixels outside S: nothing can enter
    z_out = torch.cat([z_out, z_out.new_full((batch, missing), float("-inf"))], dim=1)[:, :k]
    rho = torch.arange(k, device=lower.device)
    radii = sigma / 2 * (z_in - z_out[:, k - 1 - rho])  # m-th largest outside, m = k - rho
    radii = torch.nan_to_num(radii, nan=float("-inf"))  # both at probability 0: a tie, against S
    radii[:, :missing] = float("inf")  # positions rho < missing: fewer than k - rho outside
    return radii


def pixel_radii(lower: Tensor, reference: Tensor, radii: Tensor) -> Tensor:
    """Per-pixel certified radius (B, H, W): pixel i of S stays in the top-k of the smoothed map
    at every x' with ||x' - x||_2 < radius_i; 0 off S (and for pixels certified at no radius).

    `radii` is `overlap_radii(...)`; pixels of S with equal lower bounds get the smallest radius
    of their group.

    Examples:
        >>> lo = torch.tensor([[[0.9, 0.8], [0.1, 0.0]]], dtype=torch.float64)
        >>> ref = lo > 0.5
        >>> r = overlap_radii(lo, lo + 0.05, ref, 1.0)
        >>> pixel_radii(lo, ref, r)[0, 0].tolist() == r[0].tolist()
        True
    """
    batch, k = radii.shape
    flat = reference.flatten(1)
    z = torch.special.ndtri(lower.double()).flatten(1)[flat].view(batch, k)
    order = z.sort(dim=1, descending=True, stable=True)
    ascending = (-order.values).contiguous()
    last = torch.searchsorted(ascending, ascending, right=True) - 1  # end of each tie group
    per_position = radii.gather(1, last).clamp_min(0)
    in_s = torch.empty_like(per_position).scatter_(1, order.indices, per_position)
    out = torch.zeros(flat.shape, dtype=radii.dtype, device=radii.device)
    out[flat] = in_s.flatten()
    return out.view(reference.shape)


def box_overlap(low: Tensor, high: Tensor, reference: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Smallest and largest |S cap top_k(q)| / k over all maps q with low <= q <= high, (B,) each.

    The smallest sets S pixels to `low` and the others to `high`, ties against S; the largest the
    opposite. Used at the attack's point x' with that point's simultaneous bounds: the largest
    is an upper confidence bound of the true overlap there (holding with probability 1 - alpha).

    Examples:
        >>> low = torch.tensor([[[0.6, 0.1, 0.0]]])
        >>> high = torch.tensor([[[0.9, 0.7, 0.2]]])
        >>> box_overlap(low, high, torch.tensor([[[True, False, False]]]), 1)
        (tensor([0.]), tensor([1.]))
    """
    worst = _count_in_topk(torch.where(reference, low, high), reference, k, members_last=True)
    best = _count_in_topk(torch.where(reference, high, low), reference, k, members_last=False)
    return worst.to(low.dtype) / k, best.to(low.dtype) / k


def _count_in_topk(values: Tensor, member: Tensor, k: int, *, members_last: bool) -> Tensor:
    """How many `member` pixels the top-k of `values` holds, ties ordered by membership."""
    flat, mask = values.flatten(1), member.flatten(1)
    first = mask.logical_not() if members_last else mask
    pre = torch.argsort(first.logical_not().to(torch.uint8), dim=1, stable=True)
    ordered = flat.gather(1, pre).sort(dim=1, descending=True, stable=True).indices[:, :k]
    return mask.gather(1, pre.gather(1, ordered)).sum(1)


def reference_set(lower: Tensor, k: int) -> Tensor:
    """The reference set S: the top-k of the lower bounds (= of the counts), ties to the lower
    index (`topk_mask`)."""
    return topk_mask(lower, k)
