"""Evaluation parts, one file each, registered by name (`PARTS`, `register_part`).

Importing this package imports every file in it (`discover`, after the public names below), so a
new part is one new file.
"""

from robust_train.core.registry import discover  # isort: skip


from robust_train.evaluation.parts.base import (  # isort: skip  (the registry first)
    PARTS,
    AttackExamples,
    Curve,
    EvaluationPart,
    ExplainerMap,
    MapPart,
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
    "ExplainerMap",
    "FaithfulnessPart",
    "FidelityPart",
    "FragilityPart",
    "LipschitzPart",
    "MapPart",
    "PartOutput",
    "get_part",
    "register_part",
]

# Files the names above do not cover (a new implementation) register themselves here.
discover(__name__)
