"""The Lipschitz part: the local Lipschitz estimate of each explainer (Alvarez-Melis & Jaakkola
2018), per image, under `lipschitz/<explainer>/lipschitz` (lower is more robust).

L(x) = max_{x' in B(x, r)} ||E(x) - E(x')||_2 / ||x - x'||_2, estimated from below with
`lipschitz_samples` explainer calls per image (`robust_train.metrics.functional.
local_lipschitz_estimate`), explaining the predicted class; the draws come from the settings'
seed, so evaluations (and a monitor's epochs) are compared on the same draws.
"""

from __future__ import annotations

from torch import Tensor, nn

from robust_train.evaluation.cost import unit_costs
from robust_train.evaluation.measures import part_key
from robust_train.evaluation.parts.base import EvaluationPart, PartOutput, register_part
from robust_train.explain import bind_settings, explainer_name
from robust_train.metrics.functional import local_lipschitz_estimate

__all__ = ["LipschitzPart"]


@register_part("lipschitz")
class LipschitzPart(EvaluationPart):
    """The local Lipschitz estimate of every explainer of the settings."""

    def keys(self) -> tuple[str, ...]:
        return self.explainer_keys(("lipschitz",))

    def work(self) -> float:
        """Work per image, in attack steps (`robust_train.evaluation.cost`): per explainer
        `lipschitz_samples` + 1 maps (steps of a gradient search)."""
        s = self.settings
        costs = [unit_costs(e, s) for e in s.explainers]
        each = [c.step if s.lipschitz_search == "gradient" else c.map for c in costs]
        return float(sum(each) * (s.lipschitz_samples + 1))

    def run(
        self, model: nn.Module, inputs: Tensor, labels: Tensor, predictions: Tensor
    ) -> PartOutput:
        s = self.settings
        assert s.lipschitz_radius is not None, "resolved settings"
        out = PartOutput()
        for explainer in s.explainers:
            out.values[part_key("lipschitz", explainer_name(explainer), "lipschitz")] = (
                local_lipschitz_estimate(
                    model,
                    inputs,
                    predictions,
                    explainer=bind_settings(explainer, s),
                    radius=s.lipschitz_radius,
                    n_samples=s.lipschitz_samples,
                    search=s.lipschitz_search,
                    normalize_maps=s.lipschitz_normalize,
                    internal_batch_size=s.internal_batch_size,
                    seed=s.seed,
                )
            )
        return out
