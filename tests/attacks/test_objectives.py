"""The objective registry, each built-in objective, and the cost of adding one.

`test_a_new_objective_is_one_class` defines an objective HERE, in this test file alone, and runs
it through `fragility_attack`, the metric class, the evaluation suite and the report: nothing
else in the package names it.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from robust_train.app.report import summary_table
from robust_train.attacks import (
    OBJECTIVES,
    FragilityObjective,
    fragility_attack,
    get_objective,
    register_objective,
)
from robust_train.attacks.objectives.mass_center import MassCenter
from robust_train.attacks.objectives.random_sign import RandomSign
from robust_train.attacks.objectives.random_walk import RandomWalk
from robust_train.attacks.objectives.targeted import Targeted
from robust_train.attacks.objectives.topk import TopK
from robust_train.evaluation import EvaluationSettings, evaluate_classifier
from robust_train.explain.maps import normalize_map
from robust_train.metrics import ExplanationFragility
from tests.support.helpers import TinyCNN


def test_registry_lists_the_built_in_objectives() -> None:
    assert {"topk", "mass_center", "targeted", "random_sign"} <= set(OBJECTIVES)
    assert [OBJECTIVES[n] for n in ("topk", "mass_center", "targeted", "random_sign")] == [
        TopK,
        MassCenter,
        Targeted,
        RandomSign,
    ]
    assert [c.needs_gradient for c in (TopK, MassCenter, Targeted, RandomSign)] == [
        True,
        True,
        True,
        False,
    ]
    assert [c.needs_region for c in (TopK, MassCenter, Targeted, RandomSign)] == [
        False,
        False,
        True,
        False,
    ]
    with pytest.raises(ValueError, match="Unknown `objective` 'center'.*mass_center"):
        get_objective("center")


def test_registration_errors() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_objective("topk")(type("Other", (FragilityObjective,), {}))
    with pytest.raises(TypeError, match="FragilityObjective subclass"):
        register_objective("not_a_class")(int)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="identifier"):
        register_objective("two words")


def test_topk_ascent_value_is_minus_the_clean_topk_mass() -> None:
    clean = torch.rand(3, 4, 4)
    attacked = torch.rand(3, 4, 4)
    objective = TopK(clean, k=5, measure_k=5)
    weights = attacked / attacked.sum(dim=(1, 2), keepdim=True)
    top = clean.flatten(1).topk(5, dim=1).indices
    expected = -weights.flatten(1).gather(1, top).sum(1)
    assert torch.allclose(objective.ascent_value(attacked, slice(0, 3)), expected, atol=1e-6)


def test_targeted_scores_more_region_mass_as_better() -> None:
    region = torch.zeros(1, 4, 4, dtype=torch.bool)
    region[0, 0, 0] = True
    clean = torch.ones(2, 4, 4)
    objective = Targeted(clean, k=2, measure_k=2, region=region.expand(2, 4, 4))
    inside = clean.clone()
    inside[:, 0, 0] = 10.0
    better = FragilityObjective.better(objective.score(inside), objective.score(clean))
    assert better.all()


def test_mass_center_restart_direction_is_a_unit_vector() -> None:
    objective = MassCenter(torch.rand(5, 6, 6), k=4, measure_k=4)
    objective.start_restart(1, torch.Generator().manual_seed(0))
    assert objective.center_direction is not None
    assert torch.allclose(objective.center_direction.norm(dim=1), torch.ones(5))


def test_start_points_stay_in_the_ball() -> None:
    x0 = torch.rand(2, 1, 4, 4)
    gen = torch.Generator().manual_seed(0)
    objective = RandomWalk(torch.rand(2, 4, 4), k=2, measure_k=2)
    assert objective.start_point(x0, 0.1, 0, gen) is x0
    x = objective.start_point(x0, 0.1, 1, gen)
    assert (x - x0).abs().max() <= 0.1 + 1e-6 and not torch.equal(x, x0)
    assert 0 <= x.min() and x.max() <= 1


class _Spread(FragilityObjective):
    """The smallest real objective: spread the map out (ascend the entropy of I(x))."""

    def ascent_value(self, maps: Tensor, rows: slice) -> Tensor:
        p = normalize_map(maps, "sum").flatten(1).clamp_min(1e-12)
        return -(p * p.log()).sum(1)


@pytest.fixture
def spread():
    register_objective("spread")(_Spread)
    try:
        yield "spread"
    finally:
        OBJECTIVES.pop("spread")


def test_a_new_objective_is_one_class(spread) -> None:
    model = TinyCNN().eval()
    x = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    res = fragility_attack(
        model, x, model(x).argmax(1), objective=spread, epsilon=0.1, n_steps=4, k=8, seed=0
    )
    assert res.objective == "spread" and bool(res.measured.all()) and res.improved.any()
    metric = ExplanationFragility(objective=spread, epsilon=0.1)
    metric.update(res)
    assert int(metric.compute()["n_samples"]) == 6
    settings = EvaluationSettings(
        ensemble=False,
        n_samples=6,
        n_steps=2,
        lipschitz_samples=2,
        fidelity_steps=4,
        explainers=("saliency",),
        attacks=("topk", spread),
    )
    y = model(x).argmax(1)
    suite = evaluate_classifier(model, x, y, settings, progress=False)
    key = f"attack/saliency/{spread}/topk_intersection"
    assert suite["counts"][key] == 6
    assert 0 <= suite["measures"][key] <= 1
    assert f"| `{key}` ↑ |" in summary_table({"m": suite})
