"""One file per extension, and one key scheme (the acceptance tests of the extension points).

A new explainer, penalty, attack objective and evaluation part are defined HERE, in the test
file alone, and each runs through everything that consumes it: the attack, a smoothness penalty
on the new explainer, the evaluation engine, a monitor during a real Lightning fit, and the
report. No other file knows about them. Then `robust-train evaluate`'s results and a monitor on
the same model and settings are checked to name every measure the same way.
"""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger
from torch import Tensor, nn

from robust_train import RobustClassifier
from robust_train.app.report import summary_table
from robust_train.attacks import (
    OBJECTIVES,
    FragilityObjective,
    fragility_attack,
    register_objective,
)
from robust_train.callbacks import RobustnessMonitor
from robust_train.evaluation import (
    MEASURES,
    PARTS,
    EvaluationPart,
    EvaluationSettings,
    Measure,
    PartOutput,
    evaluate_classifier,
    part_key,
    register_measure,
    register_part,
)
from robust_train.explain import EXPLAINERS, explainer_name, register_explainer, saliency
from robust_train.regularizers import (
    PENALTIES,
    ExplanationSmoothness,
    PenaltyTerm,
    register_penalty,
)
from tests.support.helpers import TinyCNN


def squared_gradient(model: nn.Module, inputs: Tensor, target: Tensor, *, create_graph=False):
    """The squared saliency map: a new differentiable explainer."""
    return saliency(model, inputs, target, create_graph=create_graph) ** 2


class SquaredSaliencyMean(PenaltyTerm):
    """Mean squared saliency: a new penalty (double backprop)."""

    double_backprop = True

    def penalty(self, model, inputs, target, logits):
        return squared_gradient(model, inputs, target, create_graph=True).flatten(1).mean(1)


class SpreadOut(FragilityObjective):
    """Ascend the entropy of the sum-normalised map: a new attack objective."""

    def ascent_value(self, maps: Tensor, rows: slice) -> Tensor:
        p = maps.flatten(1) / maps.flatten(1).sum(1, keepdim=True).clamp_min(1e-12)
        return -(p * p.clamp_min(1e-12).log()).sum(1)


class PeakPart(EvaluationPart):
    """Share of each explainer's map in its largest pixel: a new evaluation part (monitor)."""

    def keys(self):
        return tuple(
            part_key("peak", explainer_name(e), "peak_share") for e in self.settings.explainers
        )

    def run(self, model, inputs, labels, predictions):
        out = PartOutput()
        for explainer, key in zip(self.settings.explainers, self.keys(), strict=True):
            maps = EXPLAINERS[explainer].function(model, inputs, predictions).abs().flatten(1)
            out.values[key] = maps.amax(1) / maps.sum(1).clamp_min(1e-12)
        return out


def _data(n: int = 24, seed: int = 0) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


SETTINGS = dict(
    ensemble=False,
    parts=("fragility", "lipschitz", "fidelity", "peak"),
    explainers=("saliency", "squared_gradient"),
    attacks=("topk", "spread_out"),
    n_steps=2,
    lipschitz_samples=2,
    fidelity_steps=4,
    input_reference=False,  # the monitors' default: the same keys on both sides
)


def _model() -> nn.Module:
    return TinyCNN(num_classes=3, seed=1).eval()


def test_new_units_run_through_the_attack_and_a_penalty():
    model, (x, y) = _model(), _data(6)
    result = fragility_attack(
        model, x, model(x).argmax(1), explainer="squared_gradient", objective="spread_out",
        epsilon=0.1, n_steps=2, seed=0,
    )  # fmt: skip
    assert result.explainer == "squared_gradient" and result.objective == "spread_out"
    assert bool(result.measured.any())
    term = ExplanationSmoothness(explainer="squared_gradient", n_ascent_steps=1, seed=0)
    value = term(model, x, y)
    value.mean().backward()
    assert value.shape == (6,) and any(p.grad is not None for p in model.parameters())


def test_the_new_penalty_is_found_by_the_benchmarks_without_a_bare_formula():
    """benchmarks/train_bare.py discovers penalties through the registry: the new one is timed
    at its defaults beside the others, and what a bare formula would need is named."""
    from benchmarks import bench_train_step, train_bare

    assert "squared_saliency_mean" in train_bare.missing()
    with pytest.raises(train_bare.MissingBareFormula, match="@bare_formula"):
        train_bare.formula("squared_saliency_mean")
    model, (x, y) = _model().train(), _data(4)
    steps, notes = bench_train_step.registry_steps(model, x, y, torch.device("cpu"))
    assert "squared_saliency_mean" in steps and "squared_saliency_mean, bare" not in steps
    assert len(notes) == len(train_bare.missing())  # one line per penalty without a formula
    assert any("'squared_saliency_mean'" in n and "benchmarks/train_bare.py" in n for n in notes)


def test_new_units_run_through_the_engine_and_the_report():
    model, (x, y) = _model(), _data(8)
    result = evaluate_classifier(model, x, y, EvaluationSettings(**SETTINGS), progress=False)
    measures = result["measures"]
    for key in (
        "attack/squared_gradient/spread_out/topk_intersection",
        "attack/saliency/spread_out/spearman",
        "lipschitz/squared_gradient/lipschitz",
        "fidelity/squared_gradient/fidelity",
        "peak/squared_gradient/peak_share",
    ):
        assert key in measures, key
    table = summary_table({"model": result})
    assert "`peak/squared_gradient/peak_share`" in table
    assert "`attack/squared_gradient/spread_out/topk_intersection` ↑" in table


def test_new_units_run_in_a_monitor_and_a_penalty_during_a_fit(tmp_path):
    x, y = _data(48)
    data = torch.utils.data.TensorDataset(x, y)
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    monitor = RobustnessMonitor(
        parts=["fragility", "peak"], inputs=x[:12], targets=y[:12], n_samples=12,
        explainers=["squared_gradient"], attacks=["spread_out"], max_overhead=None,
        log_images=False,
    )  # fmt: skip
    module = RobustClassifier(TinyCNN(num_classes=3, seed=2), penalties=[SquaredSaliencyMean(0.1)])
    trainer = pl.Trainer(
        max_epochs=2, logger=CSVLogger(tmp_path), callbacks=[monitor], enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
    )  # fmt: skip
    trainer.fit(module, loader, loader)
    logged = set(trainer.callback_metrics)
    assert "robustness/peak/squared_gradient/peak_share" in logged
    assert "robustness/attack/squared_gradient/spread_out/topk_intersection" in logged
    assert "train/penalty/squared_saliency_mean" in logged
    assert monitor.evaluated_epochs == [0, 1]


def test_evaluate_and_a_monitor_name_every_measure_the_same_way():
    """One key scheme: the keys of results.json are the monitor's keys under `robustness/`."""
    model, (x, y) = _model(), _data(10)
    settings = EvaluationSettings(**SETTINGS)
    measures = evaluate_classifier(model, x, y, settings, progress=False)["measures"]
    options = {k: v for k, v in SETTINGS.items() if k != "parts"}
    monitor = RobustnessMonitor(parts=list(SETTINGS["parts"]), **options)
    monitor.resolve(8, 8)
    logged = monitor.evaluate(model, x, y, model(x).argmax(1)).scalars
    health = ("robustness/nonfinite",)  # the monitor's own health count, not a measure
    from_monitor = {
        k.removeprefix("robustness/") for k in logged if "/seconds/" not in k and k not in health
    }
    assert from_monitor == set(measures) - {"accuracy"}
    assert set(monitor.keys()) == {f"robustness/{k}" for k in from_monitor}
    for key in from_monitor:
        assert key.rsplit("/", 1)[-1] in MEASURES  # every key's measure declares its direction


@pytest.fixture(autouse=True, scope="module")
def _registered():
    """Register the four units (what their one file would do on import), and remove them after,
    so that the other test files see the registries as shipped."""
    register_explainer("squared_gradient")(squared_gradient)
    register_penalty("squared_saliency_mean")(SquaredSaliencyMean)
    register_objective("spread_out")(SpreadOut)
    register_measure(Measure("peak_share", "share of the map in its peak pixel", None))
    register_part("peak")(PeakPart)
    yield
    for registry, name in (
        (EXPLAINERS, "squared_gradient"),
        (PENALTIES, "squared_saliency_mean"),
        (OBJECTIVES, "spread_out"),
        (PARTS, "peak"),
        (MEASURES, "peak_share"),
    ):
        registry.pop(name, None)
