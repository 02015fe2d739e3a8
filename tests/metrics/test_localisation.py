"""Ground-truth localisation: relevance mass / rank accuracy and the pointing game, against
Quantus, a slow reference of the pointing game's tolerance, and limiting cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from robust_train.metrics import PointingGame, RelevanceMassAccuracy, RelevanceRankAccuracy
from robust_train.metrics.functional import (
    pointing_game,
    relevance_mass_accuracy,
    relevance_rank_accuracy,
)

FUNCTIONS = (relevance_mass_accuracy, relevance_rank_accuracy, pointing_game)


def random_case(seed: int, batch: int = 8, side: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    """Continuous random maps (no ties) and random rectangles of different sizes as masks."""
    g = torch.Generator().manual_seed(seed)
    maps = torch.rand(batch, side, side, generator=g) ** 3
    masks = torch.zeros(batch, side, side, dtype=torch.bool)
    for i in range(batch):
        top, left = torch.randint(0, side - 3, (2,), generator=g).tolist()
        h, w = torch.randint(2, 6, (2,), generator=g).tolist()
        masks[i, top : top + h, left : left + w] = True
    # place some maxima inside the mask so the pointing game scores both 0 and 1
    maps[::2][masks[::2]] += 1.0
    return maps, masks


@pytest.mark.parametrize(
    ("name", "ours"),
    [
        ("RelevanceMassAccuracy", relevance_mass_accuracy),
        ("RelevanceRankAccuracy", relevance_rank_accuracy),
        ("PointingGame", pointing_game),
    ],
)
def test_equals_quantus(name, ours):
    quantus = pytest.importorskip("quantus")
    maps, masks = random_case(3)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 144, 2)).eval()
    x = torch.rand(len(maps), 3, 12, 12)
    metric = getattr(quantus, name)(disable_warnings=True, return_aggregate=False)
    expected = metric(
        model=model,
        x_batch=x.numpy(),
        y_batch=np.zeros(len(maps), dtype=np.int64),
        a_batch=maps[:, None].numpy(),
        s_batch=masks[:, None].numpy().astype(np.float32),
        device="cpu",
    )
    got = ours(maps, masks)
    np.testing.assert_allclose(got.numpy(), np.asarray(expected, dtype=np.float64), atol=1e-6)
    assert len(set(got.tolist())) > 1  # the case separates the images


@pytest.mark.parametrize("score", FUNCTIONS)
def test_limiting_cases(score):
    _, masks = random_case(5)
    assert torch.equal(score(masks.float(), masks), torch.ones(len(masks)))
    outside = (~masks).float() * torch.rand(masks.shape)
    assert torch.equal(score(outside, masks), torch.zeros(len(masks)))


def test_uniform_map_scores_the_mask_share():
    _, masks = random_case(6)
    share = masks.flatten(1).float().mean(1)
    torch.testing.assert_close(relevance_mass_accuracy(torch.ones(masks.shape), masks), share)


@pytest.mark.parametrize("score", FUNCTIONS)
def test_empty_mask_is_not_measured(score):
    maps, masks = random_case(7, batch=3)
    masks[1] = False
    values = score(maps, masks)
    assert math.isnan(float(values[1])) and not torch.isnan(values[[0, 2]]).any()


def test_all_zero_map_has_no_mass_accuracy():
    _, masks = random_case(8, batch=2)
    assert torch.isnan(relevance_mass_accuracy(torch.zeros(masks.shape), masks)).all()


def slow_pointing_game(map_: torch.Tensor, mask: torch.Tensor, tolerance: float) -> float:
    """Zhang et al. 2018 by hand: is some maximum within `tolerance` pixels of a mask pixel?"""
    peaks = (map_ == map_.max()).nonzero().tolist()
    inside = mask.nonzero().tolist()
    return float(any(math.dist(p, q) <= tolerance + 1e-9 for p in peaks for q in inside))


@pytest.mark.parametrize("tolerance", [0.0, 1.0, 1.5, 3.0])
def test_pointing_game_tolerance_matches_a_slow_reference(tolerance):
    maps, masks = random_case(9, batch=12)
    maps[1::2] = torch.rand(6, 12, 12, generator=torch.Generator().manual_seed(1))
    got = pointing_game(maps, masks, tolerance=tolerance)
    expected = [slow_pointing_game(m, k, tolerance) for m, k in zip(maps, masks, strict=True)]
    assert got.tolist() == expected


def test_ties_for_the_maximum_hit_when_any_tied_pixel_is_on_the_mask():
    maps = torch.zeros(1, 2, 2)
    maps[0, 0, 0] = maps[0, 1, 1] = 1.0
    mask = torch.tensor([[[False, False], [False, True]]])
    assert pointing_game(maps, mask).tolist() == [1.0]


@pytest.mark.parametrize("score", FUNCTIONS)
def test_bad_input_names_the_argument(score):
    maps, masks = random_case(10, batch=2)
    with pytest.raises(ValueError, match="`masks`"):
        score(maps, masks[:, :-1])
    with pytest.raises(ValueError, match="`maps`"):
        score(maps - 1.0, masks)
    with pytest.raises(ValueError, match="`maps`"):
        score(maps[:, None], masks[:, None])


def test_negative_tolerance_is_refused():
    maps, masks = random_case(10, batch=2)
    with pytest.raises(ValueError, match="tolerance"):
        pointing_game(maps, masks, tolerance=-1)
    with pytest.raises(ValueError, match="tolerance"):
        PointingGame(tolerance=-1)


@pytest.mark.parametrize(
    ("cls", "score"),
    [
        (RelevanceMassAccuracy, relevance_mass_accuracy),
        (RelevanceRankAccuracy, relevance_rank_accuracy),
        (PointingGame, pointing_game),
    ],
)
def test_metric_class_is_the_mean_over_batches_without_nans(cls, score):
    maps, masks = random_case(11, batch=10)
    masks[3] = False  # not measured: left out of the mean
    metric = cls()
    metric.update(maps[:4], masks[:4])
    metric.update(maps[4:], masks[4:])
    values = score(maps, masks)
    expected = values[~torch.isnan(values)].mean()
    torch.testing.assert_close(metric.compute(), expected)
    assert int(metric.n_unmeasured) == 1 and int(metric.count) == 9
