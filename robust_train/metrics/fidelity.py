"""torchmetrics shell around `fidelity_curves` / `fidelity_estimate` (Brocki & Chung 2022)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torchmetrics import Metric

from robust_train.core.runtime import make_generator, predict
from robust_train.explain.registry import resolve_explainer
from robust_train.metrics.functional.confidence import interval_from_moments
from robust_train.metrics.functional.fidelity import (
    FidelityCurves,
    fidelity_curves,
    fidelity_estimate,
)

__all__ = ["Fidelity"]


class Fidelity(Metric):
    """Mean MIF/LIF curves, mean AUCs and mean fidelity (AUC_LIF - AUC_MIF) over the images seen.

    State (fixed size, all reduced with "sum"): per-step sums of the MIF and LIF curves (S,), the
    sums of both AUCs, of the fidelity and of its square, and the image count. `compute` also
    returns a t confidence interval (`level`) of the mean fidelity from these moments.

    Update with `update(model, inputs, target, importance)` (target None: the predicted class;
    importance None: computed with the `explainer` given at construction, which needs gradients),
    or with precomputed `update(curves=FidelityCurves(...))` of the same fractions.

    Args:
        n_steps, include_end: the steps of the curves (S = n_steps + include_end points).
        explainer: optional explainer (callable or name) used when `importance` is not passed.
        level: confidence level of the reported interval.
        seed: seeds one CPU generator at construction (for "noise"/"imputation" perturbations).
        **kwargs: `fidelity_curves` settings (patch_size, perturbation, mean, blur_sigma,
            imputation_noise, score, internal_batch_size); others go to `torchmetrics.Metric`.

    Examples:
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
        >>> metric = Fidelity(n_steps=4)
        >>> metric.update(model, torch.rand(3, 1, 4, 4), None, torch.rand(3, 4, 4))
        >>> out = metric.compute()
        >>> out["mif_curve"].shape, float(out["mif_curve"][0])
        (torch.Size([5]), 1.0)
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    fractions: Tensor
    mif_sum: Tensor
    lif_sum: Tensor
    mif_auc_sum: Tensor
    lif_auc_sum: Tensor
    fidelity_sum: Tensor
    fidelity_sq_sum: Tensor
    count: Tensor

    _CURVE_KEYS = (
        "patch_size",
        "perturbation",
        "mean",
        "blur_sigma",
        "imputation_noise",
        "score",
        "internal_batch_size",
    )

    def __init__(
        self,
        n_steps: int = 20,
        *,
        include_end: bool = True,
        explainer: object = None,
        level: float = 0.95,
        seed: int | None = None,
        **kwargs: Any,
    ):
        curve_kwargs = {k: kwargs.pop(k) for k in self._CURVE_KEYS if k in kwargs}
        super().__init__(**kwargs)
        if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps <= 0:
            raise ValueError(f"`n_steps` must be a positive int, got {n_steps!r}")
        self.n_steps, self.include_end, self.level = n_steps, include_end, level
        self.explainer = (
            None if explainer is None else resolve_explainer(explainer, differentiable=False)[0]
        )
        self.curve_kwargs = curve_kwargs
        self._generator = make_generator(None, seed, torch.device("cpu"))
        n_points = n_steps + 1 if include_end else n_steps
        self.register_buffer("fractions", torch.arange(n_points) / n_steps, persistent=False)
        for name, size in (("mif_sum", n_points), ("lif_sum", n_points)):
            self.add_state(name, torch.zeros(size), dist_reduce_fx="sum")
        for name in ("mif_auc_sum", "lif_auc_sum", "fidelity_sum", "fidelity_sq_sum", "count"):
            self.add_state(name, torch.tensor(0.0), dist_reduce_fx="sum")

    def update(
        self,
        model: nn.Module | None = None,
        inputs: Tensor | None = None,
        target: Tensor | None = None,
        importance: Tensor | None = None,
        *,
        curves: FidelityCurves | None = None,
    ) -> None:
        """Add the curves of a batch (computed here, or passed as `curves=`)."""
        if curves is None:
            if model is None or inputs is None:
                raise ValueError(
                    "pass `model`, `inputs` (and `importance` or an explainer at "
                    "construction), or `curves=` alone"
                )
            if importance is None:
                importance = self._explain(model, inputs, target)
            curves = fidelity_curves(
                model,
                inputs,
                target,
                importance,
                n_steps=self.n_steps,
                include_end=self.include_end,
                generator=self._generator,
                **self.curve_kwargs,
            )
        elif model is not None or inputs is not None or importance is not None:
            raise ValueError(
                "pass either `curves=` or `model, inputs, target, importance`, not both"
            )
        fidelity = fidelity_estimate(curves)
        if curves.fractions.numel() != self.fractions.numel() or not torch.allclose(
            curves.fractions.to(self.fractions), self.fractions
        ):
            raise ValueError(
                f"`curves` must have the metric's fractions {self.fractions.tolist()}, "
                f"got {curves.fractions.tolist()}"
            )
        fractions = self.fractions
        self.mif_sum += curves.mif.detach().sum(0).to(self.mif_sum)
        self.lif_sum += curves.lif.detach().sum(0).to(self.lif_sum)
        self.mif_auc_sum += torch.trapezoid(
            curves.mif.detach().to(fractions), fractions, dim=1
        ).sum()
        self.lif_auc_sum += torch.trapezoid(
            curves.lif.detach().to(fractions), fractions, dim=1
        ).sum()
        fidelity = fidelity.detach().to(self.fidelity_sum)
        self.fidelity_sum += fidelity.sum()
        self.fidelity_sq_sum += (fidelity * fidelity).sum()
        self.count += fidelity.numel()

    def compute(self) -> dict[str, Tensor]:
        """Mean fidelity with its interval, mean AUCs, mean curves (S,) and their fractions (S,)."""
        ci = interval_from_moments(
            self.count, self.fidelity_sum, self.fidelity_sq_sum, level=self.level
        )
        dtype, device = self.fidelity_sum.dtype, self.fidelity_sum.device
        return {
            "fidelity": self.fidelity_sum / self.count,
            "fidelity_low": ci.low.to(device, dtype),
            "fidelity_high": ci.high.to(device, dtype),
            "mif_auc": self.mif_auc_sum / self.count,
            "lif_auc": self.lif_auc_sum / self.count,
            "mif_curve": self.mif_sum / self.count,
            "lif_curve": self.lif_sum / self.count,
            "fractions": self.fractions,
        }

    def _explain(self, model: nn.Module, inputs: Tensor, target: Tensor | None) -> Tensor:
        if self.explainer is None:
            raise ValueError("`importance` is None and the metric has no `explainer`: pass one")
        if target is None:
            target = predict(model, inputs)
        return self.explainer(model, inputs, target).detach()
