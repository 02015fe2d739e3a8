"""The penalty terms by their historical module path (configs and checkpoints name it).

Each term now lives in the file of its penalty function and registers itself by name
(`robust_train.regularizers.base`); this module re-exports them so
`robust_train.regularizers.terms.<ClassName>` keeps working. In configs:

    penalties:
      - class_path: robust_train.regularizers.ExplanationSmoothness
        init_args: {weight: 1.0, radius: 0.1}
"""

from __future__ import annotations

from robust_train.regularizers.adversarial import AdversarialTraining
from robust_train.regularizers.base import PENALTIES, PenaltyTerm, get_penalty, register_penalty
from robust_train.regularizers.curvature import Curvature
from robust_train.regularizers.gradient_norm import InputGradientNorm
from robust_train.regularizers.ig_norm import IGNorm, IGSumNorm
from robust_train.regularizers.igr import IGRPenalty
from robust_train.regularizers.smoothness import ExplanationSmoothness, LocalLipschitzPenalty
from robust_train.regularizers.ssr import SmoothedGeometry

__all__ = [
    "PENALTIES",
    "AdversarialTraining",
    "Curvature",
    "ExplanationSmoothness",
    "IGNorm",
    "IGRPenalty",
    "IGSumNorm",
    "InputGradientNorm",
    "LocalLipschitzPenalty",
    "PenaltyTerm",
    "SmoothedGeometry",
    "get_penalty",
    "register_penalty",
]
