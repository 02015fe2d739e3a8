"""What a fragility attack returns: adversarial inputs, both maps and per-sample dissimilarities."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from robust_train.explain.lens import lens_topk_intersection

LENS_WINDOW = 1  # the 3x3 neighbourhood of Kamath et al. (2024), reported as `lens_topk`

_PER_SAMPLE = (
    "adversarial",
    "clean_map",
    "attacked_map",
    "target",
    "label_kept",
    "clean_label",
    "improved",
    "n_label_changes",
    "topk_intersection",
    "spearman",
    "kendall",
    "center_shift",
    "region_mass",
    "clean_region_mass",
    "measured",
)


@dataclass
class FragilityResult:
    """Outcome of `fragility_attack` on a batch (Ghorbani et al. 2019), one row per sample.

    Every map and metric comes from the ORIGINAL model (the softplus surrogate only chooses the
    attack direction). Metrics compare `clean_map` with `attacked_map`.

    Attributes:
        adversarial: the returned inputs (B, C, H, W): the best label-keeping iterate, or the clean
            input itself when no iterate kept the label or none improved on it.
        clean_map, attacked_map: importance maps (B, H, W) of the clean and returned inputs.
        target: (B,) the class whose explanation was attacked.
        label_kept: (B,) bool, the model's predicted label on `adversarial` equals its label on the
            clean input. Re-checked on the returned inputs; True by construction, because a
            label-changing iterate is never returned.
        clean_label: (B,) the model's predicted label on the clean input.
        improved: (B,) bool, some label-keeping iterate scored better than the clean input, so
            `adversarial` differs from it. False means the attack found nothing within budget.
        n_label_changes: (B,) int, how many of the `n_restarts * n_steps` iterates changed the
            predicted label (a large count says the budget `epsilon` is close to an evasion attack).
        topk_intersection, spearman, kendall, center_shift: (B,) dissimilarity metrics; top-k with
            `measure_k`; rank correlations are NaN for a constant map.
        region_mass, clean_region_mass: (B,) fraction of the (sum-normalised) attacked / clean map
            inside `target_region`; None unless `objective == "targeted"`.
        measured: (B,) bool, the attack direction was non-zero at some step, the clean map is
            not constant and the clean logits are finite. False means the sample was NOT
            attacked (a constant map, a diverged model, a piecewise-linear model without a
            surrogate): its metrics are NaN, never a perfect score. None in results built by
            hand.
        lens_topk: (B,) property, the locality-sensitive top-k intersection (LENS, Kamath et al.
            2024) of `clean_map` and `attacked_map` at `measure_k` with a 3x3 neighbourhood
            (`lens_topk_intersection`, window 1): an attacked top pixel within one pixel of a
            clean top pixel counts as kept; NaN where the sample was not measured.
        objective, epsilon, step_size, n_steps, n_restarts, k, measure_k: the attack settings used.
        norm: the threat model of `epsilon`: "linf" (the default) or "l2" (the ball intersected
            with [0, 1]).
        surrogate_beta: softplus beta of the model surrogate, where a direction that was run
            used it and met a ReLU call, else None (the model itself, or `surrogate_beta=None`).
            A map's own final ReLU (Grad-CAM's) is smoothed at the attack's `surrogate_beta` in
            every direction but "exact" (`smooth_map_clamps`).
        directions: the attack directions run (`robust_train.attacks._directions`), each image
            keeping its worst result over them; () for an objective that needs no gradient.
        explainer: name of the explainer.
    """

    adversarial: Tensor
    clean_map: Tensor
    attacked_map: Tensor
    target: Tensor
    label_kept: Tensor
    clean_label: Tensor
    improved: Tensor
    n_label_changes: Tensor
    topk_intersection: Tensor
    spearman: Tensor
    kendall: Tensor
    center_shift: Tensor
    objective: str
    epsilon: float
    step_size: float
    n_steps: int
    n_restarts: int
    k: int
    measure_k: int
    surrogate_beta: float | None
    explainer: str
    region_mass: Tensor | None = None
    clean_region_mass: Tensor | None = None
    measured: Tensor | None = None
    norm: str = "linf"
    directions: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.adversarial.shape[0])

    @property
    def lens_topk(self) -> Tensor:
        """The LENS top-k intersection of the clean and attacked maps (see the attributes)."""
        value = lens_topk_intersection(
            self.clean_map.detach(), self.attacked_map.detach(), self.measure_k, window=LENS_WINDOW
        )
        if self.measured is None:
            return value
        return value.masked_fill(~self.measured.to(value.device), float("nan"))

    def values(self) -> dict[str, Tensor]:
        """Per-sample float values (B,) of what this result reports, by measure name: the
        objective's `report_metrics` (NaN where the sample was not measured), `n_unmeasured`
        (1.0 for a sample the attack could not move) and `improved` (1.0 where a label-keeping
        iterate beat the clean input). Every caller that averages attack results reads these.

        Examples:
            >>> from robust_train.attacks import fragility_attack
            >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
            >>> res = fragility_attack(model, torch.rand(2, 1, 4, 4), torch.tensor([0, 1]),
            ...                        objective="random_sign", epsilon=0.1, n_steps=2, seed=0)
            >>> sorted(res.values())[:3], res.values()["spearman"].shape
            (['center_shift', 'improved', 'kendall'], torch.Size([2]))
        """
        from robust_train.attacks.objectives.base import get_objective

        measured = self.measured if self.measured is not None else torch.ones_like(self.improved)
        out = {
            name: getattr(self, name).float()
            for name in get_objective(self.objective).report_metrics
        }
        if self.clean_region_mass is not None:
            out["clean_region_mass"] = self.clean_region_mass.float()
        out["n_unmeasured"] = (~measured).float()
        out["improved"] = (self.improved & measured).float()
        return out

    @classmethod
    def concatenate(cls, results: Sequence[FragilityResult]) -> FragilityResult:
        """Join the results of several batches attacked with the same settings.

        Examples:
            >>> from robust_train.attacks import fragility_attack
            >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
            >>> parts = [fragility_attack(model, torch.rand(2, 1, 4, 4), torch.tensor([0, 1]),
            ...                           objective="random_sign", epsilon=0.1, n_steps=2, seed=s)
            ...          for s in range(2)]
            >>> len(FragilityResult.concatenate(parts))
            4
        """
        if not results:
            raise ValueError("`results` is empty: nothing to concatenate")
        first = results[0]
        settings = [f.name for f in dataclasses.fields(cls) if f.name not in _PER_SAMPLE]
        for other in results[1:]:
            for name in settings:
                if getattr(other, name) != getattr(first, name):
                    raise ValueError(
                        f"cannot concatenate results with different `{name}`: "
                        f"{getattr(first, name)!r} and {getattr(other, name)!r}"
                    )
        joined: dict[str, Any] = {}
        for name in _PER_SAMPLE:
            parts = [getattr(r, name) for r in results]
            if any(part is None for part in parts) and not all(p is None for p in parts):
                raise ValueError(f"cannot concatenate results where only some have `{name}`")
            joined[name] = None if parts[0] is None else torch.cat(parts, dim=0)
        joined.update({name: getattr(first, name) for name in settings})
        return cls(**joined)
