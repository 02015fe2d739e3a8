"""KeyedMean: means (or sums) of named per-image values, with 95% intervals, across DDP ranks.

The one reduction of the evaluation engine's per-image values: `robust-train evaluate`,
`compare`, the leaderboard and the monitors all reduce through it. NaN values (an image a measure
could not measure) are left out of that key's mean. State: for every key the sum, the sum of
squares and the count of the finite values, fixed-size tensors reduced with "sum" (never growing
lists, as torchmetrics advises); a key may hold a vector per image (a curve of S points), whose
state is then (S,).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor
from torchmetrics import Metric

from robust_train.metrics.functional.confidence import interval_from_moments

__all__ = ["KeyedMean"]


class KeyedMean(Metric):
    """Reduce named per-image values: the mean (or the sum) of each key's finite values.

    Args:
        shapes: key -> shape of one image's value (() for a scalar, (S,) for a curve).
        sums: keys reduced by their sum rather than their mean (counts).
        **kwargs: `torchmetrics.Metric` options.

    Examples:
        >>> metric = KeyedMean({"a": (), "n": ()}, sums=("n",))
        >>> metric.update({"a": torch.tensor([1.0, float("nan"), 3.0]), "n": torch.ones(3)})
        >>> {k: float(v) for k, v in metric.compute().items()}
        {'a': 2.0, 'n': 3.0}
        >>> int(metric.counts()["a"])
        2
        >>> low, high = metric.intervals()["a"]
        >>> bool(low < 2.0 < high)
        True
    """

    is_differentiable = False
    higher_is_better = None
    full_state_update = False

    def __init__(
        self, shapes: Mapping[str, tuple[int, ...]], sums: tuple[str, ...] = (), **kwargs: object
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.keys = tuple(shapes)
        self.sums = frozenset(sums)
        self._state_names: dict[str, tuple[str, str, str]] = {}
        for i, (key, shape) in enumerate(shapes.items()):
            names = (f"total_{i}", f"count_{i}", f"squares_{i}")
            for name in names:
                self.add_state(name, torch.zeros(shape, dtype=torch.float64), dist_reduce_fx="sum")
            self._state_names[key] = names

    def update(self, values: Mapping[str, Tensor]) -> None:  # type: ignore[override]
        """Add the per-image values (B,) or (B, S) of some of the keys."""
        for key, value in values.items():
            if key not in self._state_names:
                raise KeyError(f"KeyedMean got key {key!r}; it reduces {list(self.keys)}")
            total, count, squares = self._state_names[key]
            v = value.detach().to(getattr(self, total).device, torch.float64)
            finite = torch.isfinite(v)
            v = torch.where(finite, v, 0.0)
            setattr(self, total, getattr(self, total) + v.sum(0))
            setattr(self, squares, getattr(self, squares) + (v * v).sum(0))
            setattr(self, count, getattr(self, count) + finite.sum(0))

    def counts(self) -> dict[str, Tensor]:
        """Key -> number of finite values added (per point for a curve)."""
        return {key: getattr(self, names[1]) for key, names in self._state_names.items()}

    def intervals(self, level: float = 0.95) -> dict[str, tuple[float, float]]:
        """Scalar key -> (low, high) of the Student-t interval of its mean over images (NaN with
        fewer than two values); `sums` keys and curves have none."""
        out = {}
        for key, (total, count, squares) in self._state_names.items():
            t = getattr(self, total)
            if key in self.sums or t.dim() != 0:
                continue
            ci = interval_from_moments(getattr(self, count), t, getattr(self, squares), level=level)
            out[key] = (float(ci.low), float(ci.high))
        return out

    def compute(self) -> dict[str, Tensor]:
        """Key -> mean of its finite values (NaN when none), or their sum for `sums` keys."""
        out = {}
        for key, (total, count, _) in self._state_names.items():
            t, n = getattr(self, total), getattr(self, count)
            out[key] = t if key in self.sums else t / n.where(n > 0, torch.nan)
        return out
