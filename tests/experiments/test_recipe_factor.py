"""The gradient-factor study of the recipe search (experiments/recipe_factor.py): the frozen
factor equals the package's maps, the closed-form extreme point is the worst point of the ball
for a frozen map (checked against a search of a grid of the ball), the step keeps the label, and
the table pairs each model with the ensemble's values on the same images."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from torch import nn

from experiments import recipe_factor
from experiments.recipe_factor import (
    extreme_point,
    gradient_factor,
    label_kept_step,
)
from robust_train.explain import input_x_gradient, integrated_gradients
from robust_train.explain.similarity import topk_intersection


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(2 * 3 * 3, 8), nn.ReLU(), nn.Linear(8, 3)).eval()


@pytest.mark.parametrize(
    ("name", "reference"),
    [("input_x_gradient", lambda m, x, y: input_x_gradient(m, x, y)),
     ("integrated_gradients",
      lambda m, x, y: integrated_gradients(m, x, y, n_steps=7, baseline=0.0))],
)  # fmt: skip
def test_input_times_factor_is_the_packages_map(name, reference):
    model, x = net(), torch.rand(4, 2, 3, 3)
    y = torch.tensor([0, 1, 2, 0])
    factor = gradient_factor(model, x, y, name, steps=7)
    torch.testing.assert_close(x * factor, reference(model, x, y), atol=1e-6, rtol=1e-5)


def test_input_factor_is_one_and_unknown_maps_are_refused():
    x = torch.rand(1, 1, 2, 2)
    assert torch.equal(gradient_factor(net(), x, torch.tensor([0]), "input", 3), torch.ones_like(x))
    with pytest.raises(ValueError, match="`name` must be one of"):
        gradient_factor(net(), x, torch.tensor([0]), "saliency", 3)


def test_no_point_of_the_ball_keeps_less_of_a_frozen_map_than_the_extreme_point():
    # every point of a 5-value grid per coordinate of the box (clipped ball) of a 2-channel
    # 2 x 2 image: the frozen map sum_c |x' * G| keeps at least what the extreme point keeps
    torch.manual_seed(3)
    x, factor, epsilon, k = torch.rand(1, 2, 2, 2), torch.randn(1, 2, 2, 2), 0.3, 2
    clean = (x * factor).abs().sum(1)
    far = extreme_point(x, factor, epsilon, k)
    assert (far - x).abs().max() <= epsilon + 1e-6 and far.min() >= 0 and far.max() <= 1
    worst = topk_intersection(clean, (far * factor).abs().sum(1), k).item()
    low, high = (x - epsilon).clamp(min=0).flatten(), (x + epsilon).clamp(max=1).flatten()
    grid = [torch.linspace(float(a), float(b), 5) for a, b in zip(low, high, strict=True)]
    points = torch.stack([torch.stack(p) for p in itertools.product(*grid)]).view(-1, 2, 2, 2)
    kept = topk_intersection(clean.expand(len(points), 2, 2), (points * factor).abs().sum(1), k)
    assert kept.min().item() == pytest.approx(worst)
    assert worst < 1.0  # the grid contains the extreme point, and it moves the map


def test_step_keeps_the_label_and_is_the_largest_that_does():
    # a linear two-class model: class 0 while x.sum() < 2; the far point flips the first image
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 2)).eval()
    with torch.no_grad():
        model[1].weight.copy_(torch.tensor([[0.0] * 4, [1.0] * 4]))
        model[1].bias.copy_(torch.tensor([0.0, -2.0]))
    x = torch.full((2, 1, 2, 2), 0.1)
    far = torch.stack([torch.full((1, 2, 2), 0.9), torch.full((1, 2, 2), 0.3)])
    y = torch.tensor([0, 0])
    step, point = label_kept_step(model, x, y, far)
    assert step[1].item() == 1.0 and torch.equal(point[1], far[1])
    assert step[0].item() == pytest.approx((2.0 - 0.4) / (3.6 - 0.4), abs=1e-5)
    assert bool((model(point).argmax(1) == y).all())
    with pytest.raises(ValueError, match="must predict `y`"):
        label_kept_step(model, x, torch.tensor([1, 0]), far)


def test_table_pairs_the_ensemble_on_the_same_images(tmp_path, monkeypatch):
    front = {"models": {"m": {"maps": {
        "input": {"index": [5, 7, 9], "values": [0.5, 0.7, 0.1]},
        "input_x_gradient": {"index": [5, 7, 9], "values": [0.6, float("nan"), 0.2]},
        "integrated_gradients": {"index": [5, 7, 9], "values": [0.4, 0.8, 0.9]}}}}}  # fmt: skip
    path = tmp_path / "front.json"
    path.write_text(json.dumps(front))
    monkeypatch.setattr(recipe_factor, "ENSEMBLE_RESULTS", path)
    monkeypatch.setattr(recipe_factor.ensemble_levels, "__defaults__", (path,))
    row = {"frozen": [0.8, 0.7], "step": [1.0, 0.5], "input_x_gradient": [0.6, 0.4],
           "integrated_gradients": [0.5, 0.5], "random": [0.1, 0.2],
           "background": [0.2, float("nan")]}  # fmt: skip
    data = {"settings": {"images": [5, 7, 9]},
            "models": {"m": {"images": [0, 2], "input": row, "input_x_gradient": row,
                             "integrated_gradients": row}}}  # fmt: skip
    rows = {r[2]: r for r in recipe_factor.table(data)["rows"]}
    # images 5 and 9 (positions 0 and 2): the ensemble's mean over those two
    assert rows["map = input"][6] == "0.300" and rows["map = input"][5] == "-"
    assert rows["integrated gradients"][6] == "0.650" and rows["integrated gradients"][5] == "0.500"
    assert rows["input x gradient"][6] == "0.400"
    assert rows["map = input"][3] == "0.750" and rows["map = input"][4] == "1/2"
    assert rows["map = input"][7] == "0.75 (1)" and rows["map = input"][9] == "0.150"
    assert rows["map = input"][8] == "0.20"  # the image where no pixel entered is left out
    data["models"]["m"]["images"] = [0, 1]  # image 7 has no input x gradient value: not paired
    assert {r[2]: r for r in recipe_factor.table(data)["rows"]}["input x gradient"][6] == "-"


@pytest.mark.parametrize(
    ("argv", "said"),
    [(["--images", "0"], "`--images` must be >= 1, got 0"),
     (["--checkpoint", "no_path"], "`--checkpoint` takes TAG=PATH, got ['no_path']")],
)  # fmt: skip
def test_bad_arguments_exit_2_before_any_work(argv, said, capsys, monkeypatch):
    monkeypatch.setattr(recipe_factor, "run", lambda *a: pytest.fail("ran"))
    with pytest.raises(SystemExit) as exit_:
        recipe_factor.main(argv)
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err


def test_entering_pixels_are_split_by_their_clean_input():
    """Two pixels enter the top-2: one from the background (every channel below 0.05), one from
    the object; a pixel bright in one channel only is not background."""
    x = torch.tensor([[[[0.0, 0.9, 0.8], [0.6, 0.0, 0.0]], [[0.0, 0.9, 0.0], [0.0, 0.0, 0.3]]]])
    clean = torch.tensor([[[0.0, 0.9, 0.1], [0.8, 0.0, 0.0]]])
    moved = torch.tensor([[[0.9, 0.1, 0.8], [0.2, 0.0, 0.0]]])
    assert recipe_factor.entering_from_background(x, clean, moved, 2) == [0.5]
    moved_bright_one_channel = torch.tensor([[[0.0, 0.1, 0.0], [0.2, 0.0, 0.9]]])
    shares = recipe_factor.entering_from_background(x, clean, moved_bright_one_channel, 2)
    assert shares == [0.0]
