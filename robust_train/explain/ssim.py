"""The structural similarity index (SSIM) of two batches of maps (Wang, Bovik, Sheikh &
Simoncelli, IEEE TIP 2004), as Adebayo et al. ("Sanity Checks for Saliency Maps", NeurIPS 2018)
use it to compare a map with the map of a randomised model.

Local means, variances and the covariance in a uniform `window` x `window` window (sample
covariance, N / (N - 1)), constants C1 = (0.01 R)^2 and C2 = (0.03 R)^2 with R = `data_range`,
averaged over the positions where the window lies inside the map: scikit-image's
`structural_similarity(a, b, win_size=window, data_range=R)` with its defaults (it filters the
whole map and then drops a border of (window - 1) / 2, which leaves the same positions).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["ssim"]

K1, K2 = 0.01, 0.03


def ssim(map_a: Tensor, map_b: Tensor, *, window: int = 7, data_range: float = 1.0) -> Tensor:
    """Mean SSIM of each pair of maps (B, H, W), (B,); the window shrinks to the largest odd
    size that fits a smaller map.

    Args:
        map_a, map_b: maps of the same shape (B, H, W).
        window: side of the uniform window (odd, >= 3).
        data_range: R, the range of the values (1 for maps scaled to [0, 1]).

    Returns:
        (B,) mean SSIM, 1 for identical maps.

    Raises:
        ValueError: shapes differ, or `window` is not an odd int >= 3.

    Examples:
        >>> a = torch.rand(2, 8, 8)
        >>> ssim(a, a).tolist()
        [1.0, 1.0]
    """
    if map_a.shape != map_b.shape or map_a.dim() != 3:
        raise ValueError(
            f"`map_a` and `map_b` must be (B, H, W) of one shape, got {tuple(map_a.shape)} and "
            f"{tuple(map_b.shape)}"
        )
    if isinstance(window, bool) or not isinstance(window, int) or window < 3 or window % 2 == 0:
        raise ValueError(f"`window` must be an odd int >= 3, got {window!r}")
    side = min(window, *map_a.shape[-2:])
    side -= 1 - side % 2
    a, b = map_a.double().unsqueeze(1), map_b.double().unsqueeze(1)

    def mean(x: Tensor) -> Tensor:
        return F.avg_pool2d(x, side, stride=1)

    n = side * side
    cov = n / (n - 1) if n > 1 else 1.0
    ua, ub = mean(a), mean(b)
    va = cov * (mean(a * a) - ua * ua)
    vb = cov * (mean(b * b) - ub * ub)
    vab = cov * (mean(a * b) - ua * ub)
    c1, c2 = (K1 * data_range) ** 2, (K2 * data_range) ** 2
    s = ((2 * ua * ub + c1) * (2 * vab + c2)) / ((ua * ua + ub * ub + c1) * (va + vb + c2))
    return s.flatten(1).mean(1).to(map_a.dtype if map_a.is_floating_point() else torch.float32)
