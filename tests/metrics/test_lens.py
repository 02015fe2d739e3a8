"""`lens_topk_intersection` (LENS, Kamath et al., AAAI 2024) against slow reference code written
from the paper, its limiting cases, its metric class and its place in every attack's report."""

from __future__ import annotations

import math

import pytest
import torch

from robust_train.attacks import OBJECTIVES, fragility_attack
from robust_train.attacks.result import FragilityResult
from robust_train.evaluation import EvaluationSettings, evaluate_classifier
from robust_train.evaluation.measures import MEASURES
from robust_train.metrics import LENSTopkIntersection
from robust_train.metrics.functional import lens_topk_intersection, topk_intersection


def _top_pixels(values: list[list[float]], k: int) -> list[tuple[int, int]]:
    """The k largest positive pixels, ties to the lower row-major index."""
    width = len(values[0])
    flat = [(v, i) for i, v in enumerate(p for row in values for p in row)]
    ranked = sorted(flat, key=lambda vi: (-vi[0], vi[1]))[:k]
    return [(i // width, i % width) for v, i in ranked if v > 0]


def reference_lens(map_a: torch.Tensor, map_b: torch.Tensor, k: int, window: int) -> list[float]:
    """A top-k pixel of map_b is kept when some top-k pixel of map_a lies in the
    (2w+1) x (2w+1) square around it; kept / max(|S_a|, |S_b|), one pixel at a time."""
    out = []
    for a, b in zip(map_a.tolist(), map_b.tolist(), strict=True):
        top_a, top_b = _top_pixels(a, k), _top_pixels(b, k)
        kept = 0
        for r, c in top_b:
            if any(max(abs(r - q), abs(c - s)) <= window for q, s in top_a):
                kept += 1
        larger = max(len(top_a), len(top_b))
        out.append(kept / larger if larger else math.nan)
    return out


def authors_lens(map_a: torch.Tensor, map_b: torch.Tensor, k: int) -> list[float]:
    """The authors' evaluation code, re-written: the 3x3 window on flattened indices
    (+-1, +-W), which wraps across rows and drops index 0, and a plain top-k of each map."""
    out = []
    for a, b in zip(map_a, map_b, strict=True):
        w, n = a.shape[1], a.numel()
        top_a = a.flatten().argsort(stable=True)[-k:].tolist()
        top_b = set(b.flatten().argsort(stable=True)[-k:].tolist())
        near = {i + d for i in top_a for d in (-w - 1, -w, -w + 1, -1, 0, 1, w - 1, w, w + 1)}
        near = {i for i in near if 0 < i < n}
        out.append(len(near & top_b) / k)
    return out


def _maps(seed: int, batch: int = 6, size: int = 9) -> tuple[torch.Tensor, torch.Tensor]:
    """Maps with ties (values rounded to tenths) and exact zeros."""
    g = torch.Generator().manual_seed(seed)
    a = (torch.rand(batch, size, size, generator=g) * 10).round() / 10
    b = (torch.rand(batch, size, size, generator=g) * 10).round() / 10
    a[0], b[1, :4] = 0.0, 0.0  # an all-zero map, a map with few positive pixels
    return a, b


@pytest.mark.parametrize("window", [0, 1, 2, 3])
@pytest.mark.parametrize("k", [1, 5, 20, 81])
def test_equals_the_slow_reference(k, window):
    for seed in range(3):
        a, b = _maps(seed)
        expected = torch.tensor(reference_lens(a, b, k, window), dtype=a.dtype)
        torch.testing.assert_close(
            lens_topk_intersection(a, b, k, window=window), expected, equal_nan=True
        )


def test_equals_the_authors_code_where_no_top_pixel_touches_the_border():
    """Away from the border (and from pixel 0) the flattened-index window of the authors' code
    is the 2-D square; distinct positive values: the two top-k sets are the same."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(8, 12, 12, generator=g) * 0.1, torch.rand(8, 12, 12, generator=g) * 0.1
    inner = torch.zeros(12, 12, dtype=torch.bool)
    inner[2:-2, 2:-2] = True
    a[:, inner] += 1 + torch.rand(8, int(inner.sum()), generator=g)
    b[:, inner] += 1 + torch.rand(8, int(inner.sum()), generator=g)
    expected = torch.tensor(authors_lens(a, b, 30))
    torch.testing.assert_close(lens_topk_intersection(a, b, 30), expected)
    edge = torch.zeros(1, 12, 12)
    edge[0, 5, 11], shifted = 1.0, torch.zeros(1, 12, 12)
    shifted[0, 6, 0] = 1.0  # the next row's first pixel: a neighbour only in flattened indices
    assert authors_lens(edge, shifted, 1) == [1.0]
    assert lens_topk_intersection(edge, shifted, 1).tolist() == [0.0]


def test_limiting_cases():
    a, b = _maps(4)
    torch.testing.assert_close(
        lens_topk_intersection(a, b, 10, window=0), topk_intersection(a, b, 10), equal_nan=True
    )
    same = lens_topk_intersection(a[1:], a[1:], 10)
    torch.testing.assert_close(same, torch.ones_like(same))
    interior = torch.zeros(3, 10, 10)
    interior[:, 2:8, 2:8] = torch.rand(3, 6, 6) + 0.1
    for dims, shift in [((1,), 1), ((2,), -1), ((1, 2), (1, 1))]:
        moved = interior.roll(shift, dims=dims)  # one pixel, the support stays in the image
        for window in (1, 2):
            kept = lens_topk_intersection(interior, moved, 20, window=window)
            torch.testing.assert_close(kept, torch.ones(3))
        assert (lens_topk_intersection(interior, moved, 20, window=0) < 1).all()
    widening = [lens_topk_intersection(a, b, 10, window=w) for w in range(4)]
    for narrow, wide in zip(widening[:-1], widening[1:], strict=True):
        assert bool((wide[1:] >= narrow[1:]).all())
    assert math.isnan(float(lens_topk_intersection(a[:1], a[:1], 3)[0]))  # two empty maps


def test_bad_arguments_are_refused():
    a = torch.rand(2, 4, 4)
    with pytest.raises(ValueError, match="window"):
        lens_topk_intersection(a, a, 3, window=-1)
    with pytest.raises(ValueError, match="`k`"):
        lens_topk_intersection(a, a, 17)
    with pytest.raises(ValueError, match="window"):
        LENSTopkIntersection(k=3, window=1.5)
    with pytest.raises(ValueError, match="k"):
        LENSTopkIntersection(k=0)


def test_metric_class_accumulates_the_functional_mean():
    a, b = _maps(5, batch=10)
    b[0] = 0.0  # two all-zero maps: undefined
    values = lens_topk_intersection(a, b, 8)
    whole, halves = LENSTopkIntersection(k=8), LENSTopkIntersection(k=8)
    whole.update(a, b)
    halves.update(a[:4], b[:4])
    halves.update(a[4:], b[4:])
    expected = values[~values.isnan()].double().mean()
    torch.testing.assert_close(whole.compute(), expected)
    torch.testing.assert_close(halves.compute(), expected)
    assert int(whole.n_undefined) == int(values.isnan().sum()) == 1


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.Softplus(), torch.nn.Linear(16, 3)
    )


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_every_attack_reports_it_from_its_maps(objective):
    net, x = _net(), torch.rand(4, 1, 8, 8)
    region = torch.zeros(1, 8, 8, dtype=torch.bool)
    region[:, :4, :4] = True
    needs = OBJECTIVES[objective].needs_region
    result = fragility_attack(
        net, x, net(x).argmax(1), objective=objective, epsilon=0.2, n_steps=3, k=10,
        measure_k=6, seed=0, target_region=region if needs else None,
    )  # fmt: skip
    values = result.values()
    if "topk_intersection" in values:
        assert "lens_topk" in values
    if "lens_topk" in values:
        expected = lens_topk_intersection(result.clean_map, result.attacked_map, 6, window=1)
        torch.testing.assert_close(values["lens_topk"], expected.float(), equal_nan=True)
        assert bool((values["lens_topk"] >= values["topk_intersection"]).all())


def test_unmeasured_samples_are_nan():
    net, x = _net(), torch.rand(3, 1, 8, 8)
    result = fragility_attack(net, x, net(x).argmax(1), epsilon=0.2, n_steps=2, k=10, seed=0)
    result.measured = torch.tensor([True, False, True])
    assert result.lens_topk.isnan().tolist() == [False, True, False]
    joined = FragilityResult.concatenate([result, result])
    assert joined.lens_topk.shape == (6,)


def test_evaluate_and_the_monitors_report_it():
    from robust_train.callbacks import RobustnessMonitor

    net, x = _net(), torch.rand(6, 1, 8, 8)
    settings = EvaluationSettings(
        ensemble=False,
        parts=("fragility",), explainers=("saliency",), attacks=("topk",), n_samples=6,
        n_steps=2, epsilon=0.2, correct_only=False,
    )  # fmt: skip
    measures = evaluate_classifier(net, x, net(x).argmax(1), settings, progress=False)["measures"]
    assert 0 <= measures["attack/saliency/topk/lens_topk"] <= 1
    assert MEASURES["lens_topk"].higher_is_better is True
    monitor = RobustnessMonitor(parts=["fragility"], explainers=["saliency"], attacks=["topk"])
    assert "robustness/attack/saliency/topk/lens_topk" in monitor.keys()
