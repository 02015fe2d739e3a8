"""The robustness evaluation suite: settings, literature presets and the suite itself.

`evaluate_classifier(model, x, y, settings)` runs accuracy, fragility attacks, Lipschitz
estimates and fidelity curves; `PROTOCOLS["rar"]` is the RAR/ART evaluation protocol.
"""

from robust_train._runtime import predict
from robust_train.attacks.defaults import target_region
from robust_train.evaluation.protocols import PROTOCOLS
from robust_train.evaluation.settings import ATTACKS, DEFAULT_ATTACKS, EvaluationSettings
from robust_train.evaluation.suite import (
    attack_summary,
    evaluate_classifier,
    mean_and_ci,
    suite_explainer,
)

__all__ = [
    "ATTACKS",
    "DEFAULT_ATTACKS",
    "PROTOCOLS",
    "EvaluationSettings",
    "attack_summary",
    "evaluate_classifier",
    "mean_and_ci",
    "predict",
    "suite_explainer",
    "target_region",
]
