"""Penalties on explanations: one file per penalty, holding its pure per-sample function and its
weighted `PenaltyTerm`, registered by name (`get_penalty(name, **kwargs)`, `PENALTIES`).

Importing this package imports every file in it (`discover`, after the public names below), so a
new penalty is one new file; the names below are the public API."""

from robust_train.core.registry import discover
from robust_train.regularizers.adversarial import AdversarialTraining, adversarial_loss
from robust_train.regularizers.base import PENALTIES, PenaltyTerm, get_penalty, register_penalty
from robust_train.regularizers.composed import ComposedPenalty
from robust_train.regularizers.curvature import CURVATURE_METHODS, Curvature, curvature
from robust_train.regularizers.distillation import TeacherDistillation, distillation_loss
from robust_train.regularizers.gaussian_noise import GaussianNoiseTraining, gaussian_noise_loss
from robust_train.regularizers.gradient_norm import (
    GRADIENT_NORM_METHODS,
    InputGradientNorm,
    input_gradient_norm,
)
from robust_train.regularizers.ig_norm import IGNorm, IGSumNorm, ig_norm, ig_sum_norm
from robust_train.regularizers.igr import IGRPenalty
from robust_train.regularizers.lga import LocalGradientAlignment, local_gradient_alignment
from robust_train.regularizers.multi_map import MultiMapSmoothness, multi_map_smoothness
from robust_train.regularizers.smoothness import (
    ExplanationSmoothness,
    LocalLipschitzPenalty,
    explanation_smoothness,
)
from robust_train.regularizers.ssr import SmoothedGeometry, ssr_eigenvalue
from robust_train.regularizers.topk_mass import TopKMassPenalty, topk_mass

__all__ = [
    "CURVATURE_METHODS",
    "GRADIENT_NORM_METHODS",
    "PENALTIES",
    "AdversarialTraining",
    "ComposedPenalty",
    "Curvature",
    "ExplanationSmoothness",
    "GaussianNoiseTraining",
    "IGNorm",
    "IGRPenalty",
    "IGSumNorm",
    "InputGradientNorm",
    "LocalGradientAlignment",
    "LocalLipschitzPenalty",
    "MultiMapSmoothness",
    "PenaltyTerm",
    "SmoothedGeometry",
    "TeacherDistillation",
    "TopKMassPenalty",
    "adversarial_loss",
    "curvature",
    "distillation_loss",
    "explanation_smoothness",
    "gaussian_noise_loss",
    "get_penalty",
    "ig_norm",
    "ig_sum_norm",
    "input_gradient_norm",
    "local_gradient_alignment",
    "multi_map_smoothness",
    "register_penalty",
    "ssr_eigenvalue",
    "topk_mass",
]

# Files the names above do not cover (a new implementation) register themselves here.
discover(__name__)
