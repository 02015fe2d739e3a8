"""Shared pieces of the callback tests: cheap monitor settings and a small digits datamodule."""

from __future__ import annotations

import time

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.support.helpers import digits_tensors

# Cheap settings: every test fit stays around a second per epoch on 2 CPU cores.
CHEAP = dict(n_samples=8, n_images=2, max_overhead=None)
CHEAP_FRAGILITY = dict(CHEAP, n_steps=2)
CHEAP_LIPSCHITZ = dict(CHEAP, lipschitz_samples=2)
CHEAP_FIDELITY = dict(CHEAP, fidelity_steps=4)
TRAINER = dict(
    enable_progress_bar=False,
    enable_model_summary=False,
    limit_train_batches=4,
    limit_val_batches=1,
    num_sanity_val_steps=0,
    log_every_n_steps=1,
)


class DigitsData(pl.LightningDataModule):
    """8x8 digits: 512 train, 256 val, 256 test images (a stand-in for any user datamodule)."""

    def __init__(self, batch_size: int = 64) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        x, y = digits_tensors()
        self.train = TensorDataset(x[:512], y[:512])
        self.val = TensorDataset(x[1024:1280], y[1024:1280])
        self.test = TensorDataset(x[1280:1536], y[1280:1536])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test, batch_size=self.batch_size)


class SlowInEval(torch.nn.Module):
    """A model whose explainer calls (eval mode, gradients on) sleep per image (an evaluation at
    224 px in miniature), and whose training forwards sleep per batch (the fit's own time)."""

    def __init__(self, net: torch.nn.Module, per_image: float, per_batch: float) -> None:
        super().__init__()
        self.net, self.per_image, self.per_batch = net, per_image, per_batch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            time.sleep(self.per_batch)
        elif torch.is_grad_enabled():  # an explainer call, not a plain prediction
            time.sleep(self.per_image * x.shape[0])
        return self.net(x)
