"""16-mixed (GradScaler), half "-true" precisions and torch.compile with double-backprop penalties.

On the CPU, Lightning turns precision="16-mixed" into "bf16-mixed"; a MixedPrecision plugin with
a GradScaler gives real float16 autocast on the CPU, so the 16-mixed paths run here unmocked.
"""

from __future__ import annotations

import math

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins.precision import MixedPrecision
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from robust_train import RobustClassifier
from robust_train.models import SmallCNN
from robust_train.regularizers import (
    Curvature,
    ExplanationSmoothness,
    InputGradientNorm,
    LocalLipschitzPenalty,
)
from tests.support.helpers import digits_tensors

DOUBLE_BACKPROP_LOW_PRECISION = {
    "smoothness": lambda: ExplanationSmoothness(seed=0),
    "lipschitz": lambda: LocalLipschitzPenalty(seed=0),
    "gradnorm": lambda: InputGradientNorm(),
}
FINE_WITH_SCALER = {
    "none": lambda: None,
    "curvature-zero_order": lambda: Curvature(seed=0),
    "curvature-gradient_difference": lambda: Curvature(method="gradient_difference", weight=0.1),
    "gradnorm-finite_difference": lambda: InputGradientNorm(method="finite_difference"),
    "smoothness-weight-0": lambda: ExplanationSmoothness(weight=0.0),
}


def _loader() -> DataLoader:
    x, y = digits_tensors()
    return DataLoader(TensorDataset(x[:96], y[:96]), batch_size=32)


def _trainer(**kwargs) -> pl.Trainer:
    defaults = dict(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_train_batches=2,
    )
    return pl.Trainer(**{**defaults, **kwargs})


def _fp16_scaled() -> MixedPrecision:
    return MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))


def _module(penalty, model: nn.Module | None = None) -> RobustClassifier:
    net = SmallCNN(width=8) if model is None else model
    return RobustClassifier(net, penalties=[penalty] if penalty is not None else [])


@pytest.mark.parametrize("name", list(DOUBLE_BACKPROP_LOW_PRECISION))
def test_16_mixed_refuses_double_backprop_penalties(name: str):
    trainer = _trainer(plugins=[_fp16_scaled()])
    assert trainer.precision == "16-mixed" and trainer.precision_plugin.scaler is not None
    module = _module(DOUBLE_BACKPROP_LOW_PRECISION[name]())
    before = [p.detach().clone() for p in module.parameters()]
    with pytest.raises(ValueError, match=r"precision='16-mixed'.*bf16-mixed") as err:
        trainer.fit(module, _loader())
    assert module.penalties[0].name in str(err.value)
    assert trainer.global_step == 0
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))


@pytest.mark.parametrize("name", list(FINE_WITH_SCALER))
def test_16_mixed_runs_ce_and_float32_penalties(name: str):
    """Plain CE, weight-0 terms and terms that run in float32 train under real float16 autocast."""
    trainer = _trainer(plugins=[_fp16_scaled()])
    module = _module(FINE_WITH_SCALER[name]())
    seen: list[torch.dtype] = []
    module.model.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    trainer.fit(module, _loader())
    assert trainer.global_step == 2
    assert torch.float16 in seen  # the CE forward really ran in float16
    metrics = trainer.callback_metrics
    assert all(math.isfinite(float(v)) for k, v in metrics.items() if k.startswith("train/"))


def test_16_mixed_string_on_cpu_becomes_bf16_and_trains_smoothness():
    trainer = _trainer(precision="16-mixed")
    assert trainer.precision == "bf16-mixed"  # Lightning: no float16 AMP on the CPU
    trainer.fit(_module(ExplanationSmoothness(seed=0)), _loader())
    assert math.isfinite(float(trainer.callback_metrics["train/penalty/smoothness"]))


@pytest.mark.parametrize("precision", ["bf16-true", "16-true"])
def test_half_true_precision_refuses_finite_differences(precision: str):
    with pytest.raises(ValueError, match=rf"precision='{precision}'.*curvature"):
        _trainer(precision=precision).fit(_module(Curvature(seed=0)), _loader())


def _compiled_net() -> nn.Module:
    # aot_eager goes through AOTAutograd like the default inductor backend, without C++ builds.
    return torch.compile(SmallCNN(width=8), backend="aot_eager")


def test_torch_compile_cannot_double_backward():
    """Why compiled models are refused: AOTAutograd fails at the backward of a gradient penalty."""
    x, y = digits_tensors()
    inputs = x[:8].clone().requires_grad_(True)
    value = InputGradientNorm()(_compiled_net(), inputs, y[:8])
    with pytest.raises(RuntimeError, match="double backward"):
        value.sum().backward()


@pytest.mark.parametrize("name", list(DOUBLE_BACKPROP_LOW_PRECISION))
def test_compiled_inner_model_is_refused(name: str):
    module = _module(DOUBLE_BACKPROP_LOW_PRECISION[name](), model=_compiled_net())
    with pytest.raises(ValueError, match=rf"torch.compile.*\['{module.penalties[0].name}'\]"):
        _trainer().fit(module, _loader())


def test_compiled_lightning_module_is_refused():
    module = torch.compile(_module(Curvature(method="gradient_difference")), backend="aot_eager")
    with pytest.raises(ValueError, match="torch.compile"):
        _trainer().fit(module, _loader())


def test_compiled_model_trains_with_a_first_order_penalty():
    module = _module(Curvature(seed=0), model=_compiled_net())
    trainer = _trainer()
    trainer.fit(module, _loader())
    assert trainer.global_step == 2
    assert math.isfinite(float(trainer.callback_metrics["train/penalty/curvature"]))
