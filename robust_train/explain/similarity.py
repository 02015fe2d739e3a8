"""How alike two importance maps are: top-k intersection, rank correlations, center-of-mass shift.

These are the dissimilarity metrics with which Ghorbani, Abid & Zou, "Interpretation of Neural
Networks is Fragile" (AAAI 2019, arXiv 1710.10547), compare the explanation of a clean input with
the explanation of an attacked one; Kendall's tau was added by later work on robust attribution.
Every function is batched over maps (B, H, W), returns one value per map pair, shape (B,), in the
dtype of `map_a`, and runs in O(B * N log N) time and O(B * N) memory for N = H * W pixels, so
224 x 224 maps cost no more than a few sorts.

Undefined values: a rank correlation with a constant map (or a 1-pixel map) is NaN, as in
`scipy.stats.spearmanr` / `scipy.stats.kendalltau`; the center of mass of an all-zero map is NaN.
"""

from __future__ import annotations

import torch
from torch import Tensor

from robust_train.core.validation import check_maps, check_same_shape

__all__ = [
    "topk_intersection",
    "spearman_correlation",
    "kendall_tau",
    "center_of_mass",
    "center_of_mass_shift",
    "topk_mask",
    "topk_support",
]


def _flat_pair(map_a: Tensor, map_b: Tensor) -> tuple[Tensor, Tensor]:
    check_maps(map_a, "map_a")
    check_maps(map_b, "map_b")
    check_same_shape(map_a, map_b, "map_a", "map_b")
    return map_a.reshape(map_a.shape[0], -1), map_b.reshape(map_b.shape[0], -1)


def topk_mask(maps: Tensor, k: int) -> Tensor:
    """Boolean mask (B, H, W) of the k largest pixels of each map.

    Ties at the k-th largest value go to the pixel with the lower row-major index (a stable
    descending sort), so the choice is the same on every device; `torch.topk` leaves it unspecified.

    Args:
        maps: maps (B, H, W).
        k: number of pixels to keep, an int in [1, H*W].

    Returns:
        Boolean tensor (B, H, W) with k True pixels per map.

    Raises:
        TypeError: `maps` is not a floating point tensor.
        ValueError: `maps` is not (B, H, W) or holds NaN or inf, or `k` is out of range.

    Examples:
        >>> topk_mask(torch.tensor([[[1.0, 3.0], [3.0, 0.0]]]), 2).tolist()
        [[[False, True], [True, False]]]
    """
    check_maps(maps, "maps")
    flat = maps.reshape(maps.shape[0], -1)
    n = flat.shape[1]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise ValueError(
            f"`k` must be an int in [1, H*W] = [1, {n}] for maps of size "
            f"{maps.shape[1]}x{maps.shape[2]}, got {k!r}"
        )
    order = torch.sort(flat.detach(), dim=1, descending=True, stable=True).indices[:, :k]
    mask = torch.zeros_like(flat, dtype=torch.bool).scatter_(1, order, True)
    return mask.view_as(maps)


def topk_support(maps: Tensor, k: int) -> Tensor:
    """Boolean mask (B, H, W) of the k most important pixels of each importance map: its k largest
    pixels (`topk_mask`) that have a positive value. A pixel of value <= 0 carries no importance,
    so a map with fewer than k positive pixels has fewer than k of them (an all-zero map none).

    Examples:
        >>> topk_support(torch.tensor([[[0.0, 3.0], [0.0, 0.0]]]), 2).tolist()
        [[[False, True], [False, False]]]
    """
    return topk_mask(maps, k) & (maps > 0)


def topk_intersection(map_a: Tensor, map_b: Tensor, k: int) -> Tensor:
    """Fraction of the k most important pixels that two importance maps share (Ghorbani et al.
    2019): |S_a ∩ S_b| / max(|S_a|, |S_b|), with S the k largest pixels of positive value
    (`topk_support`).

    Where both maps have at least k positive pixels this is Ghorbani's |top_k(a) ∩ top_k(b)| / k.
    A map cut to exactly 0 (Grad-CAM's ReLU, IG or DeepLIFT on a zero background) can have fewer:
    its zero pixels are not ranked among its most important, so they never count as agreement
    (broken by index, two sparse maps would "share" the same top-left zero pixels, which
    flatters sparse maps most; the design notes compare both rules).
    Dividing by the larger set keeps identical maps at 1 and counts the pixels the other map
    newly ranks among its top as lost. Ties at the k-th
    positive value go to the lower index, as in `topk_mask`. Two all-zero maps have nothing to
    compare: NaN, as a rank correlation with a constant map.

    Args:
        map_a, map_b: importance maps (B, H, W) of the same shape.
        k: number of top pixels, an int in [1, H*W].

    Returns:
        Tensor (B,) with values in [0, 1] (NaN where both maps are all <= 0).

    Raises:
        TypeError: a map is not a tensor.
        ValueError: the maps are not (B, H, W) of the same shape, or `k` is not an int in
            [1, H*W].

    Examples:
        >>> a = torch.tensor([[[4.0, 3.0], [2.0, 1.0]]])
        >>> b = torch.tensor([[[4.0, 1.0], [2.0, 3.0]]])
        >>> topk_intersection(a, b, 2).tolist()
        [0.5]
        >>> sparse = torch.tensor([[[0.0, 0.0], [5.0, 0.0]]])
        >>> topk_intersection(sparse, sparse.flip(-1), 2).tolist()  # the zeros are no agreement
        [0.0]
    """
    _flat_pair(map_a, map_b)
    a, b = topk_support(map_a, k).flatten(1), topk_support(map_b, k).flatten(1)
    return shared_fraction(a, b).to(map_a.dtype)


def shared_fraction(a: Tensor, b: Tensor) -> Tensor:
    """|a ∩ b| / max(|a|, |b|) of boolean masks (B, N), float64 (B,); NaN where both are empty."""
    size = torch.maximum(a.sum(1), b.sum(1)).double()
    shared = (a & b).sum(1).double()
    return torch.where(size > 0, shared / size.clamp_min(1), torch.nan)


def _tie_groups(ordered: Tensor) -> tuple[Tensor, Tensor]:
    """For each position of rows sorted ascending: the first and last position of its group of
    equal values, int64 (B, N). One pass of cumulative max/min, cheaper on the CPU than two
    `searchsorted` batched over rows."""
    n = ordered.shape[1]
    positions = torch.arange(n, device=ordered.device).expand_as(ordered)
    starts = torch.ones_like(ordered, dtype=torch.bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    ends = torch.ones_like(starts)
    ends[:, :-1] = starts[:, 1:]
    first = torch.where(starts, positions, 0).cummax(dim=1).values
    last = torch.where(ends, positions, n - 1).flip(1).cummin(dim=1).values.flip(1)
    return first, last


def _average_ranks(flat: Tensor) -> Tensor:
    """1-based ranks with ties given their average rank (scipy's 'average'), float64 (B, N)."""
    ordered, order = flat.detach().sort(dim=1, stable=True)
    first, last = _tie_groups(ordered)
    ranks = (first + last + 2).double() / 2
    return torch.empty_like(ranks).scatter_(1, order, ranks)


def spearman_correlation(map_a: Tensor, map_b: Tensor) -> Tensor:
    """Spearman's rank correlation between two maps, pixel by pixel (Ghorbani et al. 2019).

    Tied values get their average rank, so the result equals `scipy.stats.spearmanr` on the
    flattened maps. A constant map has no ranking: the result is NaN, as in scipy.

    Args:
        map_a, map_b: maps (B, H, W) of the same shape.

    Returns:
        Tensor (B,) in [-1, 1] (NaN where a map is constant).

    Raises:
        TypeError: a map is not a floating point tensor.
        ValueError: the maps are not (B, H, W) of the same shape, or hold NaN or inf.

    Examples:
        >>> a = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])
        >>> spearman_correlation(a, a.flip(-1).flip(-2)).tolist()
        [-1.0]
    """
    a, b = _flat_pair(map_a, map_b)
    ra, rb = _average_ranks(a), _average_ranks(b)
    ra = ra - ra.mean(1, keepdim=True)
    rb = rb - rb.mean(1, keepdim=True)
    var_a, var_b = (ra * ra).sum(1), (rb * rb).sum(1)
    rho = (ra * rb).sum(1) / (var_a * var_b).sqrt()
    rho = torch.where((var_a > 0) & (var_b > 0), rho.clamp(-1.0, 1.0), torch.nan)
    return rho.to(map_a.dtype)


def _min_ranks(flat: Tensor) -> Tensor:
    """0-based integer ranks, equal values sharing the lowest rank of their group, int64 (B, N)."""
    ordered, order = flat.detach().sort(dim=1, stable=True)
    first, _ = _tie_groups(ordered)
    return torch.empty_like(first).scatter_(1, order, first)


def _tied_pairs(values: Tensor) -> Tensor:
    """Number of pairs with equal values per row, sum over groups of t (t - 1) / 2, int64 (B,)."""
    first, last = _tie_groups(values.sort(dim=1).values)
    return (last - first).sum(1) // 2


def _count_inversions(seq: Tensor) -> Tensor:
    """Pairs i < j with seq[i] > seq[j] per row (B,), by a batched bottom-up merge sort.

    At each level adjacent sorted blocks are compared with `searchsorted` (how many elements of the
    left block exceed each element of the right block), then merged by sorting: O(N log^2 N) time,
    O(N) memory per row. Rows are padded to a power of two with a value above every element, placed
    last, which adds no inversion.
    """
    rows, n = seq.shape
    size = 1 << max(0, (n - 1).bit_length())
    if size > n:
        pad = seq.new_full((rows, size - n), int(seq.max()) + 1)
        seq = torch.cat([seq, pad], dim=1)
    total = torch.zeros(rows, dtype=torch.int64, device=seq.device)
    width = 1
    while width < size:
        blocks = seq.view(rows, size // (2 * width), 2, width)
        left = blocks[:, :, 0].reshape(-1, width).contiguous()
        right = blocks[:, :, 1].reshape(-1, width).contiguous()
        not_above = torch.searchsorted(left, right, right=True)
        total += (width - not_above).view(rows, -1).sum(1)
        seq = seq.view(rows, -1, 2 * width).sort(dim=2).values.view(rows, size)
        width *= 2
    return total


def kendall_tau(map_a: Tensor, map_b: Tensor) -> Tensor:
    """Kendall's tau-b between two maps, pixel by pixel, with ties; equals `scipy.stats.kendalltau`.

    tau_b = (n0 - n1 - n2 + n3 - 2 S) / sqrt((n0 - n1)(n0 - n2)) with n0 = N (N - 1) / 2 pairs,
    n1 / n2 pairs tied in a / b, n3 pairs tied in both and S discordant pairs, counted after sorting
    the pixels by (a, b) (Knight 1966). S is counted by a batched merge sort, so the cost is
    O(N log^2 N) per map and O(N) memory, not the O(N^2) of all pairs: 224 x 224 maps are fine.
    A constant map gives NaN, as in scipy. Arguments, result and errors as
    `spearman_correlation`'s: maps (B, H, W) of the same shape in, a tensor (B,) in [-1, 1] out.

    Examples:
        >>> a = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])
        >>> b = torch.tensor([[[1.0, 3.0], [2.0, 4.0]]])
        >>> round(kendall_tau(a, b).item(), 4)
        0.6667
    """
    a, b = _flat_pair(map_a, map_b)
    n = a.shape[1]
    ra, rb = _min_ranks(a), _min_ranks(b)
    joint = ra * n + rb  # equal exactly when the pixel pair is tied in both maps
    order = joint.argsort(dim=1, stable=True)
    discordant = _count_inversions(rb.gather(1, order))
    n0 = n * (n - 1) // 2
    tied_a, tied_b, tied_both = _tied_pairs(ra), _tied_pairs(rb), _tied_pairs(joint)
    numerator = (n0 - tied_a - tied_b + tied_both - 2 * discordant).double()
    denominator = ((n0 - tied_a).double() * (n0 - tied_b).double()).sqrt()
    tau = torch.where(denominator > 0, numerator / denominator, torch.nan).clamp(-1.0, 1.0)
    return tau.to(map_a.dtype)


def center_of_mass(maps: Tensor) -> Tensor:
    """Center of mass (row, col) in pixels of each non-negative map, shape (B, 2); differentiable.

    C = sum_ij I_ij (i, j) / sum_ij I_ij (Ghorbani et al. 2019), with pixel (0, 0) at the top left.
    An all-zero map has no center: both coordinates are NaN.

    Args:
        maps: non-negative maps (B, H, W).

    Returns:
        Tensor (B, 2) of (row, col), NaN for an all-zero map.

    Raises:
        TypeError: `maps` is not a floating point tensor.
        ValueError: `maps` is not (B, H, W), or holds NaN or inf.

    Examples:
        >>> center_of_mass(torch.tensor([[[0.0, 1.0], [0.0, 3.0]]])).tolist()
        [[0.75, 1.0]]
    """
    check_maps(maps, "maps")
    height, width = maps.shape[1:]
    rows = torch.arange(height, dtype=maps.dtype, device=maps.device)
    cols = torch.arange(width, dtype=maps.dtype, device=maps.device)
    mass = maps.sum(dim=(1, 2))
    center = torch.stack([(maps.sum(2) * rows).sum(1), (maps.sum(1) * cols).sum(1)], dim=1)
    return center / mass[:, None]


def center_of_mass_shift(map_a: Tensor, map_b: Tensor) -> Tensor:
    """L2 distance in pixels between the centers of mass of two maps (Ghorbani et al. 2019).

    Each map is normalised by its sum, so the scale of a map does not matter. Maps must be
    non-negative (importance maps); a map that is all zero has no center and gives NaN.

    Args:
        map_a, map_b: maps (B, H, W) of the same shape.

    Returns:
        Tensor (B,), in pixels (NaN where a map is all zero).

    Raises:
        TypeError: a map is not a floating point tensor.
        ValueError: the maps are not (B, H, W) of the same shape, hold NaN or inf, or have a
            negative value.

    Examples:
        >>> a = torch.zeros(1, 4, 4); a[0, 0, 0] = 1.0
        >>> b = torch.zeros(1, 4, 4); b[0, 3, 2] = 5.0
        >>> center_of_mass_shift(a, b).tolist()
        [3.605551242828369]
    """
    _flat_pair(map_a, map_b)
    for name, maps in (("map_a", map_a), ("map_b", map_b)):
        if bool((maps < 0).any()):
            raise ValueError(
                f"`{name}` must be a non-negative importance map for a center of mass, "
                f"got a minimum of {float(maps.min()):.4g}"
            )
    return (center_of_mass(map_a) - center_of_mass(map_b)).norm(dim=1)
