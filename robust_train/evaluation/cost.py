"""What each kind of evaluation work costs, in one unit: an attack step of a one-pass map.

The evaluation's progress line (`robust_train.evaluation.engine.progress_bar`) counts its work in
this unit, so that its time left (the weighted work left times the seconds per weighted unit
measured so far) does not depend on which kinds of work ran first. Counted in passes of the
model over one image (a forward is one pass, a backward two):

- a map of a gradient explainer: a forward and a backward, 3 passes, times its points
  (integrated gradients' `n_steps`, SmoothGrad's `n_samples`, a perturbation mask's steps);
- an attack step: the map with its graph and the backward through that graph (double
  backprop: the backward of the map's forward and of its backward, about four maps: 12) and
  the map of the new iterate that scores it (3), 15 passes: the unit;
- a random-sign draw, a random-search query, a Lipschitz sample: one map and its label, a
  fifth of a step;
- a forward alone (a fidelity-curve step), a fifteenth;
- the reference "map = input" calls no explainer, but each of its maps forwards the model to
  check the label, and a scored iterate's logits take another forward: a draw is two forwards,
  a step three.

Examples:
    >>> from robust_train.evaluation import EvaluationSettings
    >>> s = EvaluationSettings(ig_steps=8).resolved(8, 8)
    >>> unit_costs("saliency", s)
    UnitCosts(step=1.0, map=0.2, forward=0.06666666666666667)
    >>> unit_costs("integrated_gradients", s).step
    8.0
    >>> unit_costs("input_reference", s).map == 2 * unit_costs("saliency", s).forward
    True
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from robust_train.explain import bind_settings, explainer_spec

__all__ = ["FORWARD_PASSES", "MAP_PASSES", "STEP_PASSES", "UnitCosts", "map_points", "unit_costs"]

FORWARD_PASSES = 1.0
MAP_PASSES = 3.0  # a forward and a backward
STEP_PASSES = 15.0  # map with graph and its double backprop (12) + the scored iterate's map (3)
POINT_KEYWORDS = ("n_steps", "n_samples")  # keywords that multiply a map's passes


@dataclass(frozen=True)
class UnitCosts:
    """The cost of one unit of each kind of work of one explainer, in attack steps of a one-pass
    map (`STEP_PASSES`).

    Attributes:
        step: one gradient attack step (or one gradient-search step).
        map: one map with its label: a random-sign draw, a search query, a Lipschitz sample,
            the clean map of an attack or a restart.
        forward: one forward of the model (a fidelity-curve step).
    """

    step: float
    map: float
    forward: float


def map_points(explainer: Any, settings: Any) -> float:
    """How many map-sized passes one map of `explainer` (bound to `settings`, as the parts bind
    it) costs: the product of its `n_steps` / `n_samples` keywords, 1 for a one-pass map, 0 for a
    map that calls no model ("map = input", `ExplainerSpec.model_free`).

    Args:
        explainer: an explainer name, spec or callable, as in `EvaluationSettings.explainers`.
        settings: resolved evaluation settings.

    Returns:
        The number of forward-and-backward passes of one map (float).
    """
    if explainer_spec(explainer).model_free:
        return 0.0
    bound = bind_settings(explainer, settings)
    keywords = dict(getattr(bound, "keywords", None) or {})
    function = getattr(bound, "func", bound)
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # a callable without a signature: one pass
        parameters = {}  # type: ignore[assignment]
    points = 1.0
    for name in POINT_KEYWORDS:
        value = keywords.get(name, getattr(parameters.get(name), "default", None))
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            points *= value
    return points


def unit_costs(explainer: Any, settings: Any) -> UnitCosts:
    """The `UnitCosts` of `explainer` under `settings` (see the module docstring).

    Args:
        explainer: an explainer name, spec or callable, as in `EvaluationSettings.explainers`.
        settings: resolved evaluation settings.

    Returns:
        Its step, map and forward costs in attack steps of a one-pass map.
    """
    forward = FORWARD_PASSES / STEP_PASSES
    points = map_points(explainer, settings)
    if points == 0:
        return UnitCosts(step=3 * forward, map=2 * forward, forward=forward)
    return UnitCosts(step=points, map=points * MAP_PASSES / STEP_PASSES, forward=forward)
