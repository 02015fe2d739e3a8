"""`robust-train demo` runs a named reduced attack ensemble ("demo_ensemble"), prints it with its
members and cost, and its claim ranges are stated for that protocol."""

from __future__ import annotations

import dataclasses
import json

import torch

import robust_train.app.demo as demo
from robust_train.app.commands import settings_tag
from robust_train.attacks.ensemble import plan_members
from robust_train.attacks.objectives.base import get_objective
from robust_train.evaluation import PROTOCOLS, evaluate_classifier
from tests.support.helpers import TinyCNN


def test_the_demo_runs_the_named_reduced_ensemble():
    preset, full, one = PROTOCOLS["demo_ensemble"], PROTOCOLS["ensemble"], PROTOCOLS["demo"]
    args = demo._parser().parse_args([])
    assert demo._settings(args) == preset and demo.PROTOCOL == "demo_ensemble"
    assert preset.ensemble and settings_tag(preset) == "demo_ensemble"
    # The demo's budget, maps, objectives, steps and scored set; only the ensemble's size and
    # the number of images differ from the one-attack "demo" protocol.
    differs = {
        f.name for f in one.option_fields() if getattr(one, f.name) != getattr(preset, f.name)
    }
    assert differs == {
        "n_samples", "k", "n_restarts", "ensemble", "ensemble_betas", "search_queries", "extra",
    }  # fmt: skip
    assert preset.explainers == tuple(demo.MAPS)
    # Reduced from the full ensemble: fewer members, restarts, steps, queries and images.
    assert set(preset.ensemble_betas) < set(full.ensemble_betas)
    assert preset.n_restarts < full.n_restarts and preset.n_steps <= full.n_steps
    assert 0 < preset.search_queries < full.search_queries
    assert preset.n_samples < one.n_samples
    options = preset.attack_options().resolved(28, 28)
    members = plan_members(get_objective("topk"), options, preset.ensemble_betas, size=784,
                           beta_matters=True)  # fmt: skip
    assert [m.name for m in members] == ["k100", "k200", "beta3"]


def test_quick_demo_shrinks_the_ensemble_too():
    settings = demo._settings(demo._parser().parse_args(["--quick"]))
    assert settings.ensemble and settings.extra["protocol"] == "demo_ensemble"
    assert settings.search_queries == demo.QUICK_SETTINGS["search_queries"]
    assert not demo._as_measured(demo._parser().parse_args(["--quick"]), [], settings)
    assert demo._as_measured(demo._parser().parse_args([]), [], demo.demo_settings())


def test_printed_protocol_names_the_members_and_cost_the_evaluation_ran():
    model = TinyCNN(num_classes=3, seed=1).eval()
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    settings = dataclasses.replace(
        PROTOCOLS["demo_ensemble"], parts=("fragility",), explainers=("saliency",),
        attacks=("random_sign", "topk"), n_samples=3, n_steps=2, k=8, measure_k=8,
        search_queries=5, noise_draws=2,
        input_reference=False, correct_only=False,
    )  # fmt: skip
    result = evaluate_classifier(model, x, model(x).argmax(1), settings, progress=False)
    text = demo.protocol_text(settings, {"natural": result, "robust": result})
    head, members, cost = text.splitlines()
    assert head.startswith("protocol: demo_ensemble (the attack ensemble")
    assert "3 test images" in head
    ran = result["attack_cost"]["saliency/topk"]["members"]
    assert [m["name"] for m in ran] == ["k8", "k16", "beta3", "search"]
    for m in ran:
        unit = "steps" if m["gradient_steps"] else "queries"
        assert f"{m['name']} ({m['gradient_steps'] or m['maps']} {unit} per image)" in members
    assert "search (5 queries per image)" in members
    spent = sum(c.get("cpu_seconds", 0.0) for c in result["attack_cost"].values())
    assert spent == result["attack_cost"]["saliency/topk"]["cpu_seconds"]  # noise: one attack
    assert (
        cost == f"  CPU time of the ensemble attacks: natural {spent:.0f} s, robust {spent:.0f} s"
    )
    one = dataclasses.replace(settings, ensemble=False, extra={"protocol": "demo"})
    assert "(one attack)" in demo.protocol_text(one, {})


def test_claims_file_states_its_protocol():
    from experiments import demo_claims

    shipped = json.loads(demo.CLAIMS_FILE.read_text())
    assert shipped["protocol"] == demo.PROTOCOL
    claims = demo_claims.claims([0], [{"saliency": 0.4, "accuracy": 0.0}])
    assert claims["protocol"] == demo.PROTOCOL and claims["seeds"] == [0]
    assert claims["gains"]["saliency"] == {"mean": 0.4, "min": 0.4, "max": 0.4}


def test_verdict_names_the_protocol():
    text = demo.verdict({"saliency": 0.3, "accuracy": 0.0})
    assert "the demo_ensemble protocol" in text.splitlines()[0]
