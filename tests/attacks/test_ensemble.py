"""The attack ensemble keeps, per image, the worst result of its members, and every member
matters: on a tiny ReLU network each one alone gives some image its worst result, and where
the gradient is masked (a map with zero gradient everywhere) only the random search moves it."""

from __future__ import annotations

import warnings

import pytest
import torch

from robust_train.attacks import AttackOptions, ensemble_attack, fragility_attack
from robust_train.attacks.ensemble import plan_members
from robust_train.attacks.objectives.base import get_objective
from tests.support.helpers import relu_conv_net

OPTIONS = AttackOptions(epsilon=0.1, n_steps=3, k=8, measure_k=8)
BETAS = (1.0, 3.0, 10.0, 30.0)


def _net() -> torch.nn.Module:
    return relu_conv_net()


@pytest.fixture(scope="module")
def run():
    net = _net()
    x = torch.rand(64, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    y = net(x).argmax(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # one flat image: tested below
        out = ensemble_attack(net, x, y, betas=BETAS, search_queries=20, options=OPTIONS, seed=0)
    return net, x, y, out


def test_members_are_planned_and_stated(run):
    *_, out = run
    names = [m.name for m in out.members]
    assert names == ["k8", "k16", "beta1", "beta3", "beta30", "search"]
    cost = out.cost()
    assert cost["gradient_steps_per_image"] == 5 * 2 * 3  # 5 members x 2 restarts x 3 steps
    assert cost["maps_per_image"] == 5 * 2 * 3 + 20
    assert sum(m["worst_on"] for m in cost["members"]) == int(out.result.measured.sum())
    assert "2 restarts (1 from the image, 1 random)" in out.members[0].detail


def test_each_member_alone_gives_some_image_its_worst_result(run):
    """Removing any one member would raise some image's value: for each gradient member an
    image where its (top-k intersection, Spearman) is strictly below every other member's, and
    images where the search lowered the top-k intersection below every gradient member's."""
    *_, out = run
    p, q = out.member_scores, out.member_ties
    for i, member in enumerate(out.members[:-1]):
        strict = torch.ones(p.shape[1], dtype=torch.bool)
        for j in range(p.shape[0]):
            if j != i:
                strict &= (p[i] < p[j]) | ((p[i] == p[j]) & (q[i] < q[j]))
        assert bool(strict.any()), member.name
    search = len(out.members) - 1
    assert out.members[search].worst_on > 0
    assert bool((out.result.topk_intersection[out.worst == search] < p.min(0).values[
        out.worst == search]).all())  # fmt: skip


def test_result_is_the_per_image_minimum_within_budget(run):
    net, x, y, out = run
    res = out.result
    measured = res.measured
    assert bool((res.topk_intersection[measured] <= out.member_scores.min(0).values[measured]
                 + 1e-6).all())  # fmt: skip
    assert float((res.adversarial - x).abs().max()) <= 0.1 + 1e-6
    assert bool(((res.adversarial >= 0) & (res.adversarial <= 1)).all())
    assert torch.equal(net(res.adversarial).argmax(1), y)


def test_one_member_equals_the_single_attack(run):
    """The k8 member is `fragility_attack` with the same options, two restarts and its seed."""
    net, x, y, out = run
    single = fragility_attack(net, x, y, options=OPTIONS, n_restarts=2, seed=0)
    finite = torch.isfinite(single.topk_intersection)
    assert torch.equal(out.member_scores[0][finite], single.topk_intersection[finite])


def _quantised(model, inputs, target, *, create_graph=False):
    """A map with zero gradient everywhere (rounded input): no gradient attack can move it."""
    return torch.round(inputs * 4) / 4


def test_masked_gradient_only_the_search_moves_it():
    net = _net()
    x = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    y = net(x).argmax(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        none = ensemble_attack(net, x, y, explainer=_quantised, options=OPTIONS, search_queries=0)
        out = ensemble_attack(net, x, y, explainer=_quantised, options=OPTIONS, search_queries=30)
    assert not bool(none.result.measured.any())  # never reported as robust
    assert bool(out.result.measured.any())
    moved = out.result.measured
    assert bool((out.worst[moved] == len(out.members) - 1).all())
    assert bool((out.result.spearman[moved] < 1).all())


def test_plan_leaves_out_members_that_cannot_differ():
    o = AttackOptions(k=98, measure_k=98).resolved(28, 28)
    mass = plan_members(get_objective("mass_center"), o, BETAS, size=784, beta_matters=False)
    assert [m.name for m in mass] == ["k98"]  # k does not enter its ascent; no ReLU to smooth
    capped = AttackOptions(k=600, measure_k=600).resolved(28, 28)
    topk = plan_members(get_objective("topk"), capped, (10.0,), size=784, beta_matters=True)
    assert [m.k for m in topk] == [600, 784]


def test_no_beta_members_where_the_surrogate_changes_nothing():
    net = _net()
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    y = net(x).argmax(1)
    out = ensemble_attack(net, x, y, explainer="input_reference", options=OPTIONS, search_queries=2)
    assert [m.name for m in out.members] == ["k8", "k16", "search"]


def test_bad_arguments_are_named():
    net = _net()
    x = torch.rand(2, 1, 8, 8)
    with pytest.raises(ValueError, match="`betas`"):
        ensemble_attack(net, x, torch.tensor([0, 1]), betas=(), options=OPTIONS)
    with pytest.raises(ValueError, match="`search_queries`"):
        ensemble_attack(net, x, torch.tensor([0, 1]), search_queries=-1, options=OPTIONS)


def test_the_search_start_is_credited_to_the_member_whose_point_was_kept(run):
    """`best_before_search`: per image, the gradient member with the lowest (top-k intersection,
    Spearman), the first one on a full tie; every measured image has one, the search none."""
    *_, out = run
    p, q = out.member_scores, out.member_ties  # a NaN never wins, as in the ensemble
    kept = torch.zeros(p.shape[1], dtype=torch.long)
    for j in range(1, p.shape[0]):
        lower = (p[j] < p[kept, range(p.shape[1])]) | (
            (p[j] == p[kept, range(p.shape[1])]) & (q[j] < q[kept, range(p.shape[1])])
        )
        kept[lower] = j
    counts = [m.best_before_search for m in out.members]
    assert counts[-1] == 0 and sum(counts) == int(out.result.measured.sum())
    for i in range(p.shape[0]):
        assert counts[i] == int(((kept == i) & out.result.measured).sum()), out.members[i].name
    assert all(c > 0 for c in counts[:-1])  # the search built on every gradient member
    assert out.cost()["members"][0]["best_before_search"] == counts[0]
