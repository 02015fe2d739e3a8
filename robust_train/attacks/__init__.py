"""Fragility attacks on explanations (Ghorbani, Abid & Zou, AAAI 2019).

`fragility_attack` runs one attack; `ensemble_attack` runs several (attacked sets, surrogate
betas, restarts, a gradient-free search) and keeps the worst per image.

Objectives are registered classes (`OBJECTIVES`, `register_objective`); the size-dependent
defaults (epsilon, k, target region) are in `robust_train.attacks.defaults`.
"""

from robust_train.attacks.defaults import default_epsilon, default_k, target_region
from robust_train.attacks.ensemble import EnsembleResult, ensemble_attack
from robust_train.attacks.fragility import fragility_attack
from robust_train.attacks.objectives.base import (
    OBJECTIVES,
    FragilityObjective,
    get_objective,
    register_objective,
)
from robust_train.attacks.options import AttackGoal, AttackOptions
from robust_train.attacks.result import FragilityResult

__all__ = [
    "OBJECTIVES",
    "AttackGoal",
    "AttackOptions",
    "EnsembleResult",
    "FragilityObjective",
    "FragilityResult",
    "default_epsilon",
    "default_k",
    "ensemble_attack",
    "fragility_attack",
    "get_objective",
    "register_objective",
    "target_region",
]
