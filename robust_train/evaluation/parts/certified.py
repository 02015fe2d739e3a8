"""The certified part: both sides of the bracket on a smoothed explainer, per image.

For each explainer of the settings (`explainers`) the images are certified with
`robust_train.certify.certify_explanations` (randomized smoothing of the sparsified explainer,
Levine, Singla & Feizi 2019: `certify_samples` noisy copies of noise `certify_sigma`, failure
probability `certify_alpha` per image), explaining the predicted class, and then attacked at the
same L2 radius with the project's L2 fragility attack on the same smoothed explainer
(`robust_train.certify.attack_certificate`, `certify_attack_steps` steps; 0 skips it). Per image:

- `certified/<explainer>/certified_overlap`: the certified lower bound on the share of the
  smoothed map's top-k set kept at every x' within `certify_radius` (holds with probability
  >= 1 - alpha);
- `certified/<explainer>/smoothed_attack_overlap`: the share the attack left (a measured point,
  so an upper side of the truth, up to Monte Carlo error);
- `certified/<explainer>/certified_radius_half`: the L2 radius certifying half of the set.

The truth for the smoothed explainer lies between the first two. It certifies the smoothed
explainer, not the raw map the other parts score. Images the attacks skip (misclassified ones
under `correct_only`) are NaN, not measured.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from robust_train.certify import SmoothingOptions, attack_certificate, certify_explanations
from robust_train.evaluation.measures import Measure, part_key, register_measure
from robust_train.evaluation.parts.base import EvaluationPart, PartOutput, register_part
from robust_train.explain import bind_settings, explainer_name

__all__ = ["CertifiedPart"]

MEASURE_NAMES = ("certified_overlap", "smoothed_attack_overlap", "certified_radius_half")

for _measure in (
    Measure(
        "certified_overlap",
        "certified top-k overlap",
        True,
        meaning="certified lower bound (probability >= 1 - alpha) on the share of the smoothed "
        "map's top-k pixels kept within the L2 radius: higher is more robust",
    ),
    Measure(
        "smoothed_attack_overlap",
        "attacked top-k overlap (smoothed)",
        True,
        meaning="share of the smoothed map's top-k pixels the L2 attack at the same radius left: "
        "the measured side of the bracket, the truth lies between it and the certificate",
    ),
    Measure(
        "certified_radius_half",
        "radius certifying half the top-k",
        True,
        unit="L2",
        meaning="the L2 radius within which half of the top-k set is certified: higher is more "
        "robust",
    ),
):
    register_measure(_measure)


@register_part("certified")
class CertifiedPart(EvaluationPart):
    """The certificate and the L2 attack on the smoothed version of every attacked explainer."""

    def keys(self) -> tuple[str, ...]:
        return self.explainer_keys(MEASURE_NAMES, self.settings.explainers)

    def run(
        self, model: nn.Module, inputs: Tensor, labels: Tensor, predictions: Tensor
    ) -> PartOutput:
        s = self.settings
        everyone = torch.ones_like(labels, dtype=torch.bool)
        keep = predictions == labels if s.correct_only else everyone
        out = PartOutput()
        for explainer in s.explainers:
            name = explainer_name(explainer)
            values = self._measure(model, inputs[keep], predictions[keep], explainer)
            for measure, value in zip(MEASURE_NAMES, values, strict=True):
                full = torch.full((inputs.shape[0],), math.nan, dtype=torch.float64)
                full[keep.cpu()] = value.detach().double().cpu()
                out.values[part_key("certified", name, measure)] = full
        return out

    def _measure(
        self, model: nn.Module, inputs: Tensor, target: Tensor, explainer: object
    ) -> tuple[Tensor, Tensor, Tensor]:
        s = self.settings
        if inputs.shape[0] == 0:
            empty = torch.empty(0, dtype=torch.float64)
            return empty, empty, empty
        radius = s.certify_radius if s.certify_radius is not None else s.certify_sigma
        options = SmoothingOptions(
            explainer=bind_settings(explainer, s), sigma=s.certify_sigma,
            n_samples=s.certify_samples, alpha=s.certify_alpha, seed=s.seed,
            internal_batch_size=s.internal_batch_size,
        )  # fmt: skip
        cert = certify_explanations(
            model, inputs, target, radii=[radius], progress=self.progress, options=options
        )
        attacked = torch.full((inputs.shape[0],), math.nan, dtype=torch.float64)
        if s.certify_attack_steps:
            attacked = attack_certificate(
                model, inputs, cert, radius=radius, n_steps=s.certify_attack_steps, seed=s.seed,
                internal_batch_size=s.internal_batch_size, progress=self.progress,
            ).overlap  # fmt: skip
        return cert.certified_overlap[:, 0], attacked, cert.certified_radius(0.5)
