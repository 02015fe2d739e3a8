"""The evaluation runs the attack ensemble by default and states its members and cost; a cheap
protocol ("fast", the monitors) runs one attack; chance levels sit beside every top-k number."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from robust_train.app.commands import settings_tag
from robust_train.app.report import attack_cost_lines, chance_table
from robust_train.app.settings_flags import CommandParser, add_settings_arguments, settings_from
from robust_train.attacks import ensemble_attack, fragility_attack
from robust_train.callbacks import RobustnessMonitor
from robust_train.evaluation import PROTOCOLS, EvaluationSettings, evaluate_classifier
from robust_train.evaluation.parts.fragility import random_map_level
from robust_train.explain.lens import lens_topk_intersection
from tests.support.helpers import TinyCNN

SETTINGS = dict(
    parts=("fragility",), explainers=("saliency",), attacks=("topk",), n_samples=6, n_steps=2,
    epsilon=0.2, k=8, measure_k=8, seed=3, ensemble_betas=(3.0, 10.0), search_queries=4,
)  # fmt: skip
KEY = "attack/saliency/topk/topk_intersection"


@pytest.fixture(scope="module")
def batch():
    model = TinyCNN(num_classes=3, seed=1).eval()
    x = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    return model, x, model(x).argmax(1)


@pytest.fixture(scope="module")
def ensemble_result(batch):
    model, x, y = batch
    return evaluate_classifier(model, x, y, EvaluationSettings(**SETTINGS), progress=False)


def test_the_default_is_the_ensemble_and_cheap_protocols_keep_their_names():
    assert EvaluationSettings().ensemble and PROTOCOLS["ensemble"].ensemble
    assert not PROTOCOLS["fast"].ensemble and not PROTOCOLS["demo"].ensemble
    assert not PROTOCOLS["rar"].ensemble
    assert not RobustnessMonitor().settings.ensemble  # the monitors stay cheap
    assert settings_tag(PROTOCOLS["fast"]) == "fast"
    assert settings_tag(PROTOCOLS["ensemble"]) == "ensemble"
    assert settings_tag(EvaluationSettings()) == "default"


def test_values_are_the_ensembles_and_its_members_and_cost_are_stated(batch, ensemble_result):
    model, x, y = batch
    direct = ensemble_attack(
        model, x, y, explainer="saliency", seed=3, betas=(3.0, 10.0), search_queries=4,
        options=EvaluationSettings(**SETTINGS),
    )  # fmt: skip
    expected = float(direct.result.topk_intersection.nanmean())
    assert ensemble_result["measures"][KEY] == pytest.approx(expected, abs=1e-6)
    cost = ensemble_result["attack_cost"]["saliency/topk"]
    assert [m["name"] for m in cost["members"]] == ["k8", "k16", "beta3", "search"]
    assert cost["gradient_steps_per_image"] == 3 * 2 * 2  # 3 members x 2 restarts x 2 steps
    assert cost["seconds"] > 0 and cost["images"] == 6
    lines = attack_cost_lines({"m": ensemble_result})
    assert any("saliency/topk" in line and "search" in line for line in lines)
    starts = [m["best_before_search"] for m in cost["members"]]
    assert starts[-1] == 0 and sum(starts) == int(direct.result.measured.sum())
    first = next(m for m in cost["members"] if m["best_before_search"])
    assert f"search start on {first['best_before_search']})" in lines[0]


def test_the_fast_protocol_runs_one_attack(batch):
    model, x, y = batch
    settings = EvaluationSettings(**{**SETTINGS, "ensemble": False})
    result = evaluate_classifier(model, x, y, settings, progress=False)
    direct = fragility_attack(model, x, y, epsilon=0.2, n_steps=2, k=8, measure_k=8, seed=3)
    assert result["measures"][KEY] == pytest.approx(float(direct.topk_intersection.nanmean()))
    members = result["attack_cost"]["saliency/topk"]["members"]
    assert [m["name"] for m in members] == ["single"]


def test_chance_levels_and_the_share_above_the_input(ensemble_result):
    m, per = ensemble_result["measures"], ensemble_result["per_image"]
    assert 0 < m["fragility/saliency/random_topk"] < 0.5  # about k / (H W) = 0.125
    assert m["fragility/saliency/random_lens"] > m["fragility/saliency/random_topk"]
    model_values = per[KEY]
    reference = per["attack/input_reference/topk/topk_intersection"]
    above = [float(a > b) for a, b in zip(model_values, reference, strict=True)]
    assert per["attack/saliency/topk/beats_input"] == above
    table = chance_table({"m": ensemble_result})
    assert "| saliency | m |" in table


def test_random_map_level_against_its_expectation():
    """A uniformly random map's top-k is a uniform k-subset, so the top-k intersection's
    expectation is k / N and LENS's is the share of pixels within one pixel of the clean top-k
    set; the mean over the draws lies near both. A constant clean map is NaN in the part."""
    maps = torch.rand(5, 8, 8, generator=torch.Generator().manual_seed(4))
    k = 6
    topk = random_map_level(maps, k, "random_topk", 0)
    assert torch.allclose(topk, torch.full_like(topk, k / 64), atol=0.2)
    # the dilated share: LENS of the clean map against a map that ranks every pixel first
    lens = random_map_level(maps, k, "random_lens", 0)
    flat = maps.flatten(1)
    mask = torch.zeros_like(flat).scatter(1, flat.topk(k).indices, 1.0).view(-1, 1, 8, 8)
    dilated = torch.nn.functional.max_pool2d(mask, 3, 1, 1).flatten(1).mean(1)
    assert torch.allclose(lens, dilated, atol=0.2)
    assert float((lens - dilated).abs().mean()) < 0.08
    same = lens_topk_intersection(maps, maps, k)
    assert torch.equal(same, torch.ones(5))


def test_flags_reach_the_settings_and_bad_values_name_the_flag():
    parser = CommandParser()
    add_settings_arguments(parser)
    s = settings_from(parser.parse_args(["--no-ensemble", "--search-queries", "0"]))
    assert not s.ensemble and s.search_queries == 0
    s = settings_from(parser.parse_args(["--protocol", "fast", "--ensemble-betas", "2", "5"]))
    assert s.ensemble_betas == (2.0, 5.0) and not s.ensemble
    with pytest.raises(ValueError, match="`--ensemble-betas`"):
        settings_from(parser.parse_args(["--ensemble-betas", "0"]))
    with pytest.raises(ValueError, match="`--search-queries`"):
        settings_from(parser.parse_args(["--search-queries", "-1"]))
    with pytest.raises(ValueError, match="duplicates"):
        dataclasses.replace(EvaluationSettings(), ensemble_betas=(3.0, 3.0))
    assert math.isclose(PROTOCOLS["ensemble"].epsilon or 0, 0.3)
