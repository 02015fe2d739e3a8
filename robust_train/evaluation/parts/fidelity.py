"""The fidelity part: MIF/LIF perturbation curves of each explainer (Brocki & Chung 2022).

Pixels are removed in order of the map, most important first (MIF: the score of the predicted
class should fall fast) and least important first (LIF: it should stay high); per image the areas
`fidelity/<explainer>/mif_auc`, `.../lif_auc` and the fidelity estimate AUC_LIF - AUC_MIF
(`.../fidelity`, higher is more faithful; a random map scores about 0), and the curves
`fidelity/<explainer>/curves` (per image, averaged by the engine).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from robust_train.evaluation.measures import part_key
from robust_train.evaluation.parts.base import Curve, EvaluationPart, PartOutput, register_part
from robust_train.explain import explainer_name, importance_map
from robust_train.metrics.functional import fidelity_curves, fidelity_estimate

__all__ = ["FidelityPart"]

MEASURES = ("mif_auc", "lif_auc", "fidelity")
LINES = ("MIF", "LIF")


@register_part("fidelity")
class FidelityPart(EvaluationPart):
    """MIF/LIF curves and the fidelity estimate of every explainer of the settings."""

    def keys(self) -> tuple[str, ...]:
        return self.explainer_keys(MEASURES)

    def curve_keys(self) -> dict[str, tuple[int, tuple[str, ...]]]:
        points = self.settings.fidelity_steps + 1
        return {
            part_key("fidelity", explainer_name(e), "curves"): (points, LINES)
            for e in self.settings.explainers
        }

    def work(self) -> float:
        """Per explainer one map and two curves of `fidelity_steps` forwards (a forward counted
        as a third of an explainer call)."""
        return len(self.settings.explainers) * (1 + 2 * self.settings.fidelity_steps / 3)

    def run(
        self, model: nn.Module, inputs: Tensor, labels: Tensor, predictions: Tensor
    ) -> PartOutput:
        s = self.settings
        out = PartOutput()
        for name, explanation in self.explanations(model, inputs, predictions):
            curves = fidelity_curves(
                model,
                inputs,
                predictions,
                importance_map(explanation),
                n_steps=s.fidelity_steps,
                perturbation=s.fidelity_perturbation,
                internal_batch_size=s.internal_batch_size,
                seed=s.seed,
            )
            fractions = curves.fractions
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
        return out
