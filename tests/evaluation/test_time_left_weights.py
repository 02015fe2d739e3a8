"""The progress line's time left weighs each kind of work by its passes
(`robust_train.evaluation.cost`): a plan that starts with cheap units (random-sign draws, the
"map = input" reference's steps, Lipschitz samples) does not make the first estimate too low."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch
from torch import nn

from robust_train.evaluation import EvaluationSettings, cost
from robust_train.evaluation import engine as engine_module
from robust_train.evaluation.cost import UnitCosts, unit_costs
from robust_train.evaluation.engine import build_parts, run_parts, total_work


def conv_net() -> nn.Module:
    """Small, but its convolutions (not Python) dominate a map's time on one CPU thread."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32 * 4, 3),
    ).eval()  # fmt: skip


def unweighted(explainer: object, settings: object) -> UnitCosts:
    """The old count of an attack: every step and draw one unit (no forward counted)."""
    return UnitCosts(step=1.0, map=1.0, forward=0.0)


def test_unit_costs_follow_the_passes():
    s = EvaluationSettings(ig_steps=8).resolved(8, 8)
    names = ("saliency", "integrated_gradients", "input_reference")
    one, ig, ref = (unit_costs(e, s) for e in names)
    assert one.forward < one.map < one.step == 1.0
    assert one.map == pytest.approx(cost.MAP_PASSES / cost.STEP_PASSES)
    assert (ig.step, ig.map) == pytest.approx((8 * one.step, 8 * one.map))  # its path points
    # no explainer: the label check's forward, and the scored iterate's logits
    assert (ref.map, ref.step) == pytest.approx((2 * one.forward, 3 * one.forward))
    # a part's work is the sum of its kinds: Lipschitz = (samples + 1) maps per explainer
    lip = EvaluationSettings(parts=("lipschitz",), explainers=("saliency", "integrated_gradients"),
                             lipschitz_samples=3, ig_steps=8)  # fmt: skip
    assert total_work(build_parts(lip, 8, 8), 2) == pytest.approx(2 * 4 * (one.map + ig.map))


def test_weighting_raises_the_first_estimate_of_a_plan_led_by_cheap_units(monkeypatch):
    """Random-sign draws first (one map each), then a gradient attack: counted alike, the
    draws' share of the work is over-stated and the first time left too low."""
    s = EvaluationSettings(
        parts=("fragility",), explainers=("saliency",), attacks=("random_sign", "topk"),
        noise_draws=15, n_steps=4, ensemble=False, input_reference=False,
    )  # fmt: skip
    cheap = dataclasses.replace(s, attacks=("random_sign",))

    def share(settings: EvaluationSettings) -> float:
        return total_work(build_parts(cheap, 8, 8), 1) / total_work(build_parts(settings, 8, 8), 1)

    weighted = share(s)
    with monkeypatch.context() as m:
        for module in ("fragility", "lipschitz", "fidelity", "base"):
            m.setattr(f"robust_train.evaluation.parts.{module}.unit_costs", unweighted)
        counted = share(s)
    assert counted == pytest.approx(16 / (16 + 5))  # the old count: 16 draws, 4 steps + 1
    # time left after the draws = spent x (1 - share) / share: over twice as large weighted
    assert (1 - weighted) / weighted > 2 * (1 - counted) / counted


@pytest.mark.slow  # timed: a few seconds on a loaded machine
def test_first_and_quarter_time_left_within_a_factor_of_two(monkeypatch):
    """The time left the bar prints (weighted work left x seconds per weighted unit so far) at
    its first update and at the first update past 25 %, against the time the rest took, on a
    plan of every cheap kind: random-sign draws first, the reference's attacks, Lipschitz
    samples and fidelity forwards."""
    marks: list[tuple[float, float, float]] = []  # (time, work done, bar's time left)
    real = engine_module.progress_bar

    def spy(parts, n_images, *, enabled):
        bar = real(parts, n_images, enabled=enabled)
        update = bar.update

        def logged(n=1):
            out = update(n)
            info = bar.format_dict
            assert info["rate"] is None  # no smoothing: the average rate over the time spent
            n, spent = info["n"], info["elapsed"]  # as tqdm's line computes its time left
            left = (info["total"] - n) * spent / n if n else float("nan")
            marks.append((time.perf_counter(), bar.n, left))
            return out

        bar.update = logged
        return bar

    monkeypatch.setattr(engine_module, "progress_bar", spy)
    s = EvaluationSettings(
        parts=("fragility", "lipschitz", "fidelity"), explainers=("saliency",),
        attacks=("random_sign", "topk"), noise_draws=8, n_steps=3, lipschitz_samples=4,
        fidelity_steps=4, ensemble=False, correct_only=False, k=16, measure_k=8,
    )  # fmt: skip
    x, model = torch.rand(2, 3, 48, 48), conv_net()
    y = model(x).argmax(1)
    run_parts(model, x, y, s)  # warm-up: first calls of every kernel
    marks.clear()
    parts = build_parts(s, 48, 48)
    run_parts(model, x, y, s, parts=parts, progress=True)
    end = time.perf_counter()
    total = total_work(parts, 2)
    moving = [(t, n, left) for t, n, left in marks if 0 < n < total]
    first = moving[0]
    quarter = next(m for m in moving if m[1] > 0.25 * total)
    ratios = [left / (end - t) for t, _, left in (first, quarter)]
    assert all(0.5 <= r <= 2.0 for r in ratios), (ratios, marks, total)
