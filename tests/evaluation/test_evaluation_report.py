"""The evaluation suite and the report on a trained digits model."""

from __future__ import annotations

import json
import math

import pytest

from robust_train.app.report import summary_table, write_report
from robust_train.attacks import target_region
from robust_train.evaluation import EvaluationSettings, evaluate_classifier
from robust_train.evaluation.engine import Evaluation, summarize

FAST = EvaluationSettings(
    ensemble=False,
    n_samples=48,
    n_steps=15,
    lipschitz_samples=4,
    fidelity_steps=8,
    explainers=("saliency", "input_x_gradient"),
)


@pytest.fixture(scope="module")
def suite(trained_digits):
    model, x, y = trained_digits
    return evaluate_classifier(model, x, y, FAST, progress=False)


def test_suite_reports_every_part_with_finite_values(suite, trained_digits):
    model, x, y = trained_digits
    m = suite["measures"]
    assert suite["n_images"] == 48
    assert m["accuracy"] == pytest.approx(float((model(x[:48]).argmax(1) == y[:48]).float().mean()))
    for name in ("random_sign", "topk", "mass_center", "targeted"):
        assert suite["counts"][f"attack/saliency/{name}/topk_intersection"] == m["n_attacked"]
        assert 0.0 <= m[f"attack/saliency/{name}/topk_intersection"] <= 1.0
    for name in ("random_sign", "topk", "mass_center"):
        assert math.isfinite(m[f"attack/saliency/{name}/center_shift"])
    # The paper's central claim on this model: a systematic attack beats random noise of the
    # same budget.
    assert (
        m["attack/saliency/topk/topk_intersection"]
        < m["attack/saliency/random_sign/topk_intersection"]
    )
    assert (
        m["attack/saliency/targeted/region_mass"] > m["attack/saliency/targeted/clean_region_mass"]
    )
    for name in ("saliency", "input_x_gradient"):
        assert m[f"lipschitz/{name}/lipschitz"] > 0
        curve = suite["curves"][f"fidelity/{name}/curves"]
        assert len(curve["MIF"]) == len(curve["xs"]) == len(curve["LIF"])
        assert m[f"fidelity/{name}/fidelity"] == pytest.approx(
            m[f"fidelity/{name}/lif_auc"] - m[f"fidelity/{name}/mif_auc"], abs=1e-6
        )
    assert suite["settings"]["k"] == 8 and suite["settings"]["epsilon"] == pytest.approx(0.1)


def test_model_mode_is_restored(trained_digits):
    model, x, y = trained_digits
    model.train()
    try:
        evaluate_classifier(
            model,
            x,
            y,
            EvaluationSettings(
                ensemble=False,
                n_samples=4,
                n_steps=2,
                lipschitz_samples=2,
                fidelity_steps=4,
                explainers=("saliency",),
                attacks=("topk",),
            ),
            progress=False,
        )
        assert model.training
    finally:
        model.eval()


def test_report_writes_markdown_json_and_plots(suite, tmp_path):
    results = {"a": suite, "b": suite}
    path = write_report(
        results,
        tmp_path,
        histories={
            "a": {"robustness/attack/saliency/topk/topk_intersection": [(0, 0.5), (1, 0.6)]}
        },
    )
    text = path.read_text()
    assert "| `attack/saliency/topk/topk_intersection` ↑ |" in text
    assert "- **top-k intersection** (`topk_intersection`, higher is better)" in text
    for png in ("fidelity_curves.png", "attack_examples.png", "robustness_per_epoch.png"):
        assert (tmp_path / png).stat().st_size > 1000
        assert f"]({png})" in text
    loaded = json.loads((tmp_path / "results.json").read_text())
    key = "attack/saliency/topk/topk_intersection"
    assert loaded["a"]["measures"][key] == suite["measures"][key]
    assert "_examples" not in loaded["a"]


def test_summary_table_has_a_column_per_model(suite):
    lines = summary_table({"x": suite, "y": {"measures": {"accuracy": 0.25}}}).splitlines()
    assert lines[0] == "| measure | x | y | images (every model) |"
    assert lines[2].endswith("| 0.250 | own |")  # accuracy row: y has no per-image values


def test_helpers():
    values = __import__("torch").tensor([1.0, 2.0, 3.0, float("nan")])
    summary = summarize(Evaluation(EvaluationSettings(), values={"accuracy": values}))
    low, high = summary["intervals"]["accuracy"]
    assert summary["measures"]["accuracy"] == 2.0 and summary["counts"]["accuracy"] == 3
    assert low < 2.0 < high
    assert target_region(8, 8).sum() == 16


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_samples=0), "n_samples"),
        (dict(epsilon=-0.1), "epsilon"),
        (dict(k=65), "k"),
        (dict(attacks=("bogus",)), "attacks"),
    ],
)
def test_bad_settings_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EvaluationSettings(**kwargs).resolved(8, 8)
