"""torchmetrics shell around `local_lipschitz_estimate` (Alvarez-Melis & Jaakkola 2018)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torchmetrics import Metric

from robust_train.core.runtime import make_generator
from robust_train.core.validation import check_finite
from robust_train.metrics.functional.lipschitz import local_lipschitz_estimate

__all__ = ["LocalLipschitz"]


class LocalLipschitz(Metric):
    """Mean and max of the local Lipschitz estimate of an explainer over the images seen.

    Design: the metric holds the explainer and the estimate's settings; the model is passed to
    each `update` (it is never stored, so it is not part of the metric's state_dict and `.to()`
    does not move it). `update(values=...)` accumulates estimates computed elsewhere instead.
    State: sum, sum of squares and count (reduced with "sum") and the max (reduced with "max"):
    fixed size, whatever the number of images. The explainer needs gradients, so do not update
    under `torch.inference_mode` (Lightning's validation loop runs under it).

    Args:
        explainer: callable explainer or name (see `local_lipschitz_estimate`).
        seed: seeds one CPU generator at construction, advanced by every update (None: the
            global RNG). Offsets are drawn on the CPU and moved to the data's device.
        **estimate_kwargs: settings of `local_lipschitz_estimate` (radius, n_samples, search, norm,
            sampling, normalize_maps, divide_by_distance, map, map_norm, n_steps, step_size, clamp,
            internal_batch_size); other keyword arguments go to `torchmetrics.Metric`.

    Examples:
        >>> from robust_train.explain import saliency
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
        >>> metric = LocalLipschitz(explainer=saliency, n_samples=4, seed=0)
        >>> metric.update(model, torch.rand(2, 1, 4, 4), torch.tensor([0, 1]))
        >>> metric.update(values=torch.tensor([1.0, 3.0]))
        >>> {k: round(float(v), 3) for k, v in metric.compute().items()}
        {'mean': 1.0, 'max': 3.0, 'std': 1.414}
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False
    total: Tensor
    total_sq: Tensor
    count: Tensor
    maximum: Tensor

    _ESTIMATE_KEYS = (
        "radius",
        "n_samples",
        "search",
        "norm",
        "sampling",
        "normalize_maps",
        "divide_by_distance",
        "map",
        "map_norm",
        "n_steps",
        "step_size",
        "clamp",
        "internal_batch_size",
    )

    def __init__(self, explainer: object, *, seed: int | None = None, **kwargs: Any):
        estimate_kwargs = {k: kwargs.pop(k) for k in self._ESTIMATE_KEYS if k in kwargs}
        super().__init__(**kwargs)
        self.explainer = explainer
        self.estimate_kwargs = estimate_kwargs
        self._generator = make_generator(None, seed, torch.device("cpu"))
        self.add_state("total", torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("total_sq", torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("maximum", torch.tensor(0.0), dist_reduce_fx="max")

    def update(
        self,
        model: nn.Module | None = None,
        inputs: Tensor | None = None,
        target: Tensor | None = None,
        *,
        values: Tensor | None = None,
    ) -> None:
        """Estimate on a batch (`model, inputs, target`) or add precomputed `values` (B,)."""
        if values is None:
            if model is None or inputs is None or target is None:
                raise ValueError("pass `model`, `inputs` and `target`, or `values=` alone")
            values = local_lipschitz_estimate(
                model,
                inputs,
                target,
                explainer=self.explainer,
                generator=self._generator,
                **self.estimate_kwargs,
            )
        elif model is not None or inputs is not None or target is not None:
            raise ValueError("pass either `values=` or `model, inputs, target`, not both")
        values = self._check_values(values)
        self.total += values.sum()
        self.total_sq += (values * values).sum()
        self.count += values.numel()
        if values.numel():
            self.maximum = torch.maximum(self.maximum, values.max())

    def compute(self) -> dict[str, Tensor]:
        """{"mean", "max", "std"} over every image seen (std: n - 1 in the denominator)."""
        mean = self.total / self.count
        variance = (self.total_sq - self.count * mean**2) / (self.count - 1)
        return {"mean": mean, "max": self.maximum, "std": variance.clamp_min(0).sqrt()}

    def _check_values(self, values: object) -> Tensor:
        if not isinstance(values, Tensor) or values.dim() != 1:
            shape = tuple(values.shape) if isinstance(values, Tensor) else type(values).__name__
            raise ValueError(f"`values` must be a tensor of per-image estimates (B,), got {shape}")
        check_finite(values, "values")
        if values.numel() and float(values.min()) < 0:
            raise ValueError(
                f"`values` must be >= 0 (Lipschitz estimates), got min {float(values.min())}"
            )
        return values.detach().to(self.total.device, self.total.dtype)
