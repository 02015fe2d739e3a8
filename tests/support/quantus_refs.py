"""Quantus as a reference: its MPRT run on our explainers (the test skips without Quantus)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn


def quantus_mprt(
    model: nn.Module, x: Tensor, y: Tensor, explain: Callable[..., Tensor], *, last: bool
) -> dict[str, Any]:
    """Quantus's MPRT (cascading top-down, Spearman of the absolute maps, no normalisation,
    seed 7) of `explain` on `model`: with `last` only the fully randomised network's
    correlation (layers skipped), otherwise one correlation per layer, keyed by its name."""
    quantus = pytest.importorskip("quantus")
    from quantus.functions.similarity_func import correlation_spearman

    def explain_func(model, inputs, targets, **kwargs):
        return explain(model, torch.as_tensor(inputs), torch.as_tensor(targets)).detach().numpy()

    metric = quantus.MPRT(
        similarity_func=correlation_spearman, layer_order="top_down", seed=7,
        return_last_correlation=last, skip_layers=last, abs=True, normalise=False,
        disable_warnings=True,
    )  # fmt: skip
    return metric(
        model=model, x_batch=x.numpy(), y_batch=y.numpy(), a_batch=None,
        explain_func=explain_func, device="cpu",
    )  # fmt: skip
