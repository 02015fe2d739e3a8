"""Robustness metrics: pure batched functions in `functional`, torchmetrics classes here.

`ExplanationFragility` is imported on first access (PEP 562): it depends on `robust_train.attacks`,
which itself imports `robust_train.metrics.functional.similarity`, so an eager import here would
be circular.
"""

from typing import Any

from robust_train.metrics import functional
from robust_train.metrics.fidelity import Fidelity
from robust_train.metrics.lipschitz import LocalLipschitz

__all__ = ["ExplanationFragility", "Fidelity", "LocalLipschitz", "functional"]


def __getattr__(name: str) -> Any:
    if name == "ExplanationFragility":
        from robust_train.metrics.fragility import ExplanationFragility

        return ExplanationFragility
    raise AttributeError(f"module 'robust_train.metrics' has no attribute {name!r}")
