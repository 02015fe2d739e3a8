"""Pieces shared by the penalties: per-sample CE gradients, random directions, distances."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.core.balls import NORMS as BALLS
from robust_train.core.balls import per_sample_norm, random_offset

DISTANCES = ("l1", "cosine", "l2")

__all__ = [
    "BALLS",
    "DISTANCES",
    "ce_input_gradient",
    "expand_like",
    "forward_logits",
    "map_distance",
    "per_sample_norm",
    "sample_in_ball",
]


def forward_logits(model: nn.Module, inputs: Tensor, logits: Tensor | None) -> Tensor:
    """Reuse the caller's clean forward when it is given (the task loss already ran it)."""
    return model(inputs) if logits is None else logits


def ce_input_gradient(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    logits: Tensor | None = None,
    create_graph: bool,
) -> tuple[Tensor, Tensor]:
    """Per-sample cross-entropy (B,) and its gradient with respect to `inputs` (which require grad).

    The graph of the shared forward is kept (retain_graph) so the task loss and other penalties
    can still backpropagate through it.
    """
    with torch.enable_grad():
        out = forward_logits(model, inputs, logits)
        ce = F.cross_entropy(out, target, reduction="none")
        (grad,) = torch.autograd.grad(
            ce.sum(), inputs, create_graph=create_graph, retain_graph=True
        )
    return ce, grad


def expand_like(v: Tensor, t: Tensor) -> Tensor:
    """(B,) -> (B, 1, 1, ...) for broadcasting against `t`."""
    return v.view(-1, *([1] * (t.dim() - 1)))


def sample_in_ball(
    inputs: Tensor,
    radius: float,
    n_samples: int,
    ball: str,
    generator: torch.Generator | None = None,
) -> Tensor:
    """`n_samples` uniform perturbations per input in an L_inf or L2 ball, shape (n*B, C, H, W).

    Sample-major order: rows [s*B:(s+1)*B] hold sample s of every input. The numbers are drawn
    on the CPU in float32 (the same points on every device), then moved to `inputs`. `ball` is
    one of `BALLS`, checked where the penalty's options are built (not at every step).
    """
    shape = (n_samples * inputs.shape[0], *inputs.shape[1:])
    return random_offset(
        shape, radius, ball, generator, device="cpu", dtype=torch.float32, like=inputs
    )


def map_distance(map_a: Tensor, map_b: Tensor, distance: str) -> Tensor:
    """Per-sample distance between importance maps (B, H, W).

    "l1": L1 between sum-normalised maps (in [0, 2]); "cosine": 1 - cosine similarity;
    "l2": L2 between max-normalised maps. `distance` is one of `DISTANCES`, checked where the
    penalty's options are built (not at every step).
    """
    a, b = map_a.flatten(1), map_b.flatten(1)
    if distance == "l1":
        a = a / a.sum(1, keepdim=True).clamp_min(1e-12)
        b = b / b.sum(1, keepdim=True).clamp_min(1e-12)
        return (a - b).abs().sum(1)
    if distance == "cosine":
        return 1 - F.cosine_similarity(a, b, dim=1, eps=1e-12)
    a = a / a.amax(1, keepdim=True).clamp_min(1e-12)
    b = b / b.amax(1, keepdim=True).clamp_min(1e-12)
    return (a - b).norm(dim=1)
