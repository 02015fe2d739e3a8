"""Differentiable explainers and importance maps.

Every explainer has the signature `explainer(model, inputs, target, *, create_graph)` and never
detaches with `create_graph=True`, so one implementation serves evaluation, attacks and training
penalties. Each lives in its own file and registers itself with `@register_explainer`, which
records what it can do (`ExplainerSpec`: differentiable, piecewise constant on ReLU networks,
layer-based, ...). Importing this package imports every file in it (`discover`, after the
public names below), so a new explainer is one new file; the names below are the public API.
`meaningful_perturbation` is an optimisation and is evaluation-only (`is_differentiable`).
"""

from robust_train.core.registry import discover  # isort: skip

from robust_train.explain.registry import (  # isort: skip  (the registry first)
    EXPLAINERS,
    BoundExplainer,
    ExplainerSpec,
    bind_settings,
    explainer_name,
    explainer_spec,
    get_explainer,
    is_differentiable,
    register_explainer,
    reported_explainers,
    resolve_explainer,
)
from robust_train.explain.gradient import input_x_gradient, saliency  # isort: skip
from robust_train.explain.integrated import (  # isort: skip
    INTEGRATION_METHODS,
    integrated_gradients,
    integration_rule,
)
from robust_train.explain.smooth import smoothgrad  # isort: skip
from robust_train.explain.perturbation import (  # isort: skip
    NotDifferentiableError,
    meaningful_perturbation,
)
from robust_train.explain.grad_cam import grad_cam  # isort: skip
from robust_train.explain.lrp import LRP_COMPOSITES, lrp  # isort: skip
from robust_train.explain.deeplift import deeplift  # isort: skip
from robust_train.explain.input_reference import input_reference  # isort: skip
from robust_train.explain.maps import flat_importance, importance_map, normalize_map
from robust_train.explain.protocol import Explainer

__all__ = [
    "EXPLAINERS",
    "INTEGRATION_METHODS",
    "LRP_COMPOSITES",
    "BoundExplainer",
    "Explainer",
    "ExplainerSpec",
    "NotDifferentiableError",
    "bind_settings",
    "deeplift",
    "explainer_name",
    "explainer_spec",
    "flat_importance",
    "get_explainer",
    "grad_cam",
    "importance_map",
    "input_reference",
    "input_x_gradient",
    "integrated_gradients",
    "integration_rule",
    "is_differentiable",
    "lrp",
    "meaningful_perturbation",
    "normalize_map",
    "register_explainer",
    "reported_explainers",
    "resolve_explainer",
    "saliency",
    "smoothgrad",
]

# Files the names above do not cover (a new implementation) register themselves here.
discover(__name__)
