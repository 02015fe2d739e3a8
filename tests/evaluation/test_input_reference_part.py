"""The "map = input" reference beside every attack: `EvaluationSettings.input_reference`."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from robust_train.attacks import fragility_attack
from robust_train.callbacks import RobustnessMonitor
from robust_train.evaluation import PROTOCOLS, EvaluationSettings, evaluate_classifier
from robust_train.evaluation.engine import build_parts
from tests.support.helpers import TinyCNN

SETTINGS = dict(
    ensemble=False,
    parts=("fragility",), explainers=("saliency",), attacks=("random_sign", "topk"),
    n_samples=6, n_steps=2, epsilon=0.2, k=10, measure_k=8, seed=3,
)  # fmt: skip


def _batch():
    model = TinyCNN(num_classes=3, seed=1).eval()
    x = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    return model, x, model(x).argmax(1)


def test_every_attack_runs_on_the_reference_by_default_with_the_same_settings():
    model, x, y = _batch()
    settings = EvaluationSettings(**SETTINGS)
    assert settings.input_reference and PROTOCOLS["rar"].input_reference
    assert [p.name for p in build_parts(settings, 8, 8)] == ["fragility", "input_reference"]
    measures = evaluate_classifier(model, x, y, settings, progress=False)["measures"]
    for attack in ("random_sign", "topk"):
        direct = fragility_attack(
            model, x, y, explainer="input_reference", objective=attack, epsilon=0.2,
            n_steps=2, k=10, measure_k=8, seed=3,
        )  # fmt: skip
        for measure in ("topk_intersection", "lens_topk", "spearman"):
            key = f"attack/input_reference/{attack}/{measure}"
            expected = float(direct.values()[measure].nanmean())
            assert measures[key] == pytest.approx(expected, abs=1e-6), key
        assert f"attack/saliency/{attack}/topk_intersection" in measures
    assert measures["n_attacked"] == 6  # counted once, by the fragility part


def test_the_option_turns_it_off_and_nothing_is_added_without_attacks():
    model, x, y = _batch()
    off = EvaluationSettings(**{**SETTINGS, "input_reference": False})
    measures = evaluate_classifier(model, x, y, off, progress=False)["measures"]
    assert not any("input_reference" in key for key in measures)
    no_attack = dataclasses.replace(off, parts=("lipschitz",), input_reference=True)
    assert [p.name for p in build_parts(no_attack, 8, 8)] == ["lipschitz"]


def test_monitors_leave_it_out_unless_asked():
    plain = RobustnessMonitor(parts=["fragility"], explainers=["saliency"], attacks=["topk"])
    assert not any("input_reference" in key for key in plain.keys())
    asked = RobustnessMonitor(
        parts=["fragility", "input_reference"], explainers=["saliency"], attacks=["topk"]
    )
    assert "robustness/attack/input_reference/topk/topk_intersection" in asked.keys()
    asked.resolve(8, 8)
    assert [p.name for p in asked.parts] == ["fragility", "input_reference"]


def test_the_command_line_flag():
    from robust_train.app.settings_flags import (
        CommandParser,
        add_settings_arguments,
        settings_from,
    )

    parser = CommandParser()
    add_settings_arguments(parser)
    assert settings_from(parser.parse_args([])).input_reference
    assert not settings_from(parser.parse_args(["--no-input-reference"])).input_reference
