"""A map that ignores the model ("map = input", `ExplainerSpec.model_free`) is attacked along one
direction: every surrogate of the model gives it the same map and the same gradient, so a second
direction would repeat the first step for step. Reference: the same map registered without the
declaration (what the ensemble ran before), whose extra direction doubles the model's passes and
changes no value."""

from __future__ import annotations

import warnings

import pytest
import torch

from robust_train.attacks import AttackOptions, ensemble_attack
from robust_train.evaluation import EvaluationSettings
from robust_train.evaluation.cost import unit_costs
from robust_train.evaluation.parts.input_reference import InputReferencePart
from robust_train.explain import input_reference
from robust_train.explain.registry import EXPLAINERS, explainer_spec, register_explainer
from tests.support.helpers import relu_conv_net

OPTIONS = AttackOptions(epsilon=0.1, n_steps=3, k=8, measure_k=8)
TWIN = "undeclared_input_copy"


def _net() -> torch.nn.Module:
    return relu_conv_net(hidden=None)


@pytest.fixture()
def twin():
    """input_reference registered again without `model_free` (the ensemble's old view of it)."""

    @register_explainer(TWIN, piecewise_constant=False)
    def undeclared_input_copy(model, inputs, target, *, create_graph=False):
        return input_reference(model, inputs, target, create_graph=create_graph)

    yield TWIN
    EXPLAINERS.pop(TWIN)


def _counted(net, x, y, explainer):
    """The ensemble's result and the number of forwards of the model it ran."""
    calls = []
    handle = net.register_forward_hook(lambda *_: calls.append(1))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out = ensemble_attack(
                net, x, y, explainer=explainer, betas=(1.0, 10.0), search_queries=5,
                options=OPTIONS, seed=3,
            )  # fmt: skip
    finally:
        handle.remove()
    return out, len(calls)


def test_the_reference_runs_one_direction_and_keeps_its_value(twin):
    net = _net()
    x = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    y = net(x).argmax(1)
    assert explainer_spec("input_reference").model_free and not explainer_spec(twin).model_free
    new, new_passes = _counted(net, x, y, "input_reference")
    old, old_passes = _counted(net, x, y, twin)
    # the undeclared twin runs "model" and "surrogate": the same steps twice
    assert old.result.directions == ("model", "surrogate")
    assert new.result.directions == ("exact",)
    assert [m.name for m in new.members] == [m.name for m in old.members] == ["k8", "k16", "search"]
    assert torch.equal(new.result.topk_intersection, old.result.topk_intersection)
    assert torch.equal(new.result.spearman, old.result.spearman)
    assert torch.equal(new.result.adversarial, old.result.adversarial)
    assert bool(new.result.improved.any())  # the attack moved the maps: a value to compare
    new_cost, old_cost = new.cost(), old.cost()
    assert new_cost["gradient_steps_per_image"] == 2 * 2 * 3  # 2 members x 2 restarts x 3 steps
    assert old_cost["gradient_steps_per_image"] == 2 * new_cost["gradient_steps_per_image"]
    assert all("directions exact," in m.detail for m in new.members[:-1])
    assert any("ignores the model" in note for note in new_cost["notes"])
    # counted forwards: each of the twin's 12 repeated steps forwarded the model three times
    # (the map's label check, the scored iterate's map and its logits), its probes a few more
    assert old_passes - new_passes >= 3 * 12


def test_the_evaluation_plans_one_direction_for_the_reference():
    settings = EvaluationSettings(
        explainers=("saliency",), attacks=("topk",), n_steps=3, k=8, measure_k=8, n_restarts=2,
        search_queries=5, ensemble_betas=(1.0, 10.0),
    ).resolved(8, 8)  # fmt: skip
    part = InputReferencePart(settings)
    cost = unit_costs("input_reference", settings)
    restart = settings.n_steps * cost.step + cost.map
    # k8 and k16, each 2 restarts along one direction, then the search's queries
    assert part.work() == pytest.approx(2 * 2 * restart + 5 * cost.map)
