"""KeyedMean: means (or sums) of named per-image values, correct across DDP ranks.

The one reduction of the evaluation engine's per-image values: `robust-train evaluate` and the
monitors both average through it. NaN values (an image a measure could not measure) are left out
of that key's mean. State: for every key a sum and a count of the finite values, fixed-size
tensors reduced with "sum" (never growing lists, torchmetrics issue 2492); a key may hold a
vector per image (a curve of S points), whose state is then (S,).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor
from torchmetrics import Metric

__all__ = ["KeyedMean"]


class KeyedMean(Metric):
    """Reduce named per-image values: the mean (or the sum) of each key's finite values.

    Args:
        shapes: key -> shape of one image's value (() for a scalar, (S,) for a curve).
        sums: keys reduced by their sum rather than their mean (counts).
        **kwargs: `torchmetrics.Metric` options.

    Example:
        >>> metric = KeyedMean({"a": (), "n": ()}, sums=("n",))
        >>> metric.update({"a": torch.tensor([1.0, float("nan"), 3.0]), "n": torch.ones(3)})
        >>> {k: float(v) for k, v in metric.compute().items()}
        {'a': 2.0, 'n': 3.0}
        >>> int(metric.counts()["a"])
        2
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
        self._state_names: dict[str, tuple[str, str]] = {}
        for i, (key, shape) in enumerate(shapes.items()):
            total, count = f"total_{i}", f"count_{i}"
            self.add_state(total, torch.zeros(shape, dtype=torch.float64), dist_reduce_fx="sum")
            self.add_state(count, torch.zeros(shape, dtype=torch.float64), dist_reduce_fx="sum")
            self._state_names[key] = (total, count)

    def update(self, values: Mapping[str, Tensor]) -> None:  # type: ignore[override]
        """Add the per-image values (B,) or (B, S) of some of the keys."""
        for key, value in values.items():
            if key not in self._state_names:
                raise KeyError(f"KeyedMean got key {key!r}; it reduces {list(self.keys)}")
            total, count = self._state_names[key]
            v = value.detach().to(getattr(self, total).device, torch.float64)
            finite = torch.isfinite(v)
            setattr(self, total, getattr(self, total) + torch.where(finite, v, 0.0).sum(0))
            setattr(self, count, getattr(self, count) + finite.sum(0))

    def counts(self) -> dict[str, Tensor]:
        """Key -> number of finite values added (per point for a curve)."""
        return {key: getattr(self, count) for key, (_, count) in self._state_names.items()}

    def compute(self) -> dict[str, Tensor]:
        """Key -> mean of its finite values (NaN when none), or their sum for `sums` keys."""
        out = {}
        for key, (total, count) in self._state_names.items():
            t, n = getattr(self, total), getattr(self, count)
            out[key] = t if key in self.sums else t / n.where(n > 0, torch.nan)
        return out
