"""The fidelity part: MIF/LIF perturbation curves of each explainer (Brocki & Chung 2022).

Pixels are removed in order of the map, most important first (MIF: the score of the predicted
class should fall fast) and least important first (LIF: it should stay high); per image the areas
`fidelity/<explainer>/mif_auc`, `.../lif_auc` and the fidelity estimate AUC_LIF - AUC_MIF
(`.../fidelity`, higher is more faithful; a random map scores about 0), and the curves
`fidelity/<explainer>/curves` (per image, averaged by the engine).
"""

from __future__ import annotations

import torch

from robust_train.evaluation.cost import unit_costs
from robust_train.evaluation.measures import part_key
from robust_train.evaluation.parts.base import (
    Curve,
    ExplainerMap,
    MapPart,
    PartOutput,
    register_part,
)
from robust_train.explain import explainer_name, importance_map
from robust_train.metrics.functional import fidelity_curves, fidelity_estimate

__all__ = ["FidelityPart"]

MEASURES = ("mif_auc", "lif_auc", "fidelity")
LINES = ("MIF", "LIF")


@register_part("fidelity")
class FidelityPart(MapPart):
    """MIF/LIF curves and the fidelity estimate of every explainer of the settings."""

    map_measures = MEASURES

    def curve_keys(self) -> dict[str, tuple[int, tuple[str, ...]]]:
        points = self.settings.fidelity_steps + 1
        return {
            part_key("fidelity", explainer_name(e), "curves"): (points, LINES)
            for e in self.settings.explainers
        }

    def work(self) -> float:
        """Work per image, in attack steps (`robust_train.evaluation.cost`): per explainer one
        map and two curves of `fidelity_steps` forwards."""
        s = self.settings
        costs = [unit_costs(e, s) for e in s.explainers]
        return float(sum(c.map + 2 * s.fidelity_steps * c.forward for c in costs))

    def measure(self, item: ExplainerMap, out: PartOutput) -> None:
        s = self.settings
        curves = fidelity_curves(
            item.model,
            item.inputs,
            item.predictions,
            importance_map(item.explanation),
            n_steps=s.fidelity_steps,
            perturbation=s.fidelity_perturbation,
            internal_batch_size=s.internal_batch_size,
            seed=s.seed,
        )
        fractions, name = curves.fractions, item.explainer
        out.values[part_key("fidelity", name, "mif_auc")] = torch.trapezoid(
            curves.mif, fractions, dim=1
        )
        out.values[part_key("fidelity", name, "lif_auc")] = torch.trapezoid(
            curves.lif, fractions, dim=1
        )
        out.values[part_key("fidelity", name, "fidelity")] = fidelity_estimate(curves)
        out.curves[part_key("fidelity", name, "curves")] = Curve(
            xs=fractions.tolist(),
            xname="fraction of pixels removed",
            lines={"MIF": curves.mif, "LIF": curves.lif},
        )
