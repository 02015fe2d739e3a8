"""The RAR evaluation preset, `PROTOCOLS["rar"]` (Chen et al. 2019)."""

from __future__ import annotations

import dataclasses

import torch

import robust_train.evaluation.parts.fragility as fragility_part
from robust_train.app.report import summary_table
from robust_train.evaluation import PROTOCOLS, EvaluationSettings, evaluate_classifier
from tests.support.helpers import SmoothMLP


def test_rar_preset_holds_the_papers_settings() -> None:
    rar = PROTOCOLS["rar"].resolved(28, 28)
    assert (rar.epsilon, rar.n_steps, rar.step_size) == (0.3, 100, 0.01)
    assert (rar.k, rar.measure_k, rar.n_restarts, rar.correct_only) == (200, 100, 3, True)
    assert rar.explainers == ("saliency", "integrated_gradients")
    assert rar.attacks == ("random_sign", "topk") and rar.ig_baseline == 0.0


def test_defaults_keep_todays_behaviour() -> None:
    s = EvaluationSettings().resolved(8, 8)
    assert s.explainers == ("saliency", "input_x_gradient")
    assert s.n_restarts == 1 and s.measure_k == s.k
    assert s.step_size == 0.1 / 8 and s.correct_only  # 50 steps: the default epsilon / 8


def test_rar_preset_runs_on_a_tiny_model(monkeypatch) -> None:
    model = SmoothMLP().eval()
    x = torch.rand(12, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    pred = model(x).argmax(1)
    y = pred.clone()
    y[:5] = (pred[:5] + 1) % 10  # 5 wrong labels: these images must not be attacked
    calls: list[dict] = []
    real_attack = fragility_part.fragility_attack

    def spy(model, inputs, target, **kwargs):
        options = kwargs["options"].attack_options().resolved(8, 8)
        calls.append({"n": inputs.shape[0], "target": target.clone(), "o": options, **kwargs})
        return real_attack(model, inputs, target, **kwargs)

    monkeypatch.setattr(fragility_part, "fragility_attack", spy)
    settings = dataclasses.replace(
        PROTOCOLS["rar"],
        n_samples=12,
        n_steps=2,
        k=16,
        measure_k=8,
        ig_steps=4,
        lipschitz_samples=2,
        fidelity_steps=4,
    )
    result = evaluate_classifier(model, x, y, settings, progress=False)
    reference = [c for c in calls if getattr(c["explainer"], "__name__", "") == "input_reference"]
    assert len(reference) == 2  # the reference "map = input" under both attacks
    calls = [c for c in calls if all(c is not r for r in reference)]
    assert result["measures"]["n_attacked"] == 7 and len(calls) == 4  # 2 explainers x 2 attacks
    for call in calls + reference:
        o = call["o"]
        assert call["n"] == 7 and torch.equal(call["target"], y[5:])
        assert (o.epsilon, o.step_size, o.n_restarts, o.k, o.measure_k) == (0.3, 0.01, 3, 16, 8)
    ig = [
        c["explainer"]
        for c in calls
        if getattr(c["explainer"], "__name__", "") == "integrated_gradients"
    ]
    assert len(ig) == 2 and ig[0].keywords == {"n_steps": 4, "baseline": 0.0}
    measures = result["measures"]
    for explainer in ("saliency", "integrated_gradients"):
        for attack in ("random_sign", "topk"):
            for metric in ("topk_intersection", "kendall", "spearman"):
                value = measures[f"attack/{explainer}/{attack}/{metric}"]
                assert value == value  # not NaN
    table = summary_table({"m": result})
    assert "| `attack/integrated_gradients/topk/kendall` ↑ |" in table
    assert "| `attack/saliency/random_sign/topk_intersection` ↑ |" in table
