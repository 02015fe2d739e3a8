"""A locality-sensitive top-k intersection (LENS; Kamath, Mittal, Deshpande & Balasubramanian,
"Rethinking Robustness of Model Attributions", AAAI 2024, arXiv 2312.10534).

Top-k intersection counts a top pixel that moved by one position as lost. LENS counts a top-k
pixel of the second map as kept when it lies within a small neighbourhood of a top-k pixel of
the first: the share of fragility that is small shifts is the difference between the two.
Defined here, beside `robust_train.explain.similarity.topk_intersection` (the layer the attacks
read), and exported with the other map similarities by `robust_train.metrics.functional`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from robust_train.core.validation import check_maps, check_same_shape
from robust_train.explain.similarity import topk_support

__all__ = ["check_window", "lens_topk_intersection"]


def check_window(window: object) -> None:
    """Raise a ValueError unless `window` is an int >= 0 (a neighbourhood radius in pixels).

    Examples:
        >>> check_window(0)
        >>> check_window(1.5)
        Traceback (most recent call last):
        ...
        ValueError: `window` must be an int >= 0 (pixels), got 1.5
    """
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"`window` must be an int >= 0 (pixels), got {window!r}")


def lens_topk_intersection(map_a: Tensor, map_b: Tensor, k: int, *, window: int = 1) -> Tensor:
    """Share of the top-k pixels of `map_b` that lie within `window` pixels of a top-k pixel of
    `map_a`: |{p in S_b : max(|p_row - q_row|, |p_col - q_col|) <= window for some q in S_a}|
    / max(|S_a|, |S_b|), S the k largest pixels of positive value (`topk_support`), so the
    neighbourhood of a pixel is the (2 * window + 1) x (2 * window + 1) square around it, cut at
    the image border.

    With `map_a` the clean map and `map_b` the attacked one, this is the 3x3 LENS top-k of
    Kamath et al. (2024) at `window=1` (their code calls it LENS-recall; the arguments swapped
    give their LENS-prec). `window=0` is `topk_intersection` exactly; identical maps give 1; a
    map shifted by one pixel gives 1 for any `window >= 1` (as long as its top-k pixels stay in
    the image). Where this differs from the authors' code: their neighbourhood adds +-1 and +-W
    to flattened indices, so it wraps from the end of one row to the start of the next (and
    drops pixel 0); here it is the true 2-D square. Their top-k is a plain argsort; here, as in
    `topk_intersection`, pixels <= 0 are never top pixels and ties go to the lower index.
    Two all-zero maps have nothing to compare: NaN.

    Args:
        map_a: reference importance maps (B, H, W), e.g. of the clean inputs.
        map_b: importance maps (B, H, W) compared with them, e.g. of the attacked inputs.
        k: number of top pixels, an int in [1, H*W].
        window: neighbourhood radius in pixels, an int >= 0 (the paper's 3x3 window is 1).

    Returns:
        Tensor (B,) in [0, 1] in the dtype of `map_a` (NaN where both maps are all <= 0).

    Raises:
        TypeError: a map is not a floating point tensor.
        ValueError: the maps are not (B, H, W) of the same shape or hold NaN or inf, `k` is not
            an int in [1, H*W], or `window` is not an int >= 0.

    Examples:
        >>> a = torch.zeros(1, 5, 5)
        >>> a[0, 2, 2] = 1.0
        >>> b = torch.roll(a, 1, dims=2)  # the top pixel moved one column to the right
        >>> lens_topk_intersection(a, b, 1).tolist()
        [1.0]
        >>> lens_topk_intersection(a, b, 1, window=0).tolist()  # top-k intersection
        [0.0]
    """
    check_maps(map_a, "map_a")
    check_maps(map_b, "map_b")
    check_same_shape(map_a, map_b, "map_a", "map_b")
    check_window(window)
    top_a, top_b = topk_support(map_a, k), topk_support(map_b, k)
    near_a = top_a
    if window > 0:
        size = 2 * window + 1
        near_a = F.max_pool2d(top_a[:, None].float(), size, stride=1, padding=window)[:, 0] > 0
    kept = (top_b & near_a).flatten(1)
    size_a, size_b = top_a.flatten(1).sum(1), top_b.flatten(1).sum(1)
    larger = torch.maximum(size_a, size_b).double()
    fraction = torch.where(larger > 0, kept.sum(1).double() / larger.clamp_min(1), torch.nan)
    return fraction.to(map_a.dtype)
