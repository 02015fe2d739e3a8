"""ExplanationFragility: dataset means of how far a fragility attack moves the explanations."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torchmetrics import Metric

from robust_train.attacks.fragility import fragility_attack
from robust_train.attacks.objectives.base import get_objective
from robust_train.attacks.result import FragilityResult
from robust_train.core.validation import check_positive

METRICS = ("topk_intersection", "spearman", "kendall", "center_shift")


class ExplanationFragility(Metric):
    """Mean top-k intersection, Spearman, Kendall tau and center shift under a fragility attack.

    The thin stateful shell around `robust_train.attacks.fragility_attack` (Ghorbani, Abid & Zou,
    AAAI 2019). `update` takes either a batch to attack, `update(model, inputs, target)`, with the
    attack settings held by the metric, or an attack already run, `update(result)`; the two forms
    accumulate the same thing. Only samples whose returned input kept the clean label are counted
    (all of them, by construction of the attack), and with `only_correct=True` only samples the
    model classifies as `target` (the protocol of RAR/ART: attack correctly classified images).
    NaN values (a rank correlation with a constant map) are left out of that metric's mean;
    samples the attack could not move (`FragilityResult.measured` False: zero direction, constant
    map, diverged model) have NaN metrics, are left out of every mean and counted in
    `n_unmeasured`, so they never count as robust.

    State: for each metric a sum and a count, plus the number of samples seen and attacks that
    improved on the clean input; fixed-size tensors reduced with "sum" across processes.

    Args:
        explainer, objective, epsilon, step_size, n_steps, k, n_restarts, surrogate_beta,
        measure_k, seed, internal_batch_size, target_region: passed to `fragility_attack` by
        `update(model, ...)`; `update(result)` refuses a result of another objective.
        only_correct: count only samples whose clean prediction equals `target`.
        **kwargs: torchmetrics Metric options.

    `compute()` returns a dict: the four means, `improved_rate` (fraction of counted samples where
    a label-keeping iterate beat the clean input), `n_samples` (samples counted) and
    `n_unmeasured` (counted samples the attack could not move, left out of the means).

    Examples:
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.Softplus(), nn.Linear(8, 3))
        >>> metric = ExplanationFragility(epsilon=0.1, n_steps=3, k=4)
        >>> x = torch.rand(6, 1, 4, 4)
        >>> metric.update(model, x, model(x).argmax(1))
        >>> sorted(metric.compute())[:3]
        ['center_shift', 'improved_rate', 'kendall']
    """

    is_differentiable = False
    higher_is_better = None
    full_state_update = False
    n_samples: Tensor
    n_improved: Tensor
    n_unmeasured: Tensor

    def __init__(
        self,
        *,
        explainer: Any = "saliency",
        objective: str = "topk",
        epsilon: float,
        step_size: float | None = None,
        n_steps: int = 50,
        k: int | None = None,
        n_restarts: int = 1,
        surrogate_beta: float | None = 10.0,
        measure_k: int | None = None,
        seed: int | None = None,
        internal_batch_size: int | None = None,
        target_region: Tensor | None = None,
        only_correct: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        objective_cls = get_objective(objective)
        if objective_cls.needs_region and target_region is None:
            raise ValueError(
                f"objective={objective!r} needs `target_region` (bool, B or 1, H, W), e.g. "
                "robust_train.attacks.target_region(H, W)"
            )
        self.objective = objective_cls.name
        check_positive(epsilon, "epsilon")
        check_positive(n_steps, "n_steps", integer=True)
        check_positive(n_restarts, "n_restarts", integer=True)
        self.attack_kwargs: dict[str, Any] = dict(
            explainer=explainer,
            objective=objective,
            epsilon=epsilon,
            step_size=step_size,
            n_steps=n_steps,
            k=k,
            n_restarts=n_restarts,
            surrogate_beta=surrogate_beta,
            measure_k=measure_k,
            seed=seed,
            internal_batch_size=internal_batch_size,
            target_region=target_region,
        )
        self.only_correct = only_correct
        for name in METRICS:
            self.add_state(f"{name}_sum", torch.tensor(0.0), dist_reduce_fx="sum")
            self.add_state(f"{name}_count", torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("n_samples", torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("n_improved", torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("n_unmeasured", torch.tensor(0), dist_reduce_fx="sum")

    def update(
        self,
        model_or_result: nn.Module | FragilityResult,
        inputs: Tensor | None = None,
        target: Tensor | None = None,
    ) -> None:
        """Attack a batch, `update(model, inputs, target)`, or add a result, `update(result)`."""
        if isinstance(model_or_result, FragilityResult):
            if inputs is not None or target is not None:
                raise ValueError("`update(result)` takes no `inputs` or `target`")
            result = model_or_result
            if result.objective != self.objective:
                raise ValueError(
                    f"this metric accumulates objective {self.objective!r}, got a result of "
                    f"{result.objective!r}: use one ExplanationFragility per objective"
                )
        elif isinstance(model_or_result, nn.Module):
            if inputs is None or target is None:
                raise ValueError("`update(model, inputs, target)` needs `inputs` and `target`")
            result = fragility_attack(model_or_result, inputs, target, **self.attack_kwargs)
        else:
            raise TypeError(
                "`update` takes a FragilityResult or (model, inputs, target), got "
                f"{type(model_or_result).__name__}"
            )
        counted = result.label_kept.to(self.n_samples.device)
        if self.only_correct:
            counted = counted & (result.clean_label == result.target).to(counted.device)
        self.n_samples += counted.sum()
        self.n_improved += (result.improved.to(counted.device) & counted).sum()
        if result.measured is not None:
            self.n_unmeasured += (counted & ~result.measured.to(counted.device)).sum()
        for name in METRICS:
            values = getattr(result, name).to(self.n_samples.device)
            valid = counted & ~torch.isnan(values)
            setattr(self, f"{name}_sum", getattr(self, f"{name}_sum") + values[valid].sum())
            setattr(self, f"{name}_count", getattr(self, f"{name}_count") + valid.sum())

    def compute(self) -> dict[str, Tensor]:
        """Means over the counted samples (NaN where nothing was counted)."""
        out = {
            name: getattr(self, f"{name}_sum") / getattr(self, f"{name}_count") for name in METRICS
        }
        out["improved_rate"] = self.n_improved / self.n_samples
        out["n_samples"] = self.n_samples.clone()
        out["n_unmeasured"] = self.n_unmeasured.clone()
        return out
