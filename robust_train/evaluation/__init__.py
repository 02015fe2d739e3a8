"""The evaluation engine: settings, measures and their key scheme, parts, presets.

`evaluate_classifier(model, x, y, settings)` runs accuracy, fragility attacks, Lipschitz
estimates and fidelity curves (`PARTS`); `MEASURES` declares every reported number once (label,
direction, unit); `PROTOCOLS["rar"]` is the RAR/ART evaluation protocol.
"""

from robust_train.evaluation.engine import (
    Evaluation,
    build_parts,
    run_parts,
    summarize,
    total_work,
)
from robust_train.evaluation.localisation import LOCALISATION_MEASURES, localisation_values
from robust_train.evaluation.measures import (
    MEASURES,
    Measure,
    attack_key,
    measure_of,
    part_key,
    register_measure,
)
from robust_train.evaluation.parts import (
    PARTS,
    EvaluationPart,
    ExplainerMap,
    MapPart,
    PartOutput,
    register_part,
)
from robust_train.evaluation.protocols import PROTOCOLS
from robust_train.evaluation.settings import (
    DEFAULT_ATTACKS,
    MONITOR_DEFAULTS,
    EvaluationSettings,
)
from robust_train.evaluation.suite import evaluate_classifier

__all__ = [
    "DEFAULT_ATTACKS",
    "LOCALISATION_MEASURES",
    "MEASURES",
    "MONITOR_DEFAULTS",
    "PARTS",
    "PROTOCOLS",
    "Evaluation",
    "EvaluationPart",
    "ExplainerMap",
    "MapPart",
    "EvaluationSettings",
    "Measure",
    "PartOutput",
    "attack_key",
    "build_parts",
    "evaluate_classifier",
    "localisation_values",
    "measure_of",
    "part_key",
    "register_measure",
    "register_part",
    "run_parts",
    "summarize",
    "total_work",
]
