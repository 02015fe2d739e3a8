"""Differentiable explainers and importance maps.

Every gradient explainer has the signature `explainer(model, inputs, target, *, create_graph)` and
never detaches with `create_graph=True`, so one implementation serves evaluation, attacks and
training penalties. `meaningful_perturbation` is an optimisation and is evaluation-only
(`is_differentiable` tells them apart).
"""

from robust_train.explain.gradient import input_x_gradient, saliency
from robust_train.explain.integrated import (
    INTEGRATION_METHODS,
    integrated_gradients,
    integration_rule,
)
from robust_train.explain.maps import flat_importance, importance_map, normalize_map
from robust_train.explain.perturbation import NotDifferentiableError, meaningful_perturbation
from robust_train.explain.protocol import Explainer
from robust_train.explain.registry import (
    EXPLAINERS,
    BoundExplainer,
    explainer_name,
    get_explainer,
    is_differentiable,
    register_explainer,
    resolve_explainer,
)
from robust_train.explain.smooth import smoothgrad

__all__ = [
    "EXPLAINERS",
    "INTEGRATION_METHODS",
    "BoundExplainer",
    "Explainer",
    "NotDifferentiableError",
    "explainer_name",
    "flat_importance",
    "get_explainer",
    "importance_map",
    "input_x_gradient",
    "integrated_gradients",
    "integration_rule",
    "is_differentiable",
    "meaningful_perturbation",
    "normalize_map",
    "register_explainer",
    "resolve_explainer",
    "saliency",
    "smoothgrad",
]
