"""The reference of every attack: the same attacks on the explanation "map = input".

`robust_train.explain.input_reference` knows nothing of the model (Adebayo et al., "Sanity
Checks for Saliency Maps", NeurIPS 2018, show maps that barely depend on it). This part runs
every attack objective of the settings on it, on the images and with the settings of the
fragility part (only the label check uses the model), and reports the measures under
`attack/input_reference/<objective>/<measure>`, so each explainer's number sits beside what an
explanation that ignores the model scores under the same attack. `EvaluationSettings` adds this
part after "fragility" when `input_reference` is True (the default of `robust-train evaluate`).
"""

from __future__ import annotations

from torch import Tensor, nn

from robust_train.evaluation.parts.base import PartOutput, register_part
from robust_train.evaluation.parts.fragility import FragilityPart

__all__ = ["REFERENCE", "InputReferencePart"]

REFERENCE = "input_reference"


@register_part("input_reference")
class InputReferencePart(FragilityPart):
    """Every attack of the settings on `input_reference` (see the module docstring)."""

    def pairs(self) -> list[tuple[object, str]]:
        return [(REFERENCE, attack) for attack in self.settings.attacks]

    def map_measures(self, explainer: object) -> tuple[str, ...]:
        return ()  # the input is never blank, and its fidelity is not the model's

    def keys(self) -> tuple[str, ...]:
        return tuple(key for key in super().keys() if key != "n_attacked")

    def run(
        self, model: nn.Module, inputs: Tensor, labels: Tensor, predictions: Tensor
    ) -> PartOutput:
        out = super().run(model, inputs, labels, predictions)
        out.values.pop("n_attacked", None)  # the fragility part's count, the same images
        return out
