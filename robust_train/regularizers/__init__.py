"""Penalties on explanations: pure per-sample functions and weighted nn.Module loss terms."""

from robust_train.regularizers.curvature import CURVATURE_METHODS, curvature
from robust_train.regularizers.gradient_norm import GRADIENT_NORM_METHODS, input_gradient_norm
from robust_train.regularizers.smoothness import explanation_smoothness
from robust_train.regularizers.terms import (
    PENALTIES,
    Curvature,
    ExplanationSmoothness,
    InputGradientNorm,
    LocalLipschitzPenalty,
    PenaltyTerm,
    get_penalty,
)

__all__ = [
    "CURVATURE_METHODS",
    "GRADIENT_NORM_METHODS",
    "PENALTIES",
    "Curvature",
    "ExplanationSmoothness",
    "InputGradientNorm",
    "LocalLipschitzPenalty",
    "PenaltyTerm",
    "curvature",
    "explanation_smoothness",
    "get_penalty",
    "input_gradient_norm",
]
