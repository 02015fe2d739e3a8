"""bf16-mixed training with every penalty; finite-difference penalties computed in float32."""

from __future__ import annotations

import functools
import math

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import Callback
from torch.utils.data import DataLoader, TensorDataset

from robust_train import RobustClassifier
from robust_train.models import SmallCNN
from robust_train.regularizers import (
    Curvature,
    ExplanationSmoothness,
    InputGradientNorm,
    LocalLipschitzPenalty,
    PenaltyTerm,
)
from robust_train.training.precision import (
    needs_double_backprop,
    needs_full_precision,
    penalty_value,
)
from tests.support.helpers import digits_tensors

PENALTIES = {
    "smoothness": lambda: ExplanationSmoothness(seed=0),
    "lipschitz": lambda: LocalLipschitzPenalty(seed=0),
    "gradnorm-double_backprop": lambda: InputGradientNorm(),
    "gradnorm-finite_difference": lambda: InputGradientNorm(method="finite_difference"),
    "curvature-zero_order": lambda: Curvature(seed=0),
    "curvature-gradient_difference": lambda: Curvature(method="gradient_difference", weight=0.1),
}
EPOCHS = 3


class EpochLosses(Callback):
    """Every epoch's mean loss parts (train/<part>_epoch), as floats."""

    def __init__(self) -> None:
        self.epochs: list[dict[str, float]] = []

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        metrics = trainer.callback_metrics
        self.epochs.append({k: float(v) for k, v in metrics.items() if k.endswith("_epoch")})


def _fit_bf16(penalty: PenaltyTerm) -> tuple[RobustClassifier, list[dict[str, float]]]:
    x, y = digits_tensors()
    loader = DataLoader(
        TensorDataset(x[:300], y[:300]),
        batch_size=25,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
    )
    module = RobustClassifier(
        SmallCNN(width=8), penalties=[penalty], optimizer=lambda p: torch.optim.Adam(p, lr=1e-2)
    )
    record = EpochLosses()
    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        devices=1,
        precision="bf16-mixed",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[record],
    )
    trainer.fit(module, loader)
    assert trainer.precision == "bf16-mixed"
    return module, record.epochs


@pytest.mark.parametrize("name", list(PENALTIES))
def test_bf16_mixed_trains_with_every_penalty(name: str):
    penalty = PENALTIES[name]()
    _, epochs = _fit_bf16(penalty)
    assert len(epochs) == EPOCHS
    part = f"train/penalty/{penalty.name}_epoch"
    for values in epochs:
        assert {"train/ce_epoch", part, "train/loss_epoch"} <= set(values)
        assert all(math.isfinite(v) for v in values.values()), values
    first, last = epochs[0]["train/loss_epoch"], epochs[-1]["train/loss_epoch"]
    assert last < 0.9 * first, f"{name}: loss {first:.4f} -> {last:.4f}"
    assert epochs[-1]["train/ce_epoch"] < epochs[0]["train/ce_epoch"]


@functools.cache
def _trained_net() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    x, y = digits_tensors()
    torch.manual_seed(0)
    net = SmallCNN(width=8)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    for _ in range(2):
        for i in range(0, 1400, 64):
            opt.zero_grad()
            F.cross_entropy(net(x[i : i + 64]), y[i : i + 64]).backward()
            opt.step()
    return net, x[1400:1464], y[1400:1464]


@pytest.mark.parametrize("name", list(PENALTIES))
def test_penalty_value_under_bf16_autocast(name: str):
    """Finite-difference terms equal their float32 value exactly (own float32 forward, autocast
    off); the others run in bf16 within a few percent of float32. Both come back as float32."""
    net, x, y = _trained_net()

    def value(autocast: bool) -> torch.Tensor:
        term = PENALTIES[name]()  # fresh generator: the same random draws in both runs
        xi = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = penalty_value(term, net, xi, y, net(xi))
        return out.detach()

    exact, low = value(False), value(True)
    assert low.dtype == torch.float32 and torch.isfinite(low).all()
    if needs_full_precision(PENALTIES[name]()):
        torch.testing.assert_close(low, exact, rtol=1e-6, atol=1e-6)
    else:
        assert (low.mean() - exact.mean()).abs() < 0.1 * exact.mean().abs()


def test_zero_order_curvature_in_bf16_would_be_wrong():
    """Why the float32 fallback exists: the same term evaluated on bf16 logits is far off."""
    net, x, y = _trained_net()
    exact = Curvature(seed=0)(net, x, y).detach()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = Curvature(seed=0)(net, x, y, net(x)).detach().float()
    assert (low.mean() - exact.mean()).abs() > 2 * exact.mean()


def test_kinds_of_the_built_in_penalties():
    kinds = {
        name: (needs_double_backprop(make()), needs_full_precision(make()))
        for name, make in PENALTIES.items()
    }
    assert kinds == {
        "smoothness": (True, False),
        "lipschitz": (True, False),
        "gradnorm-double_backprop": (True, False),
        "gradnorm-finite_difference": (False, True),
        "curvature-zero_order": (False, True),
        "curvature-gradient_difference": (True, True),
    }

    class Declared(PenaltyTerm):
        needs_input_grad = True
        double_backprop = False
        full_precision = True

    class Undeclared(PenaltyTerm):
        needs_input_grad = True

    assert (needs_double_backprop(Declared()), needs_full_precision(Declared())) == (False, True)
    # a term that does not say what it does is refused, not guessed (guessing from
    # `needs_input_grad` would let a term without that flag slip past the checks)
    with pytest.raises(TypeError, match="must declare `double_backprop"):
        needs_double_backprop(Undeclared())
