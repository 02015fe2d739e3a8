"""Certified robustness of explanations: a lower bound beside the attacks' upper bound.

Randomized smoothing of a sparsified explainer (Levine, Singla & Feizi 2019, arXiv 1905.12105;
Cohen, Rosenfeld & Kolter 2019; Salman et al. 2019), for any explainer of `robust_train.explain`:

- `sparsified_counts`: the Monte Carlo of the smoothed explainer (how often each pixel is in the
  top-kappa set of a noisy copy's map);
- `certify_explanations` -> `ExplanationCertificate`: with probability >= 1 - alpha, at least
  `certified_overlap(r)` of the reported top-k set stays in the top-k of the smoothed map at every
  x' with ||x' - x||_2 <= r, and a certified radius per pixel;
- `attack_certificate`, `random_search`: the other side, the empirical overlap of the project's
  L2 fragility attack (and of random points of the sphere) on the same smoothed explainer;
- `clopper_pearson`, `simultaneous_bounds`, `overlap_radii`, `pixel_radii`, `box_overlap`: the
  statistics and the geometry, stated and tested on their own.

Deterministic bounds of the saliency and input x gradient maps of a ReLU network over an L_inf
ball (Wicker et al. 2023: interval bounds through the forward and the backward pass; CROWN-style
back-substitution for tighter pre-activation bounds), no probability involved:

- `explanation_bounds` -> `MapBounds`: per-entry bounds of the map and of its importance map;
- `certify_topk` -> `DeterministicCertificate`: the top-k overlap certified at each radius;
- `certify_model_bounds`, `BoundSettings`: the certificate beside the L_inf attack, JSON-ready;
- `IntervalWidthPenalty` (registered penalty ``interval_width``): training on the bounds' width.
"""

from robust_train.certify.statistics import (  # isort: skip
    check_alpha,
    clopper_pearson,
    simultaneous_bounds,
)
from robust_train.certify.sampling import check_sigma, sparsified_counts  # isort: skip
from robust_train.certify.bounds import (  # isort: skip
    box_overlap,
    overlap_radii,
    pixel_radii,
    reference_set,
)
from robust_train.certify.certificate import (  # isort: skip
    ExplanationCertificate,
    SmoothingOptions,
    certificate_from_counts,
    certify_explanations,
    check_radius,
)
from robust_train.certify.soft import SoftSmoothedExplainer  # isort: skip
from robust_train.certify.attack import (  # isort: skip
    BallSearchOptions,
    EmpiricalOverlap,
    attack_certificate,
    measure_overlap,
    random_search,
)
from robust_train.certify.run import CertifySettings, certify_model  # isort: skip
from robust_train.certify.graph import UnsupportedLayerError  # isort: skip
from robust_train.certify.deterministic import (  # isort: skip
    DeterministicCertificate,
    MapBounds,
    certify_topk,
    explanation_bounds,
)
from robust_train.certify.deterministic_run import (  # isort: skip
    BoundSettings,
    certify_model_bounds,
)
from robust_train.certify.width_penalty import (  # isort: skip
    IntervalWidthPenalty,
    interval_width,
)

__all__ = [
    "BallSearchOptions",
    "BoundSettings",
    "CertifySettings",
    "DeterministicCertificate",
    "IntervalWidthPenalty",
    "MapBounds",
    "UnsupportedLayerError",
    "certify_model_bounds",
    "certify_topk",
    "explanation_bounds",
    "interval_width",
    "EmpiricalOverlap",
    "ExplanationCertificate",
    "SmoothingOptions",
    "SoftSmoothedExplainer",
    "attack_certificate",
    "measure_overlap",
    "random_search",
    "box_overlap",
    "certificate_from_counts",
    "certify_explanations",
    "certify_model",
    "check_alpha",
    "check_radius",
    "check_sigma",
    "clopper_pearson",
    "overlap_radii",
    "pixel_radii",
    "reference_set",
    "simultaneous_bounds",
    "sparsified_counts",
]
