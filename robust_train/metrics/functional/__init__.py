"""Pure, batched robustness metrics: one value per image (B,) or per image and step."""

from robust_train.explain.lens import lens_topk_intersection
from robust_train.explain.similarity import (
    center_of_mass,
    center_of_mass_shift,
    kendall_tau,
    spearman_correlation,
    topk_intersection,
    topk_mask,
    topk_support,
)
from robust_train.metrics.functional.confidence import (
    MeanInterval,
    interval_from_moments,
    mean_confidence_interval,
)
from robust_train.metrics.functional.faithfulness import faithfulness_correlation
from robust_train.metrics.functional.fidelity import (
    FidelityCurves,
    RemovalOptions,
    fidelity_curves,
    fidelity_estimate,
)
from robust_train.metrics.functional.lipschitz import (
    lipschitz_ratios,
    local_lipschitz_estimate,
    sample_perturbations,
)
from robust_train.metrics.functional.localisation import (
    pointing_game,
    relevance_mass_accuracy,
    relevance_rank_accuracy,
)

__all__ = [
    "FidelityCurves",
    "MeanInterval",
    "RemovalOptions",
    "center_of_mass",
    "center_of_mass_shift",
    "faithfulness_correlation",
    "fidelity_curves",
    "fidelity_estimate",
    "interval_from_moments",
    "kendall_tau",
    "lens_topk_intersection",
    "lipschitz_ratios",
    "local_lipschitz_estimate",
    "mean_confidence_interval",
    "pointing_game",
    "relevance_mass_accuracy",
    "relevance_rank_accuracy",
    "sample_perturbations",
    "spearman_correlation",
    "topk_intersection",
    "topk_mask",
    "topk_support",
]
