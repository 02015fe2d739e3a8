"""The first evaluation's cost, estimated before it runs: one timed attack step of one image.

A monitor under a cap (`max_overhead`) has no measured cost before its first evaluation. Rather
than run that evaluation on one image to time it (which alone can exceed the cap on a large
model), it times what one attack step costs (the map of one image with its graph, the gradient
of the map through it, and the plain map that ranks the new point) and multiplies it by the
evaluation's work per image (`robust_train.evaluation.engine.total_work`, counted in attack
steps of a one-pass map: plain maps, forwards and integrated gradients' points weighed by their
passes, `robust_train.evaluation.cost`). Where a model's cost is not in proportion to its passes
(a latency-bound model, whose every call costs about the same), a plain map costs more than its
share of a step; the probe then counts a step as the map's time over that share, so the estimate
errs on the side of the cap.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor, nn

from robust_train.core.runtime import eval_mode
from robust_train.evaluation.cost import MAP_PASSES, STEP_PASSES
from robust_train.explain import saliency

__all__ = ["step_seconds"]


def step_seconds(model: nn.Module, image: Tensor) -> float:
    """Wall seconds of one attack step on `image` (1, C, H, W): the saliency map of class 0 with
    its graph, the input gradient of the map's sum (double backpropagation), then the map again
    without a graph (the class does not change the cost); at least the last map's seconds times
    STEP_PASSES / MAP_PASSES. The model's train/eval flags are restored; no gradient is left on
    its parameters."""
    start = time.perf_counter()
    with eval_mode(model), torch.enable_grad():
        x = image.detach().clone().requires_grad_(True)
        target = torch.zeros(1, dtype=torch.long, device=x.device)
        grad = saliency(model, x, target, create_graph=True)
        (step,) = torch.autograd.grad(grad.abs().sum(), x, allow_unused=True)
        moved = x.detach() if step is None else (x.detach() + 1e-3 * step.sign()).clamp(0, 1)
        if image.device.type == "cuda":
            torch.cuda.synchronize(image.device)
        map_start = time.perf_counter()
        saliency(model, moved, target)
    if image.device.type == "cuda":
        torch.cuda.synchronize(image.device)
    end = time.perf_counter()
    return max(end - start, (end - map_start) * STEP_PASSES / MAP_PASSES)
