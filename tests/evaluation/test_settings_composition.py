"""`EvaluationSettings` holds an `AttackOptions` (composition): the attack's fields stay
constructor keywords and attributes, `dataclasses.replace` and the flags see them, results keep
their flat layout, and a resolution is done once and passed down to the attacks."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import robust_train.attacks.options as attack_options
from robust_train.attacks import AttackOptions
from robust_train.core.options import build_options, option_names
from robust_train.evaluation import PROTOCOLS, EvaluationSettings, run_parts
from robust_train.evaluation.settings import ATTACK_FIELDS

OWN = [f.name for f in dataclasses.fields(EvaluationSettings) if f.name != "attack"]


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(16, 6), torch.nn.Softplus(), torch.nn.Linear(6, 2)
    )


def test_attack_keywords_build_the_held_options() -> None:
    s = EvaluationSettings(epsilon=0.2, n_steps=7, n_samples=3)
    assert not isinstance(s, AttackOptions)
    assert s.attack == AttackOptions(epsilon=0.2, n_steps=7)
    assert (s.epsilon, s.n_steps, s.k, s.n_samples) == (0.2, 7, None, 3)
    assert s == EvaluationSettings(attack=AttackOptions(epsilon=0.2, n_steps=7), n_samples=3)


def test_keywords_apply_over_a_given_attack_and_through_replace() -> None:
    s = EvaluationSettings(attack=AttackOptions(epsilon=0.2, n_steps=7), n_steps=3)
    assert (s.epsilon, s.n_steps) == (0.2, 3)
    t = dataclasses.replace(s, n_restarts=2, n_samples=5)
    assert (t.epsilon, t.n_steps, t.n_restarts, t.n_samples) == (0.2, 3, 2, 5)
    monitor = build_options(EvaluationSettings, {"k": 4}, where="m", base=t)
    assert (monitor.k, monitor.n_restarts) == (4, 2)


def test_bad_options_are_named() -> None:
    with pytest.raises(ValueError, match="`n_steps`"):
        EvaluationSettings(n_steps=0)
    with pytest.raises(TypeError, match="`attack` must be an AttackOptions, got dict"):
        EvaluationSettings(attack={"epsilon": 0.1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword argument 'epsilonn'"):
        EvaluationSettings(epsilonn=0.1)


def test_option_names_and_results_keep_the_flat_layout() -> None:
    expected = [f.name for f in dataclasses.fields(AttackOptions)] + OWN
    assert list(ATTACK_FIELDS) + OWN == expected
    assert list(option_names(EvaluationSettings)) == expected
    rar = PROTOCOLS["rar"].as_dict()
    assert list(rar) == expected
    assert (rar["epsilon"], rar["n_restarts"], rar["n_samples"]) == (0.3, 3, 50)
    ensemble = PROTOCOLS["ensemble"]  # built from the demo preset's attack, changed in part
    assert (ensemble.k, ensemble.n_steps, ensemble.epsilon) == (100, 40, 0.3)


def test_a_resolution_is_kept_for_its_size() -> None:
    s = EvaluationSettings(parts=("fragility",))
    r = s.resolved(8, 8)
    assert r.resolved(8, 8) is r and r.attack.resolved(8, 8) is r.attack
    assert r.attack_options() is r.attack and (r.k, r.epsilon) == (8, 0.1)
    other = s.resolved(16, 16)  # another size: resolved from the unresolved settings
    assert other is not r and other.k == 32
    assert dataclasses.replace(r, n_steps=2).step_size == r.step_size  # a new object, re-checked


def test_the_evaluate_path_resolves_the_attack_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """One attack on 8x8 images: `k` and `measure_k` are checked once (one resolution), not
    again when the attack receives the resolved options."""
    calls: list[str] = []
    check_k = attack_options.check_k

    def counting(value: int, name: str, height: int, width: int) -> int:
        calls.append(name)
        return check_k(value, name, height, width)

    monkeypatch.setattr(attack_options, "check_k", counting)
    s = EvaluationSettings(
        parts=("fragility",), attacks=("topk",), explainers=("saliency",), n_steps=2,
        ensemble=False, input_reference=False, correct_only=False,
    )  # fmt: skip
    x = torch.rand(3, 1, 4, 4)
    ev = run_parts(_net(), x, torch.tensor([0, 1, 0]), s)
    assert calls == ["k", "measure_k"]
    assert ev.settings.k == 2 and ev.values["attack/saliency/topk/topk_intersection"].shape == (3,)
