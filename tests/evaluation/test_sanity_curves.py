"""The sanity checks as Adebayo et al. (2018) define them: the whole cascade from the top layer
down and the independent randomisation of each layer, as curves per explainer; rank correlation
with and without absolute values; SSIM (against scikit-image); constant maps NaN, not 0."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import spearmanr
from skimage.metrics import structural_similarity
from torch import nn

from robust_train.evaluation import EvaluationSettings, evaluate_classifier
from robust_train.evaluation.parts.sanity import (
    compare_maps,
    randomization_similarity,
    randomized_copy,
    randomized_states,
    with_states,
)
from robust_train.explain import get_explainer, importance_map
from robust_train.explain.ssim import ssim


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(4, 4, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 64, 3),
    ).eval()


def test_ssim_equals_scikit_image():
    g = torch.Generator().manual_seed(0)
    for size in (8, 28):
        a = torch.rand(3, size, size, generator=g)
        b = (a + 0.4 * torch.rand(3, size, size, generator=g)).clamp(0, 1)
        expected = [
            structural_similarity(a[i].numpy(), b[i].numpy(), win_size=7, data_range=1.0)
            for i in range(3)
        ]
        torch.testing.assert_close(ssim(a, b), torch.tensor(expected, dtype=torch.float32))
    with pytest.raises(ValueError, match="`window`"):
        ssim(a, b, window=4)


@pytest.fixture(scope="module")
def evaluated():
    model = _net()
    x = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    y = model(x).argmax(1)
    settings = EvaluationSettings(
        ensemble=False, parts=("sanity",), explainers=("saliency",), measure_k=10, seed=5
    )
    return model, x, y, evaluate_classifier(model, x, y, settings, progress=False)


def test_cascade_runs_top_down_to_the_fully_random_copy(evaluated):
    model, x, y, result = evaluated
    states = randomized_states(model, seed=5)
    assert [name for name, _ in states] == ["5", "2", "0"]  # Linear, then the convs, top down
    assert result["sanity_layers"]["top_down"] == ["5", "2", "0"]
    full = with_states(model, states)
    reference = randomized_copy(model, seed=5)
    for a, b in zip(full.parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b)
    curve = result["curves"]["sanity/saliency/cascade"]
    assert curve["xs"] == [0.0, 1.0, 2.0, 3.0]
    assert curve["topk"][0] == pytest.approx(1.0)
    end = randomization_similarity(model, reference, x, y, get_explainer("saliency"), 10)
    assert curve["topk"][-1] == pytest.approx(float(end["random_weights_topk"].nanmean()))
    assert curve["spearman"][-1] == pytest.approx(float(end["random_weights_spearman"].nanmean()))
    blank = end["random_weights_topk"].isnan()  # the random copy's saliency is 0 on some image
    assert result["measures"]["sanity/saliency/blank_random_map"] == pytest.approx(
        float(blank.float().mean())
    )


def test_each_point_of_both_curves_equals_a_direct_comparison(evaluated):
    model, x, y, result = evaluated
    saliency = get_explainer("saliency")
    states = randomized_states(model, seed=5)
    clean = saliency(model, x, y)
    top_only = saliency(with_states(model, states[:1]), x, y)
    middle_alone = saliency(with_states(model, states[1:2]), x, y)
    measures = result["measures"]
    expected_top = compare_maps(clean, top_only, 10)["topk"]
    assert measures["sanity/saliency/top_layer_topk"] == pytest.approx(float(expected_top.mean()))
    independent = result["curves"]["sanity/saliency/independent"]
    assert independent["xs"] == [1.0, 2.0, 3.0]
    expected_mid = compare_maps(clean, middle_alone, 10)
    for line in ("topk", "spearman", "spearman_signed", "ssim"):
        assert independent[line][1] == pytest.approx(float(expected_mid[line].mean()), abs=1e-6)


def test_rank_correlation_with_and_without_absolute_values_equals_scipy():
    model = _net()
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    y = model(x).argmax(1)
    a = get_explainer("saliency")(model, x, y)
    b = get_explainer("saliency")(randomized_copy(model, seed=0), x, y)
    values = compare_maps(a, b, 10)
    for i in range(3):
        signed = spearmanr(a[i].sum(0).flatten(), b[i].sum(0).flatten()).statistic
        absolute = spearmanr(importance_map(a)[i].flatten(), importance_map(b)[i].flatten())
        assert float(values["spearman_signed"][i]) == pytest.approx(signed, abs=1e-5)
        assert float(values["spearman"][i]) == pytest.approx(absolute.statistic, abs=1e-5)


def test_a_blank_random_map_is_nan_and_flagged_never_zero():
    model, random_model = _net(), _net()
    x = torch.rand(4, 1, 8, 8)

    def blank_on_random(net, inputs, target, *, create_graph=False):
        return torch.zeros_like(inputs) if net is random_model else inputs.clone()

    values = randomization_similarity(
        model, random_model, x, torch.zeros(4, dtype=torch.long), blank_on_random, 10
    )
    assert bool(values["random_weights_topk"].isnan().all())
    assert bool(values["random_weights_spearman"].isnan().all())
    flagged = compare_maps(x, torch.zeros_like(x), 10)
    assert all(bool(v.isnan().all()) for v in flagged.values())
