"""Faithfulness correlation (Bhatt et al. 2020): equal to Quantus' FaithfulnessCorrelation on the
same subsets and baseline, its limiting cases, argument checks, and the evaluation part through
the engine and a monitor during a real Lightning fit."""

from __future__ import annotations

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger

from robust_train import RobustClassifier
from robust_train.callbacks import RobustnessMonitor
from robust_train.evaluation import MEASURES, EvaluationSettings, evaluate_classifier
from robust_train.explain import integrated_gradients, saliency
from robust_train.metrics.functional import faithfulness_correlation
from tests.support.helpers import LinearModel, TinyCNN, digits_tensors

KEY = "faithfulness/{}/faithfulness_correlation"
TOLERANCE = 1e-4  # float32 forwards on both sides; Pearson in float64 (scipy) vs float64 here


def quantus_subsets(
    seed: int, batch: int, runs: int, size: int, n: int, named_baseline: bool
) -> torch.Tensor:
    """The subsets Quantus 0.6 draws after np.random.seed(seed): runs outer, images inner; a
    named baseline ("mean") makes its `get_baseline_dict` draw one uniform value per image after
    each run's subsets (its "uniform" entry is built whatever the baseline)."""
    np.random.seed(seed)  # noqa: NPY002  (Quantus draws from the global legacy RNG)
    draws = []
    for _ in range(runs):
        draws.append([np.random.choice(n, size, replace=False) for _ in range(batch)])  # noqa: NPY002
        if named_baseline:
            np.random.uniform(size=batch)  # noqa: NPY002
    return torch.from_numpy(np.asarray(draws)).permute(1, 0, 2)  # (B, R, S)


@pytest.mark.parametrize(("baseline", "ours"), [(0.0, "zero"), ("mean", "mean")])
@pytest.mark.parametrize("explainer", [saliency, integrated_gradients])
def test_equals_quantus_on_the_same_subsets(baseline, ours, explainer):
    quantus = pytest.importorskip("quantus")
    x, y = digits_tensors()
    x, y = x[:12], y[:12]
    model = TinyCNN().eval()
    target = model(x).argmax(1)
    a = explainer(model, x, target).detach()
    runs, size = 30, 9
    metric = quantus.FaithfulnessCorrelation(
        nr_runs=runs,
        subset_size=size,
        perturb_baseline=baseline,
        return_aggregate=False,
        disable_warnings=True,
    )  # fmt: skip (default abs=False, normalise=True: Pearson does not see a positive scale)
    subsets = quantus_subsets(7, len(x), runs, size, 64, isinstance(baseline, str))
    np.random.seed(7)  # noqa: NPY002  (the seed of quantus_subsets)
    expected = metric(
        model=model, x_batch=x.numpy(), y_batch=target.numpy(), a_batch=a.numpy(), device="cpu"
    )
    got = faithfulness_correlation(
        model, x, target, a, n_runs=runs, subset_size=size, perturbation=ours, subsets=subsets
    )
    np.testing.assert_allclose(got.numpy(), np.asarray(expected), atol=TOLERANCE, rtol=0)
    assert float(got.abs().mean()) > 0.05  # not a trivially equal pair of zeros


def test_a_linear_models_exact_attribution_correlates_perfectly():
    model = LinearModel()
    x, y = torch.rand(4, 1, 8, 8), torch.tensor([0, 3, 5, 9])
    exact = x[:, 0] * model.linear.weight[y].view(4, 8, 8).detach()  # the drop, pixel by pixel
    r = faithfulness_correlation(model, x, y, exact, n_runs=25, subset_size=6, seed=0)
    torch.testing.assert_close(r, torch.ones(4))
    r_neg = faithfulness_correlation(model, x, y, -exact, n_runs=25, subset_size=6, seed=0)
    torch.testing.assert_close(r_neg, -torch.ones(4))


def test_random_maps_score_about_zero_and_constant_maps_are_not_measured():
    x, _ = digits_tensors()
    model = TinyCNN().eval()
    x = x[:64]
    y = model(x).argmax(1)
    noise = torch.randn(64, 8, 8, generator=torch.Generator().manual_seed(1))
    r = faithfulness_correlation(model, x, y, noise, n_runs=40, subset_size=8, seed=0)
    assert abs(float(r.mean())) < 0.05 and float(r.std()) > 0.05
    constant = faithfulness_correlation(model, x, y, torch.ones(64, 8, 8), n_runs=5, seed=0)
    assert bool(constant.isnan().all())


def test_seeded_and_independent_of_chunking():
    model = TinyCNN().eval()
    x, y = torch.rand(5, 1, 8, 8), torch.arange(5)
    a = saliency(model, x, y)
    first = faithfulness_correlation(model, x, y, a, n_runs=12, seed=3, internal_batch_size=7)
    again = faithfulness_correlation(model, x, y, a, n_runs=12, seed=3, internal_batch_size=60)
    other = faithfulness_correlation(model, x, y, a, n_runs=12, seed=4)
    torch.testing.assert_close(first, again)
    assert not torch.allclose(first, other)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_runs": 1}, "`n_runs` must be >= 2"),
        ({"subset_size": 64}, "`subset_size` must be smaller than the 64 pixels"),
        ({"subset_size": 0}, "`subset_size` must be > 0, got 0"),
        ({"perturbation": "gray"}, "Unknown `perturbation` 'gray'"),
        ({"score": "loss"}, "Unknown `score` 'loss'"),
        ({"subsets": torch.zeros(2, 3, 4, dtype=torch.long)}, "`subsets` must have shape"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, message):
    model = TinyCNN().eval()
    x, y = torch.rand(2, 1, 8, 8), torch.tensor([0, 1])
    with pytest.raises((TypeError, ValueError), match=message):
        faithfulness_correlation(model, x, y, torch.rand(2, 8, 8), **kwargs)


def test_settings_check_their_fields():
    with pytest.raises(ValueError, match="`faithfulness_runs` must be >= 2, got 1"):
        EvaluationSettings(faithfulness_runs=1)
    with pytest.raises(ValueError, match="`faithfulness_subset` must be smaller than the 64"):
        EvaluationSettings(parts=("faithfulness",), faithfulness_subset=64).resolved(8, 8)


def test_the_part_through_the_engine_equals_the_function():
    x, y = digits_tensors()
    x, y = x[:10], y[:10]
    model = TinyCNN().eval()
    settings = EvaluationSettings(
        ensemble=False,
        parts=("faithfulness",), explainers=("saliency", "integrated_gradients"), n_samples=10,
        faithfulness_runs=20, faithfulness_subset=8, fidelity_perturbation="zero", ig_steps=8,
        seed=5,
    )  # fmt: skip
    result = evaluate_classifier(model, x, y, settings, progress=False)
    predictions = model(x).argmax(1)
    for name, explain in (("saliency", saliency), ("integrated_gradients", integrated_gradients)):
        options = {"n_steps": 8} if name == "integrated_gradients" else {}
        direct = faithfulness_correlation(
            model, x, predictions, explain(model, x, predictions, **options), n_runs=20,
            subset_size=8, perturbation="zero", seed=5,
        )  # fmt: skip
        assert result["measures"][KEY.format(name)] == pytest.approx(float(direct.mean()))
    measure = MEASURES["faithfulness_correlation"]
    assert measure.higher_is_better is True and measure.unit == ""


def test_a_monitor_logs_the_part_during_a_real_fit(tmp_path):
    x, y = digits_tensors()
    data = torch.utils.data.TensorDataset(x[:64], y[:64])
    loader = torch.utils.data.DataLoader(data, batch_size=32)
    monitor = RobustnessMonitor(
        parts=["faithfulness"], inputs=x[64:76], targets=y[64:76], n_samples=12,
        explainers=["saliency"], faithfulness_runs=10, max_overhead=None, log_images=False,
    )  # fmt: skip
    assert monitor.keys() == ("robustness/" + KEY.format("saliency"),)
    trainer = pl.Trainer(
        max_epochs=2, logger=CSVLogger(tmp_path), callbacks=[monitor], enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
    )  # fmt: skip
    trainer.fit(RobustClassifier(TinyCNN()), loader, loader)
    value = trainer.callback_metrics["robustness/" + KEY.format("saliency")]
    assert bool(torch.isfinite(value)) and -1 <= float(value) <= 1
    assert monitor.evaluated_epochs == [0, 1]
    logged = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text()
    assert "robustness/" + KEY.format("saliency") in logged
