"""Pieces of the local Lipschitz estimate: sampling the ball, comparing explanations, ascent steps.

Rows: the estimate lays out its perturbed inputs as rows of a virtual batch, sample-major
(row `s * B + b` is the s-th perturbation of image b), so that `inputs.repeat(k, 1, 1, 1)` and
`target.repeat(k)` give the clean counterparts of k consecutive samples.
"""

from __future__ import annotations

import torch
from torch import Tensor

from robust_train.core.balls import NORMS, project_offset, random_offset
from robust_train.core.runtime import generator_device, make_generator
from robust_train.core.validation import check_choice, check_images, check_positive
from robust_train.explain.maps import importance_map

SAMPLINGS = ("uniform", "gaussian")
MAP_NORMS = ("l2", "l1", "linf")
NORMALIZATIONS = ("none", "max", "sum")
MAPS = ("explanation", "importance")
_TINY = 1e-12

__all__ = ["sample_perturbations", "draw_offsets", "project", "explanation_vectors", "ratio"]


def draw_offsets(
    inputs: Tensor, radius: float, norm: str, sampling: str, generator: torch.Generator | None
) -> Tensor:
    """One random offset per image, shape like `inputs`.

    "uniform" draws uniformly from the ball of `norm` (L_inf: each value in [-radius, radius];
    L2: a uniform direction times radius * U^(1/d)); "gaussian" draws N(0, radius^2) per value and
    is not confined to the ball (as Quantus' LocalLipschitzEstimate).
    """
    device = generator_device(generator, inputs.device)
    dtype = inputs.dtype
    if sampling == "gaussian":
        delta = radius * torch.randn(inputs.shape, generator=generator, device=device, dtype=dtype)
    else:
        delta = random_offset(inputs.shape, radius, norm, generator, device=device, dtype=dtype)
    return delta.to(inputs.device)


def project(clean: Tensor, perturbed: Tensor, radius: float, norm: str, clamp: bool) -> Tensor:
    """Project `perturbed` onto the `norm` ball of `radius` around `clean` (then onto [0, 1])."""
    out = clean + project_offset(perturbed - clean, radius, norm)
    return out.clamp(0.0, 1.0) if clamp else out


def sample_perturbations(
    inputs: Tensor,
    n_samples: int,
    *,
    radius: float = 0.1,
    norm: str = "linf",
    sampling: str = "uniform",
    clamp: bool = True,
    generator: torch.Generator | None = None,
    seed: int | None = None,
) -> Tensor:
    """The perturbed inputs that random search evaluates, shape (n_samples, B, C, H, W).

    With the same `generator` state (or `seed`) and settings, `local_lipschitz_estimate(...,
    search="random")` draws exactly these points, in this order, whatever its
    `internal_batch_size`; a peer (Quantus, Captum) can therefore be fed the same points.

    Examples:
        >>> x = torch.full((2, 1, 4, 4), 0.5)
        >>> p = sample_perturbations(x, 3, radius=0.1, seed=0)
        >>> p.shape, bool(((p - x).abs() <= 0.1).all())
        (torch.Size([3, 2, 1, 4, 4]), True)
    """
    check_images(inputs)
    check_positive(n_samples, "n_samples", integer=True)
    check_positive(radius, "radius")
    check_choice(norm, "norm", NORMS)
    check_choice(sampling, "sampling", SAMPLINGS)
    gen = make_generator(generator, seed, inputs.device)
    points = []
    for _ in range(n_samples):
        point = inputs + draw_offsets(inputs, radius, norm, sampling, gen)
        points.append(point.clamp(0.0, 1.0) if clamp else point)
    return torch.stack(points)


def explanation_vectors(explanation: Tensor, map: str, normalize: str) -> Tensor:
    """Flatten what is compared: the raw explanation (B, C*H*W) or its importance map (B, H*W).

    "max" divides each vector by its largest absolute value (Quantus' normalise_by_max, per
    sample), "sum" by the sum of absolute values; an all-zero vector is left as it is.
    """
    vectors = (importance_map(explanation) if map == "importance" else explanation).flatten(1)
    if normalize == "none":
        return vectors
    scale = vectors.abs().amax(1) if normalize == "max" else vectors.abs().sum(1)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return vectors / scale[:, None]


def ratio(
    clean_vectors: Tensor,
    vectors: Tensor,
    clean: Tensor,
    perturbed: Tensor,
    *,
    map_norm: str,
    divide_by_distance: bool,
) -> Tensor:
    """||v(x) - v(x')||_map_norm / ||x - x'||_2 per row; 0 where x' equals x."""
    order = {"l2": 2.0, "l1": 1.0, "linf": float("inf")}[map_norm]
    numerator = torch.linalg.vector_norm(vectors - clean_vectors, ord=order, dim=1)
    if not divide_by_distance:
        return numerator
    distance = (perturbed - clean).flatten(1).norm(dim=1)
    return torch.where(
        distance > 0, numerator / distance.clamp_min(_TINY), torch.zeros_like(distance)
    )
