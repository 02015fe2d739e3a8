"""The verdict per explainer, its figure, the printed budget, and budgets given as fractions."""

from __future__ import annotations

import math

import pytest
import torch

from robust_train.app.evaluate_output import closing_lines, evaluate_table
from robust_train.app.settings_flags import CommandParser, add_settings_arguments, settings_from
from robust_train.app.verdict_figure import write_verdict_figure
from robust_train.evaluation import EvaluationSettings, evaluate_classifier
from robust_train.evaluation.verdict import verdicts


def _measures(score, reference, noise, attack="topk"):
    m = {f"attack/saliency/{attack}/topk_intersection": score}
    if noise is not None:
        m["attack/saliency/random_sign/topk_intersection"] = noise
    if reference is not None:
        m[f"attack/input_reference/{attack}/topk_intersection"] = reference
    return {"measures": m}


@pytest.mark.parametrize(
    "score, reference, noise, expected",
    [
        (0.176, 0.355, 0.9, "below the input reference"),
        (0.5, 0.3, 0.9, "fragile"),  # drop 0.5 > 2 x 0.1
        (0.85, 0.3, 0.9, "robust"),  # drop 0.15 <= 0.2
        (0.85, None, None, "robust"),  # no reference or noise measured: the attack alone
        (float("nan"), 0.3, 0.9, "not measurable"),
    ],
)
def test_verdict_rule(score, reference, noise, expected):
    (verdict,) = verdicts(_measures(score, reference, noise))
    assert verdict.verdict == expected
    assert verdict.sentence().startswith(f"saliency: {expected} (")


def test_the_strongest_attack_decides():
    m = _measures(0.9, 0.5, 0.95)
    m["measures"]["attack/saliency/mass_center/topk_intersection"] = 0.4
    m["measures"]["attack/input_reference/mass_center/topk_intersection"] = 0.6
    (verdict,) = verdicts(m)
    assert (verdict.attack, verdict.score, verdict.reference) == ("mass_center", 0.4, 0.6)
    assert verdict.verdict == "below the input reference"


def test_real_evaluation_gets_verdicts_table_budget_and_figure(tmp_path):
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3), torch.nn.Softplus(),
                              torch.nn.Linear(3, 2))  # fmt: skip
    s = EvaluationSettings(
        n_samples=6, n_steps=2, parts=("fragility",), attacks=("random_sign", "topk"),
        explainers=("saliency", "input_x_gradient"), epsilon=8 / 255, correct_only=False,
        search_queries=20,
    )  # fmt: skip
    result = evaluate_classifier(net, torch.rand(6, 1, 4, 4), torch.tensor([0, 1] * 3), s,
                                 progress=False)  # fmt: skip
    lines = closing_lines({"m": result})
    assert lines[0].startswith("budget: L_inf epsilon 0.0314 (8/255 of the pixel range), 2 steps")
    assert [line.split(":")[1].strip() for line in lines[1:]] == ["saliency", "input_x_gradient"]
    table = evaluate_table(result)
    assert table.splitlines()[0] == "| measure | mean over the images | 95% interval |"
    low, high = result["intervals"]["attack/saliency/topk/topk_intersection"]
    assert f"| {low:.3f} to {high:.3f} |" in table
    path = write_verdict_figure({"m": result}, tmp_path / "verdict.png")
    assert path is not None and path.stat().st_size > 1000
    import matplotlib.image

    height = matplotlib.image.imread(path).shape[0]
    assert height < 2 * 1.9 * 90 + 10  # two rows, one per explainer: compact


def test_epsilon_takes_a_fraction_and_a_pixel_level_gets_a_hint(cli, tmp_path):
    parser = CommandParser()
    add_settings_arguments(parser)
    settings = settings_from(parser.parse_args(["--epsilon", "8/255", "--step-size", "1/255"]))
    assert math.isclose(settings.epsilon, 8 / 255) and math.isclose(settings.step_size, 1 / 255)
    done = cli(
        "evaluate", "--ckpt", "digits_robust", "--epsilon", "8", "--out", str(tmp_path / "o")
    )
    assert done.returncode == 2
    assert "8 is probably 8/255 = 0.03137" in done.stderr and "`--epsilon`" in done.stderr
    done = cli("evaluate", "--ckpt", "digits_robust", "--epsilon", "8/x")
    assert done.returncode == 2 and "a fraction such as 8/255, got '8/x'" in done.stderr
    assert not (tmp_path / "o").exists()
