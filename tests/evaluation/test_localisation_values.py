"""Ground-truth localisation of clean and attacked maps (`localisation_values`): keys, the values
are the functional measures of the attack's maps, and "map = input" on images whose only ink is
the object."""

from __future__ import annotations

import math

import pytest
import torch

from robust_train.attacks import fragility_attack
from robust_train.evaluation import EvaluationSettings, localisation_values, measure_of
from robust_train.metrics.functional import relevance_mass_accuracy, relevance_rank_accuracy
from tests.support.helpers import TinyCNN

SETTINGS = dict(
    explainers=("saliency",), attacks=("topk",), n_steps=2, epsilon=0.1, k=8, seed=3,
    ensemble=False,  # compared with one fragility_attack below
)  # fmt: skip


def _batch(n: int = 6):
    """Images that are zero but on a 3x3 object: the input's mass is all on the mask."""
    g = torch.Generator().manual_seed(0)
    x = torch.zeros(n, 3, 8, 8)
    masks = torch.zeros(n, 8, 8, dtype=torch.bool)
    for i in range(n):
        top, left = torch.randint(0, 6, (2,), generator=g).tolist()
        masks[i, top : top + 3, left : left + 3] = True
        x[i][:, masks[i]] = torch.rand(3, 9, generator=g) * 0.5 + 0.5
    model = TinyCNN(in_channels=3, num_classes=3, seed=1).eval()
    return model, x, model(x).argmax(1), masks


def test_keys_and_values_are_the_measures_of_the_attack_maps():
    model, x, y, masks = _batch()
    y[0] = (y[0] + 1) % 3  # one misclassified image: not attacked, NaN
    settings = EvaluationSettings(**SETTINGS, input_reference=False)
    values = localisation_values(model, x, y, masks, settings)
    measures = ("relevance_mass", "relevance_rank", "pointing_game")
    assert sorted(values) == sorted(
        [f"localisation/saliency/{m}" for m in measures]
        + [f"attack/saliency/topk/{m}" for m in measures]
    )
    assert all(measure_of(key).higher_is_better for key in values)
    assert all(math.isnan(float(v[0])) for v in values.values())
    resolved = settings.resolved(8, 8)
    result = fragility_attack(
        model, x[1:], y[1:], explainer="saliency", objective="topk", seed=3, options=resolved
    )
    torch.testing.assert_close(
        values["localisation/saliency/relevance_mass"][1:],
        relevance_mass_accuracy(result.clean_map, masks[1:]),
    )
    torch.testing.assert_close(
        values["attack/saliency/topk/relevance_rank"][1:],
        relevance_rank_accuracy(result.attacked_map, masks[1:]),
    )


def test_map_equal_to_input_localises_an_object_on_a_black_background():
    model, x, y, masks = _batch()
    settings = EvaluationSettings(**SETTINGS)  # input_reference: "map = input" beside saliency
    values = localisation_values(model, x, y, masks, settings)
    for measure in ("relevance_mass", "relevance_rank", "pointing_game"):
        clean = values[f"localisation/input_reference/{measure}"]
        assert torch.equal(clean, torch.ones(6)), measure
    attacked = values["attack/input_reference/topk/relevance_mass"]
    assert bool(((attacked > 0) & (attacked <= 1)).all())  # measured on every image


def test_masks_must_match_the_images():
    model, x, y, masks = _batch()
    with pytest.raises(ValueError, match="`masks`"):
        localisation_values(model, x, y, masks[:, :4], EvaluationSettings(**SETTINGS))
