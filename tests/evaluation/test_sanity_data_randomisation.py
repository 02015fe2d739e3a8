"""The data-randomisation test of Adebayo et al. (2018) and the seeded sanity tables of
experiments/sanity_checks.py: Quantus's SSIM and Spearman on the same maps, the seeds' spread,
and limiting cases (a model against itself; a map that ignores the model)."""

from __future__ import annotations

import math

import pytest
import torch

from experiments import sanity_checks as sc
from robust_train.core.runtime import predict
from robust_train.explain import get_explainer, importance_map
from robust_train.models import MNISTConvNet


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return MNISTConvNet(channels=[4, 8], hidden=16).eval()


def _images() -> torch.Tensor:
    return torch.rand(4, 1, 28, 28, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("explainer", ["saliency", "input_x_gradient"])
def test_data_randomisation_equals_quantus_ssim_and_spearman_on_the_same_maps(explainer):
    pytest.importorskip("quantus")
    from quantus.functions.similarity_func import correlation_spearman, ssim

    model, others, x = _model(0), [_model(1), _model(2)], _images()
    x[..., 0, 0] = 0.0  # input x gradient is 0 there: both maps span [0, 1] once scaled
    ours = sc.data_randomisation(model, others, x, explainer)
    explain, target = get_explainer(explainer), predict(model, x, 256)
    clean = importance_map(explain(model, x, target).detach())
    for i, other in enumerate(others):
        maps = importance_map(explain(other, x, target).detach())
        spear, sim = [], []
        for a, b in zip(clean, maps, strict=True):
            spear.append(correlation_spearman(a.flatten().numpy(), b.flatten().numpy()))
            # Quantus's SSIM takes max - min of both maps as its data range, ours 1 on maps
            # scaled to a maximum of 1: the same where both maps reach 0
            sim.append(ssim((a / a.max()).numpy(), (b / b.max()).numpy(), win_size=7))
        assert ours["spearman"][i] == pytest.approx(sum(spear) / len(spear), abs=1e-5)
        if explainer == "input_x_gradient":
            assert ours["ssim"][i] == pytest.approx(sum(sim) / len(sim), abs=1e-4)
    assert ours["blank"] == [0.0, 0.0]


def test_a_model_against_itself_scores_one_and_a_constant_map_is_left_out():
    model, x = _model(0), _images()
    same = sc.data_randomisation(model, [model], x, "saliency")
    for line, _ in sc.LINES:
        assert same[line] == [pytest.approx(1.0, abs=1e-5)]
    dead = _model(1)
    for p in dead.parameters():
        torch.nn.init.zeros_(p)  # every gradient zero: a constant map, never counted as 0
    blank = sc.data_randomisation(model, [dead], x, "saliency")
    assert math.isnan(blank["topk"][0]) and blank["blank"] == [1.0]


def test_the_seeds_give_different_random_networks_and_a_spread():
    model, x = _model(0), _images()
    y = predict(model, x, 256)
    runs = sc.seeded_sanity(model, x, y, explainers=("saliency",), ig_steps=2)
    assert len(runs) == len(sc.SEEDS)
    ends = [r["curves"]["sanity/saliency/cascade"]["topk"][-1] for r in runs]
    assert len(set(ends)) > 1  # each seed its own random weights
    table = sc.curve_table({"m": runs}, "cascade", explainers=("saliency",))
    first = table["rows"][0]
    assert first[:3] == ["saliency", "m", "top-100 ∩"] and first[3] == "1.000 ± 0.000"
    assert "±" in first[-1] and len(table["columns"]) == len(first)
