"""Evaluation parts, one file each, registered by name (`PARTS`, `register_part`)."""

from robust_train.evaluation.parts.base import (  # isort: skip  (the registry first)
    PARTS,
    AttackExamples,
    Curve,
    EvaluationPart,
    PartOutput,
    get_part,
    register_part,
)
from robust_train.evaluation.parts.fragility import FragilityPart  # isort: skip
from robust_train.evaluation.parts.lipschitz import LipschitzPart  # isort: skip
from robust_train.evaluation.parts.fidelity import FidelityPart  # isort: skip
from robust_train.evaluation.parts.certified import CertifiedPart  # isort: skip
from robust_train.evaluation.parts.faithfulness import FaithfulnessPart  # isort: skip

__all__ = [
    "PARTS",
    "AttackExamples",
    "CertifiedPart",
    "Curve",
    "EvaluationPart",
    "FaithfulnessPart",
    "FidelityPart",
    "FragilityPart",
    "LipschitzPart",
    "PartOutput",
    "get_part",
    "register_part",
]
