"""Robustness metrics: pure batched functions in `functional`, torchmetrics classes here.

Layers: `functional` needs only `robust_train.explain`; the classes may also use
`robust_train.attacks` (which sits below this package), so every import here is eager.
"""

from robust_train.metrics import functional
from robust_train.metrics.fidelity import Fidelity
from robust_train.metrics.fragility import ExplanationFragility
from robust_train.metrics.keyed import KeyedMean
from robust_train.metrics.lens import LENSTopkIntersection
from robust_train.metrics.lipschitz import LocalLipschitz
from robust_train.metrics.localisation import (
    PointingGame,
    RelevanceMassAccuracy,
    RelevanceRankAccuracy,
)

__all__ = [
    "ExplanationFragility",
    "Fidelity",
    "KeyedMean",
    "LENSTopkIntersection",
    "LocalLipschitz",
    "PointingGame",
    "RelevanceMassAccuracy",
    "RelevanceRankAccuracy",
    "functional",
]
