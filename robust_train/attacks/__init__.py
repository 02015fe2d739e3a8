"""Fragility attacks on explanations (Ghorbani, Abid & Zou, AAAI 2019)."""

from robust_train.attacks.fragility import fragility_attack
from robust_train.attacks.objectives import OBJECTIVES, FragilityObjective
from robust_train.attacks.result import FragilityResult

__all__ = ["fragility_attack", "FragilityResult", "FragilityObjective", "OBJECTIVES"]
