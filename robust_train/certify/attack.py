"""The other side of the certificate: how far an attack moves the SAME smoothed explainer.

The smoothed sparsified map (`robust_train.certify.sampling`) is a Monte Carlo of indicators, with
no gradient. The attack therefore takes its direction from a differentiable stand-in with fixed
noise, `SoftSmoothedExplainer`: the mean over `n_samples` fixed (seeded) noise draws delta_s of
sigmoid((m_s - t_s) / (temperature * std(m_s))), m_s the explainer's importance map of x + delta_s
and t_s the midpoint between its kappa-th and (kappa+1)-th largest values (a soft top-kappa
indicator, SmoothGrad-style: `robust_train.certify.soft`). `fragility_attack(norm="l2")` ascends
the top-k objective on it (through the softplus surrogate of a ReLU model, as for any gradient
explainer) within ||x' - x||_2 <= radius. The attack's result x' is then measured like the
certificate: `measure_overlap` draws fresh noise at x', the overlap of the certificate's reference
set S with the top-k of the Monte Carlo smoothed map at x' is the point estimate, and the
simultaneous bounds at x' give an upper confidence bound of the true overlap there
(`box_overlap`). `random_search` measures random points of the sphere of the same radius.

So for each image: certified_overlap(r) <= true worst overlap in the ball <= overlap at the
attack's x' (estimated; its upper bound holds with probability 1 - alpha).

A smoothed map that does not depend on the input at all (the saliency of a linear model is its
weight row, whatever x) gives the attack nothing to follow: `attack_certificate` then measures
x itself (a point of the ball, where the overlap is that of every other point) and says so in
`EmpiricalOverlap.note`, rather than failing; its certificate is exact there (overlap 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.attacks import FragilityResult, fragility_attack
from robust_train.certify.bounds import box_overlap
from robust_train.certify.certificate import ExplanationCertificate, check_radius
from robust_train.certify.sampling import sparsified_counts
from robust_train.certify.soft import SoftSmoothedExplainer
from robust_train.certify.statistics import simultaneous_bounds
from robust_train.core.balls import random_on_sphere
from robust_train.core.options import build_options, check_options, option, takes_options
from robust_train.core.runtime import auto_chunk, check_optional_positive, eval_mode, predict
from robust_train.core.validation import (
    check_images,
    check_non_negative,
    check_positive,
    check_same_shape,
)
from robust_train.explain.similarity import topk_mask

__all__ = [
    "BallSearchOptions",
    "EmpiricalOverlap",
    "attack_certificate",
    "measure_overlap",
    "random_search",
]


@dataclass
class EmpiricalOverlap:
    """Overlap of the certificate's reference set with the smoothed map's top-k at points x'.

    Attributes:
        points: (B, C, H, W) the points x'; distance: (B,) ||x' - x||_2.
        overlap: (B,) Monte Carlo estimate |S cap top_k(p_hat(x'))| / k.
        overlap_lower, overlap_upper: (B,) the smallest and largest overlap over the simultaneous
            bounds at x' (the upper one is an upper confidence bound of the true overlap).
        label_kept: (B,) the model's label at x' equals its label at x.
        radius: the L2 budget; attack: the `FragilityResult` of the attack (None for random,
            and where the attack had no direction).
        note: why the points are not an attack's result (None when they are): the smoothed
            map does not depend on the input, so x itself was measured.
    """

    points: Tensor
    distance: Tensor
    overlap: Tensor
    overlap_lower: Tensor
    overlap_upper: Tensor
    label_kept: Tensor
    radius: float
    attack: FragilityResult | None = None
    note: str | None = None


@dataclass(frozen=True)
class BallSearchOptions:
    """What both searches of the ball around each image (`attack_certificate`,
    `random_search`) take: the ball and how its points are measured (`measure_overlap`).

    Attributes:
        radius: the L2 radius of the ball (pixel units; at most sqrt(C * H * W), checked against
            the images).
        measure_samples: noisy copies per image that measure a point (None: the certificate's).
        seed: seed of the search and, plus one, of the measurement's noise.
        internal_batch_size: noisy copies per explainer call (memory); None: `auto_chunk`.
    """

    radius: float = option(check=check_non_negative)
    measure_samples: int | None = option(None, check=partial(check_optional_positive, integer=True))
    seed: int = option(0, check=partial(check_non_negative, integer=True))
    internal_batch_size: int | None = option(
        None, check=partial(check_optional_positive, integer=True)
    )

    def __post_init__(self) -> None:
        check_options(self)


NO_DIRECTION = (
    "the smoothed map does not depend on the input (its gradient w.r.t. x does not exist, e.g. "
    "the saliency of a linear model): no attack can move it, so x itself was measured"
)


def measure_overlap(
    model: nn.Module,
    inputs: Tensor,
    points: Tensor,
    certificate: ExplanationCertificate,
    *,
    n_samples: int | None = None,
    seed: int | None = 1,
    internal_batch_size: int | None = None,
    radius: float = 0.0,
) -> EmpiricalOverlap:
    """Measure the smoothed map at `points` against the certificate of `inputs` (fresh noise;
    `n_samples` defaults to the certificate's)."""
    check_images(points, "points")
    _check_certificate(certificate, inputs)
    check_same_shape(points, inputs, "points", "inputs")
    check_optional_positive(n_samples, "measure_samples", integer=True)
    n = certificate.n_samples if n_samples is None else n_samples
    counts = sparsified_counts(
        model,
        points,
        certificate.target,
        explain=certificate.explain,
        sigma=certificate.sigma,
        n_samples=n,
        kappa=certificate.kappa,
        seed=seed,
        internal_batch_size=internal_batch_size,
    )
    ref, k = certificate.reference, certificate.k
    estimate = (topk_mask(counts.double(), k) & ref).flatten(1).sum(1).double() / k
    lower, upper = simultaneous_bounds(counts, n, certificate.alpha)
    low, high = box_overlap(lower, upper, ref, k)
    with eval_mode(model), torch.no_grad():
        kept = predict(model, points, internal_batch_size) == predict(model, inputs)
    return EmpiricalOverlap(
        points=points,
        distance=(points - inputs).flatten(1).norm(dim=1),
        overlap=estimate,
        overlap_lower=low,
        overlap_upper=high,
        label_kept=kept,
        radius=radius,
    )


@takes_options(BallSearchOptions)
def attack_certificate(
    model: nn.Module,
    inputs: Tensor,
    certificate: ExplanationCertificate,
    *,
    n_steps: int = 20,
    n_restarts: int = 1,
    step_size: float | None = None,
    attack_samples: int = 16,
    temperature: float = 0.3,
    surrogate_beta: float | None = 10.0,
    progress: bool = False,
    **search: Any,
) -> EmpiricalOverlap:
    """The project's L2 fragility attack (top-k objective) on `SoftSmoothedExplainer`, measured
    at its result by `measure_overlap` (module docstring). `step_size` defaults to radius / 8;
    `search` takes the fields of `BallSearchOptions` (radius, required; measure_samples, seed,
    internal_batch_size).

    Examples:
        >>> from robust_train.certify import certify_explanations
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8), torch.nn.ReLU(),
        ...                           torch.nn.Linear(8, 3))
        >>> x = torch.rand(2, 1, 4, 4)
        >>> cert = certify_explanations(net, x, net(x).argmax(1), k=4, n_samples=100, seed=0)
        >>> res = attack_certificate(net, x, cert, radius=0.2, n_steps=2, attack_samples=2)
        >>> bool((res.distance <= 0.2 + 1e-5).all()), res.overlap.shape
        (True, torch.Size([2]))
    """
    o = build_options(BallSearchOptions, search, where="attack_certificate")
    radius = _check_search(inputs, certificate, o)
    seed, internal_batch_size = o.seed, o.internal_batch_size
    check_positive(radius, "radius")
    soft = SoftSmoothedExplainer(
        certificate.explain,
        sigma=certificate.sigma,
        n_samples=attack_samples,
        kappa=certificate.kappa,
        temperature=temperature,
        seed=seed,
    )
    rows = internal_batch_size or max(
        1, auto_chunk(inputs.shape[1:], device=inputs.device, create_graph=True) // attack_samples
    )
    measure = dict(n_samples=o.measure_samples, internal_batch_size=internal_batch_size)
    if not _depends_on_input(model, inputs[:rows], certificate.target[:rows], soft):
        found = measure_overlap(
            model, inputs, inputs, certificate, seed=seed + 1, radius=radius, **measure
        )
        found.note = NO_DIRECTION
        return found
    result = fragility_attack(
        model,
        inputs,
        certificate.target,
        explainer=soft,
        objective="topk",
        epsilon=radius,
        norm="l2",
        step_size=step_size,
        n_steps=n_steps,
        n_restarts=n_restarts,
        k=certificate.k,
        surrogate_beta=surrogate_beta,
        seed=seed,
        progress=progress,
        internal_batch_size=rows,
    )
    measured = measure_overlap(
        model, inputs, result.adversarial, certificate, seed=seed + 1, radius=radius, **measure
    )
    measured.attack = result
    return measured


def _depends_on_input(
    model: nn.Module, inputs: Tensor, target: Tensor, soft: SoftSmoothedExplainer
) -> bool:
    """Whether the stand-in's map of these images has a graph to the input: False when it has
    a graph (through the parameters) that never reaches x, as the saliency of a linear model.
    A map without any graph (a detaching explainer) is left to the attack, which names it."""
    with eval_mode(model), torch.enable_grad():
        x = inputs.detach().requires_grad_(True)
        value = soft(model, x, target, create_graph=True).sum()
        if not value.requires_grad:
            return True
        (grad,) = torch.autograd.grad(value, x, allow_unused=True)
    return grad is not None


@takes_options(BallSearchOptions)
def random_search(
    model: nn.Module,
    inputs: Tensor,
    certificate: ExplanationCertificate,
    *,
    n_points: int = 4,
    **search: Any,
) -> EmpiricalOverlap:
    """The lowest measured overlap over `n_points` random points of the L2 sphere of `radius`
    around each image (clamped to [0, 1], which keeps them in the ball); `search` takes the
    fields of `BallSearchOptions` (radius, required; measure_samples, seed,
    internal_batch_size)."""
    o = build_options(BallSearchOptions, search, where="random_search")
    radius, seed = _check_search(inputs, certificate, o), o.seed
    check_positive(n_points, "n_points", integer=True)
    gen = torch.Generator().manual_seed(seed)
    best: EmpiricalOverlap | None = None
    for point in range(n_points):
        d = random_on_sphere(inputs.shape, radius, gen, dtype=inputs.dtype, like=inputs)
        found = measure_overlap(
            model,
            inputs,
            (inputs + d).clamp(0, 1),
            certificate,
            n_samples=o.measure_samples,
            seed=seed + 1 + point,
            internal_batch_size=o.internal_batch_size,
            radius=radius,
        )
        best = found if best is None else _lower_of(best, found)
    assert best is not None
    return best


def _check_search(
    inputs: Tensor, certificate: ExplanationCertificate, options: BallSearchOptions
) -> float:
    """The checks both searches of the ball (the attack, the random points) make before any work
    beside their options' own; the radius, checked against the images."""
    check_images(inputs, "inputs")
    _check_certificate(certificate, inputs)
    return check_radius(options.radius, inputs[0].numel())


def _check_certificate(certificate: object, inputs: Tensor) -> None:
    if not isinstance(certificate, ExplanationCertificate):
        raise TypeError(
            "`certificate` must be an ExplanationCertificate (from certify_explanations), got "
            f"{type(certificate).__name__}"
        )
    if certificate.reference.shape[0] != inputs.shape[0]:
        raise ValueError(
            f"`certificate` covers {certificate.reference.shape[0]} images but `inputs` has "
            f"{inputs.shape[0]}: pass the images that were certified"
        )


def _lower_of(a: EmpiricalOverlap, b: EmpiricalOverlap) -> EmpiricalOverlap:
    take = b.overlap < a.overlap
    pick = lambda u, v: torch.where(take.view(-1, *([1] * (u.dim() - 1))), v, u)  # noqa: E731
    return EmpiricalOverlap(
        points=pick(a.points, b.points),
        distance=pick(a.distance, b.distance),
        overlap=pick(a.overlap, b.overlap),
        overlap_lower=pick(a.overlap_lower, b.overlap_lower),
        overlap_upper=pick(a.overlap_upper, b.overlap_upper),
        label_kept=pick(a.label_kept, b.label_kept),
        radius=a.radius,
    )
