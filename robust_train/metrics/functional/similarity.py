"""Map similarity measures, re-exported from their leaf module `robust_train.explain.similarity`.

They live below `robust_train.attacks` (which ranks its iterates with them), so that the metric
classes of this package can import the attacks without an import cycle.
"""

from robust_train.explain.similarity import (
    center_of_mass,
    center_of_mass_shift,
    kendall_tau,
    spearman_correlation,
    topk_intersection,
    topk_mask,
)

__all__ = [
    "center_of_mass",
    "center_of_mass_shift",
    "kendall_tau",
    "spearman_correlation",
    "topk_intersection",
    "topk_mask",
]
