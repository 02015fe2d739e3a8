"""The evaluation's time left accounts for the attack ensemble: its members, restarts,
directions and random search weigh the fragility part by what they cost."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from robust_train.attacks import ensemble_attack
from robust_train.evaluation import EvaluationSettings
from robust_train.evaluation import engine as engine_module
from robust_train.evaluation.engine import build_parts, run_parts, total_work


def tiny_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 3)
    ).eval()


def test_ensemble_work_counts_members_restarts_and_search():
    s = EvaluationSettings(
        parts=("fragility",), explainers=("saliency",), attacks=("topk",), n_steps=4,
        k=8, measure_k=4, ensemble_betas=(1.0, 3.0, 10.0), search_queries=7,
        input_reference=False,
    )  # fmt: skip
    # members k4, k8 (= 2 x 4 = k) and beta1, beta3 (the options' beta 10 is k4's own); each
    # 2 restarts x (4 steps + the start's map, a fifth of a step), one direction (saliency: the
    # surrogate); then 7 queries of a map each; the chance levels' 2 x 16 random maps (forwards)
    chance = 2 * 16 / 15
    assert total_work(build_parts(s, 8, 8), 1) == pytest.approx(4 * 2 * 4.2 + 7 * 0.2 + chance)
    one = EvaluationSettings(**{**vars(s), "ensemble": False})
    assert total_work(build_parts(one, 8, 8), 1) == pytest.approx(4.2 + chance)
    # the ensemble states its members: the same plan as the estimate
    x = torch.rand(2, 1, 8, 8)
    out = ensemble_attack(
        tiny_cnn(), x, torch.tensor([0, 1]), betas=s.ensemble_betas, search_queries=7, options=s
    )
    assert [m.name for m in out.members] == ["k4", "k8", "beta1", "beta3", "search"]
    assert sum(m.gradient_steps for m in out.members) == 4 * 2 * 4  # directions x restarts x steps


def test_a_map_that_moves_on_a_relu_model_counts_two_directions():
    s = EvaluationSettings(
        parts=("fragility",), explainers=("grad_cam",), attacks=("topk",), n_steps=2,
        ensemble=False, input_reference=False,
    )  # fmt: skip
    # model and surrogate, each 2 steps and the start's map; chance levels and fidelity curves
    maps = (2 * 16 + 2 * s.fidelity_steps) / 15
    assert total_work(build_parts(s, 8, 8), 3) == pytest.approx((2 * 1 * 2.2 + maps) * 3)


@pytest.mark.slow  # timed: a few seconds on a loaded machine
def test_time_left_after_the_first_attack_is_within_a_factor_of_two(monkeypatch):
    """The time left the bar shows (work left / rate so far) once the first ensemble attack
    has reported, against the time the rest of the evaluation then took."""
    marks: list[tuple[float, float]] = []
    real = engine_module.progress_bar

    def spy(parts, n_images, *, enabled):
        bar = real(parts, n_images, enabled=enabled)
        update = bar.update
        bar.update = lambda n=1: (update(n), marks.append((time.perf_counter(), bar.n)))[0]
        return bar

    monkeypatch.setattr(engine_module, "progress_bar", spy)
    s = EvaluationSettings(
        parts=("fragility", "lipschitz", "fidelity"), explainers=("saliency", "grad_cam"),
        attacks=("topk",), n_steps=3, search_queries=40, lipschitz_samples=4, fidelity_steps=4,
        k=8, measure_k=4, input_reference=False, correct_only=False,
    )  # fmt: skip
    x, y = torch.rand(2, 1, 8, 8), torch.tensor([0, 1])
    model = tiny_cnn()
    run_parts(model, x, y, s)  # warm-up: first calls of every kernel
    marks.clear()
    start = time.perf_counter()
    parts = build_parts(s, 8, 8)
    run_parts(model, x, y, s, parts=parts, progress=True)
    end = time.perf_counter()
    total = total_work(parts, 2)
    at, done = next((t, n) for t, n in marks if n > 0)  # the first attack's report
    estimate = (at - start) * (total - done) / done
    actual = end - at
    assert 0.5 <= estimate / actual <= 2.0, (estimate, actual, done, total)


@pytest.mark.parametrize("ensemble", [True, False])
def test_the_bar_ends_at_its_total(ensemble, monkeypatch):
    ends = []
    real = engine_module.progress_bar

    def spy(parts, n_images, *, enabled):
        bar = real(parts, n_images, enabled=enabled)
        close = bar.close
        bar.close = lambda: (ends.append((bar.n, bar.total)), close())[1]
        return bar

    monkeypatch.setattr(engine_module, "progress_bar", spy)
    s = EvaluationSettings(
        parts=("fragility",), explainers=("saliency",), attacks=("topk", "random_sign"),
        n_steps=2, search_queries=5, ensemble=ensemble, k=8, measure_k=4,
    )  # fmt: skip
    run_parts(tiny_cnn(), torch.rand(2, 1, 8, 8), torch.tensor([0, 1]), s, progress=True)
    ((n, total),) = ends
    assert n == pytest.approx(total)
