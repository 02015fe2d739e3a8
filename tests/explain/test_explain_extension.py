"""A new explainer is one registered function: defined here, in this test file
alone, it is resolved by name by the attack, the Lipschitz metric and the evaluation suite."""

from __future__ import annotations

import pytest
import torch

from robust_train.attacks import fragility_attack
from robust_train.evaluation import EvaluationSettings, evaluate_classifier
from robust_train.explain import EXPLAINERS, is_differentiable, register_explainer, saliency
from robust_train.metrics.functional import local_lipschitz_estimate
from tests.support.helpers import TinyCNN


def _gradient_squared(model, inputs, target, *, create_graph=False):
    """Squared input gradient: the smallest real explainer built on an existing one."""
    return saliency(model, inputs, target, create_graph=create_graph) ** 2


@pytest.fixture
def registered():
    register_explainer("gradient_squared")(_gradient_squared)
    try:
        yield "gradient_squared"
    finally:
        EXPLAINERS.pop("gradient_squared")


def test_a_new_explainer_is_one_function(registered) -> None:
    model = TinyCNN().eval()
    x = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    y = model(x).argmax(1)
    res = fragility_attack(model, x, y, explainer=registered, epsilon=0.1, n_steps=3, seed=0)
    assert res.explainer == registered and bool(res.measured.all())
    lip = local_lipschitz_estimate(model, x, y, explainer=registered, n_samples=2, seed=0)
    assert lip.shape == (4,) and bool((lip >= 0).all())
    settings = EvaluationSettings(
        ensemble=False,
        n_samples=4,
        n_steps=2,
        lipschitz_samples=2,
        fidelity_steps=4,
        explainers=(registered,),
        attacks=("topk",),
    )
    suite = evaluate_classifier(model, x, y, settings, progress=False)
    assert {k for k in suite["measures"] if k.startswith("lipschitz/")} == {
        f"lipschitz/{registered}/lipschitz"
    }
    assert suite["counts"][f"attack/{registered}/topk/topk_intersection"] == 4


def test_registration_marks_non_differentiable_explainers() -> None:
    def optimised(model, inputs, target, *, create_graph=False):
        return saliency(model, inputs, target).detach()

    register_explainer("optimised_doc", differentiable=False)(optimised)
    try:
        assert not is_differentiable("optimised_doc")
        with pytest.raises(ValueError, match="'optimised_doc' is not differentiable"):
            fragility_attack(
                TinyCNN(),
                torch.rand(2, 1, 8, 8),
                torch.tensor([0, 1]),
                explainer="optimised_doc",
                epsilon=0.1,
                n_steps=1,
            )
    finally:
        EXPLAINERS.pop("optimised_doc")
    with pytest.raises(ValueError, match="already registered"):
        register_explainer("saliency")(_gradient_squared)
