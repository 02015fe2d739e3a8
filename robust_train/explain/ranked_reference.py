"""Top-k intersection and Spearman correlation against fixed reference maps, at the cost of one
sort per compared map.

An attack compares every iterate's map with the same clean maps (Ghorbani, Abid & Zou, AAAI
2019). `topk_intersection` and `spearman_correlation` redo the clean side (a sort for the top-k
set, a sort and two `searchsorted` for the average ranks) and, for the compared map, a second
sort and two `searchsorted`. `RankedReference` computes the clean side once; each compared map
then costs one stable sort: without ties, its rank order gives both its top-k set and its ranks
(its average ranks are its ranks + 1, and its k largest pixels are those of rank >= N - k). Rows
with ties (or NaN) fall back to the general functions, so the values are those of
`topk_intersection(reference, maps, k)` and `spearman_correlation(reference, maps)`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from robust_train.core.validation import check_maps, check_same_shape
from robust_train.explain.similarity import _average_ranks, shared_fraction, topk_mask, topk_support

__all__ = ["RankedReference"]


class RankedReference:
    """The reference side of `topk_intersection` and `spearman_correlation`, computed once.

    Args:
        reference: maps (B, H, W) every later call is compared with.
        k: the k of the top-k intersection, an int in [1, H*W].

    Examples:
        >>> from robust_train.explain.similarity import spearman_correlation, topk_intersection
        >>> clean, other = torch.rand(3, 4, 4), torch.rand(3, 4, 4)
        >>> inter, rho = RankedReference(clean, 5).compare(other)
        >>> torch.equal(inter, topk_intersection(clean, other, 5))
        True
        >>> torch.allclose(rho, spearman_correlation(clean, other))
        True
    """

    def __init__(self, reference: Tensor, k: int) -> None:
        check_maps(reference, "reference")
        self.reference, self.k = reference, k
        self.topk = topk_support(reference, k).flatten(1)
        ranks = _average_ranks(reference.reshape(reference.shape[0], -1))
        self.centred = ranks - ranks.mean(1, keepdim=True)
        self.variance = (self.centred * self.centred).sum(1)

    def compare(self, maps: Tensor) -> tuple[Tensor, Tensor]:
        """(top-k intersection, Spearman correlation) of `maps` (B, H, W) with the reference."""
        check_maps(maps, "maps")
        check_same_shape(self.reference, maps, "reference", "maps")
        flat = maps.reshape(maps.shape[0], -1).detach()
        n = flat.shape[1]
        ordered, order = flat.sort(dim=1, stable=True)
        general = (ordered[:, 1:] == ordered[:, :-1]).any(1) | ordered.isnan().any(1)
        positions = torch.arange(n, device=flat.device).expand_as(order)
        ranks = torch.empty_like(order).scatter_(1, order, positions)
        top = ranks >= n - self.k
        average = ranks.double() + 1
        if bool(general.any()):
            rows = general.nonzero().flatten()
            top[rows] = topk_mask(maps[rows].detach(), self.k).flatten(1)
            average[rows] = _average_ranks(flat[rows])
        intersection = shared_fraction(top & (flat > 0), self.topk).to(self.reference.dtype)
        centred = average - average.mean(1, keepdim=True)
        variance = (centred * centred).sum(1)
        rho = (self.centred * centred).sum(1) / (self.variance * variance).sqrt()
        rho = torch.where((self.variance > 0) & (variance > 0), rho.clamp(-1.0, 1.0), torch.nan)
        return intersection, rho.to(self.reference.dtype)
