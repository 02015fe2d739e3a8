"""The sanity part (model-parameter randomisation, Adebayo et al. 2018) against Quantus's
MPRT on the same randomised network, its randomised copy, limiting cases and a monitor."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.callbacks import RobustnessMonitor
from robust_train.evaluation import EvaluationSettings, evaluate_classifier
from robust_train.evaluation.measures import MEASURES
from robust_train.evaluation.parts.sanity import (
    EXTRA_NAMES,
    MEASURE_NAMES,
    randomization_similarity,
    randomized_copy,
)
from robust_train.explain import get_explainer, importance_map
from robust_train.metrics.functional import spearman_correlation, topk_intersection
from robust_train.models import MNISTConvNet, Normalize
from tests.support.helpers import TinyCNN
from tests.support.quantus_refs import quantus_mprt


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        Normalize([0.3], [0.4]),
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.Softplus(beta=3.0),
        nn.Conv2d(4, 4, 3, padding=1),
        nn.Softplus(beta=3.0),
        nn.Flatten(),
        nn.Linear(4 * 64, 3),
    ).eval()


@pytest.mark.parametrize("explainer", ["saliency", "input_x_gradient", "integrated_gradients"])
@pytest.mark.parametrize("build", [_net, lambda: MNISTConvNet(channels=[4, 8], hidden=16).eval()])
def test_spearman_equals_quantus_mprt_on_the_same_random_network(build, explainer):
    """Quantus's MPRT (cascading top-down, skip_layers, last correlation, abs, no
    normalisation) against ours with Quantus's own fully randomised copy."""
    pytest.importorskip("quantus")
    from quantus.helpers.model.pytorch_model import PyTorchModel

    model = build()
    size = 8 if build is _net else 28
    x = torch.rand(5, 1, size, size, generator=torch.Generator().manual_seed(1))
    y = model(x).argmax(1)
    explain = get_explainer(
        explainer, **({"n_steps": 4} if explainer == "integrated_gradients" else {})
    )

    theirs = quantus_mprt(model, x, y, explain, last=True)
    wrapped = PyTorchModel(model=model, channel_first=True, softmax=False, device="cpu")
    *_, (_, random_model) = wrapped.get_random_layer_generator(order="top_down", seed=7)
    ours = randomization_similarity(model, random_model, x, y, explain, 10)
    expected = torch.tensor(theirs, dtype=torch.float32)
    torch.testing.assert_close(ours["random_weights_spearman"], expected, atol=1e-6, rtol=0)


def test_the_randomised_copy_reinitialises_every_layer_top_down_from_the_seed():
    model = _net()
    model[2].running_mean.fill_(0.3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    twin = randomized_copy(model, seed=3)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # untouched
    for i in (1, 4, 7):  # convolutions and the linear layer: new random weights
        assert not torch.equal(twin[i].weight, model[i].weight)
        assert not torch.equal(twin[i].bias, model[i].bias)
    assert bool((twin[2].running_mean == 0).all())  # BatchNorm: its reset_parameters
    assert torch.equal(twin[0].mean, model[0].mean)  # Normalize has no reset: kept
    assert not twin.training and not twin[2].training
    expected = TinyCopy.cascade(model, 3)
    for (name, ours), theirs in zip(twin.state_dict().items(), expected.values(), strict=True):
        torch.testing.assert_close(ours, theirs, msg=name)
    again, other = randomized_copy(model, seed=3), randomized_copy(model, seed=4)
    assert torch.equal(again[1].weight, twin[1].weight)
    assert not torch.equal(other[1].weight, twin[1].weight)
    with pytest.raises(ValueError, match="no module with reset_parameters"):
        randomized_copy(Normalize([0.5], [0.5]), seed=0)


class TinyCopy:
    @staticmethod
    def cascade(model: nn.Module, seed: int) -> dict:
        """By hand: a copy, the global generator seeded once, the resettable modules reset from
        the last to the first."""
        import copy

        twin = copy.deepcopy(model)
        state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        for module in [twin[7], twin[4], twin[2], twin[1]]:
            module.reset_parameters()
        torch.random.set_rng_state(state)
        return twin.state_dict()


def test_a_map_that_ignores_the_model_fails_the_check_completely():
    """input_reference: the same map on the random network and the input itself (all 1)."""
    model, x = _net(), torch.rand(4, 1, 8, 8)
    values = randomization_similarity(
        model, randomized_copy(model, seed=0), x, torch.zeros(4, dtype=torch.long),
        get_explainer("input_reference"), 10,
    )  # fmt: skip
    for name in MEASURE_NAMES:
        torch.testing.assert_close(values[name], torch.ones(4), msg=name)


def test_part_values_equal_a_direct_computation_and_are_reported():
    model, x = TinyCNN(num_classes=3, seed=1).eval(), torch.rand(6, 1, 8, 8)
    y = model(x).argmax(1)
    settings = EvaluationSettings(
        ensemble=False,
        parts=("sanity",), explainers=("saliency", "input_x_gradient"), n_samples=6,
        measure_k=10, seed=5,
    )  # fmt: skip
    result = evaluate_classifier(model, x, y, settings, progress=False)
    random_model = randomized_copy(model, seed=5)
    for explainer in ("saliency", "input_x_gradient"):
        maps = importance_map(get_explainer(explainer)(model, x, y))
        random_maps = importance_map(get_explainer(explainer)(random_model, x, y))
        image = importance_map(x)
        expected = {
            "random_weights_topk": topk_intersection(maps, random_maps, 10),
            "random_weights_spearman": spearman_correlation(maps, random_maps),
            "input_topk": topk_intersection(maps, image, 10),
            "input_spearman": spearman_correlation(maps, image),
        }
        for name, values in expected.items():
            key = f"sanity/{explainer}/{name}"
            assert result["measures"][key] == pytest.approx(float(values.mean()), abs=1e-6)
    assert MEASURES["random_weights_topk"].higher_is_better is False
    assert MEASURES["input_topk"].higher_is_better is None


def test_a_monitor_logs_the_sanity_keys_during_a_fit(tmp_path):
    import pytorch_lightning as pl
    from pytorch_lightning.loggers import CSVLogger

    from robust_train import RobustClassifier

    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(32, 1, 8, 8, generator=g), torch.randint(0, 3, (32,), generator=g)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    monitor = RobustnessMonitor(
        parts=["sanity"], inputs=x[:8], targets=y[:8], n_samples=8, explainers=["saliency"],
        max_overhead=None, log_images=False,
    )  # fmt: skip
    names = (*MEASURE_NAMES, *EXTRA_NAMES)
    assert monitor.keys() == tuple(f"robustness/sanity/saliency/{m}" for m in names)
    trainer = pl.Trainer(
        max_epochs=1, logger=CSVLogger(tmp_path), callbacks=[monitor], accelerator="cpu",
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(RobustClassifier(TinyCNN(num_classes=3, seed=2)), loader, loader)
    assert "robustness/sanity/saliency/random_weights_topk" in trainer.callback_metrics
