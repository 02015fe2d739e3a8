"""The reference of every attack: the same attacks on the explanation "map = input".

`robust_train.explain.input_reference` knows nothing of the model (Adebayo et al., "Sanity
Checks for Saliency Maps", NeurIPS 2018, show maps that barely depend on it). This part runs
every attack objective of the settings on it, on the images and with the settings of the
fragility part (only the label check uses the model), and reports the measures under
`attack/input_reference/<objective>/<measure>`, so each explainer's number sits beside what an
explanation that ignores the model scores under the same attack. `EvaluationSettings` adds this
part after "fragility" when `input_reference` is True (the default of `robust-train evaluate`).

`beats_reference` (run by the engine after every part) adds, per attacked explainer and
objective, `attack/<explainer>/<objective>/beats_input`: 1 where the explainer's top-k
intersection under the attack is above the reference's on the same image, so its mean is the
share of images where the model's map is more robust than the input itself.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from robust_train.evaluation.measures import Measure, register_measure
from robust_train.evaluation.parts.base import PartOutput, register_part
from robust_train.evaluation.parts.fragility import FragilityPart

__all__ = ["REFERENCE", "InputReferencePart", "beats_reference"]

REFERENCE = "input_reference"
BEATS = "beats_input"

register_measure(
    Measure(
        BEATS,
        "share above 'map = input'",
        True,
        meaning="share of the attacked images whose top-k intersection under this attack is "
        "above that of the explanation 'map = input' under the same attack (ties count as not "
        "above): below one half, the map is less robust than the input itself on most images",
    )
)


def beats_reference(values: dict[str, Tensor]) -> dict[str, Tensor]:
    """`attack/<e>/<o>/beats_input` for every `attack/<e>/<o>/topk_intersection` with a
    reference value `attack/input_reference/<o>/topk_intersection` (NaN where either is).

    Examples:
        >>> v = {"attack/saliency/topk/topk_intersection": torch.tensor([0.5, 0.9, float("nan")]),
        ...      "attack/input_reference/topk/topk_intersection": torch.tensor([0.6, 0.6, 0.6])}
        >>> beats_reference(v)["attack/saliency/topk/beats_input"].tolist()
        [0.0, 1.0, nan]
    """
    out = {}
    for key, value in values.items():
        parts = key.split("/")
        if len(parts) != 4 or parts[0] != "attack" or parts[3] != "topk_intersection":
            continue
        reference = values.get(f"attack/{REFERENCE}/{parts[2]}/topk_intersection")
        if parts[1] == REFERENCE or reference is None:
            continue
        both = torch.isfinite(value) & torch.isfinite(reference)
        above = (value > reference).float()
        out[f"attack/{parts[1]}/{parts[2]}/{BEATS}"] = torch.where(
            both, above, torch.full_like(above, float("nan"))
        )
    return out


@register_part("input_reference")
class InputReferencePart(FragilityPart):
    """Every attack of the settings on `input_reference` (see the module docstring)."""

    def pairs(self) -> list[tuple[object, str]]:
        return [(REFERENCE, attack) for attack in self.settings.attacks]

    def follows_model(self, explainer: object) -> bool:
        return False  # the input itself: no surrogate changes it

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
