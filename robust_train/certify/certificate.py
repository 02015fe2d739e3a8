"""`certify_explanations`: a certified lower bound on how much of a smoothed explanation's top-k
set survives any L2 perturbation of a given radius.

What is certified (Levine, Singla & Feizi 2019, arXiv 1905.12105; randomized smoothing of Cohen,
Rosenfeld & Kolter 2019 with the [0, 1]-valued lemma of Salman et al. 2019): the SMOOTHED
sparsified explainer p (`robust_train.certify.sampling`), not the raw map. With probability at
least 1 - alpha over the Monte Carlo noise, for every x' with ||x' - x||_2 <= r,

    |S cap top_k(p(x'))| >= certified_overlap(r) * k,

S being the reported top-k set at x (`reference`: the k most frequent pixels of the n noisy
copies) and p(x') the exact smoothed map at x' (explaining the same class). At r = 0 it says how
many of the reported pixels are truly top-k of the smoothed map at x. The statistics: one count
per pixel over n noisy copies, Clopper-Pearson intervals at level alpha / (H * W) each, so all
pixels of an image hold at once (`robust_train.certify.statistics`); the geometry is in
`robust_train.certify.bounds`. Each image's certificate holds with probability >= 1 - alpha on
its own (not jointly over the batch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.attacks.defaults import default_k
from robust_train.certify.bounds import overlap_radii, pixel_radii, reference_set
from robust_train.certify.sampling import check_sigma, sparsified_counts
from robust_train.certify.statistics import check_alpha, simultaneous_bounds
from robust_train.core.options import build_options, takes_options
from robust_train.core.runtime import check_optional_positive
from robust_train.core.validation import (
    check_images,
    check_non_negative,
    check_positive,
    check_target,
)
from robust_train.explain.protocol import Explainer
from robust_train.explain.registry import resolve_explainer

__all__ = [
    "RADIUS_GRID",
    "ExplanationCertificate",
    "SmoothingOptions",
    "certify_explanations",
    "check_radius",
]

RADIUS_GRID = tuple(i / 4 for i in range(11))  # default radii in units of sigma: 0, 0.25, ..., 2.5


@dataclass
class ExplanationCertificate:
    """A batch's certificates; per-image tensors first, then the settings.

    Attributes:
        reference: bool (B, H, W), the reported top-k set S of the smoothed map at x.
        probability: (B, H, W) Monte Carlo estimate p_hat = counts / n of the smoothed map.
        lower, upper: (B, H, W) float64 bounds of p(x) that hold for all pixels at once.
        overlap_radii: (B, k) non-increasing; certified overlap at r is #{R > r} / k.
        pixel_radius: (B, H, W) certified radius of each pixel of S (0 off S).
        radii: (R,) the radii of `certified_overlap`; certified_overlap: (B, R) in [0, 1].
        target: (B,) class explained; explain, explainer: the explainer and its name.
        sigma, n_samples, k, kappa, alpha: the settings.
    """

    reference: Tensor
    probability: Tensor
    lower: Tensor
    upper: Tensor
    overlap_radii: Tensor
    pixel_radius: Tensor
    radii: Tensor
    certified_overlap: Tensor
    target: Tensor
    explain: Explainer
    explainer: str
    sigma: float
    n_samples: int
    k: int
    kappa: int
    alpha: float

    def overlap_at(self, radius: float) -> Tensor:
        """Certified top-k overlap (B,) at one L2 radius (any radius, not only `radii`)."""
        check_radius(radius, math.prod(self.reference.shape[1:]))
        return (self.overlap_radii > radius).sum(1).double() / self.k

    def certified_radius(self, overlap: float) -> Tensor:
        """(B,) the radius up to which at least `overlap` of S (a fraction in (0, 1]) is
        certified: the certificate holds for every ||x' - x||_2 strictly below it."""
        if not isinstance(overlap, (int, float)) or not 0 < overlap <= 1:
            raise ValueError(f"`overlap` must be a fraction in (0, 1], got {overlap!r}")
        m = max(1, math.ceil(overlap * self.k - 1e-9))
        return self.overlap_radii[:, m - 1].clamp_min(0)


def check_radius(radius: object, dimension: int, name: str = "radius") -> float:
    """Raise unless an L2 radius is a finite number in [0, sqrt(d)], d the pixels per image
    (C * H * W: no two images in [0, 1]^d are further apart).

    Examples:
        >>> check_radius(0.5, 784)
        0.5
        >>> check_radius(30.0, 784)
        Traceback (most recent call last):
        ...
        ValueError: `radius` 30.0 exceeds sqrt(784) = 28, the L2 diameter of the images [0, 1]^784
    """
    check_non_negative(radius, name)
    if radius > math.sqrt(dimension) + 1e-9:  # type: ignore[operator]
        raise ValueError(
            f"`{name}` {radius!r} exceeds sqrt({dimension}) = {math.sqrt(dimension):.4g}, the L2 "
            f"diameter of the images [0, 1]^{dimension}"
        )
    return float(radius)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SmoothingOptions:
    """The smoothed explainer and its certificate's statistics: one option set for
    `certify_explanations`, `CertifySettings` (the command) and `CertifiedMonitor`.

    Attributes:
        explainer: any name of `robust_train.explain.EXPLAINERS` or an explainer callable.
        sigma: Gaussian noise standard deviation, in (0, 1].
        n_samples: noisy copies per image (the bound tightens as it grows).
        k: size of the certified top-k set; None: `default_k` (H*W // 8, 98 for 28x28).
        kappa: size of the top set of each noisy map (the sparsification); None: k.
        alpha: failure probability of each image's certificate, in (0, 1).
        seed: seed of the noise (None: the global RNG, or `generator`).
        internal_batch_size: noisy copies per explainer call (memory); None: `auto_chunk`.
    """

    explainer: str | Explainer = "saliency"
    sigma: float = 0.25
    n_samples: int = 1000
    k: int | None = None
    kappa: int | None = None
    alpha: float = 0.05
    seed: int | None = None
    internal_batch_size: int | None = None

    def __post_init__(self) -> None:
        resolve_explainer(self.explainer, differentiable=False)
        check_sigma(self.sigma)
        check_alpha(self.alpha)
        check_positive(self.n_samples, "n_samples", integer=True)
        check_optional_positive(self.k, "k", integer=True)
        check_optional_positive(self.kappa, "kappa", integer=True)
        if self.seed is not None:
            check_non_negative(self.seed, "seed", integer=True)
        check_optional_positive(self.internal_batch_size, "internal_batch_size", integer=True)


@takes_options(SmoothingOptions)
def certify_explanations(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    radii: Sequence[float] | None = None,
    generator: torch.Generator | None = None,
    progress: bool = False,
    options: SmoothingOptions | None = None,
    **kwargs: Any,
) -> ExplanationCertificate:
    """Certify the top-k set of the smoothed sparsified explainer of each image (module docstring).

    Args:
        model: classifier returning logits; run in eval mode (flags restored).
        inputs: images (B, C, H, W) in [0, 1]; radii and sigma are in these pixel units.
        target: (B,) class explained (usually the predicted one), the same at every x'.
        radii: L2 radii of `certified_overlap`; default `RADIUS_GRID` times sigma (0 to 2.5).
        generator: randomness of the noise (exclusive with the option `seed`).
        progress: tqdm bar over the samples.
        options, **kwargs: the `SmoothingOptions` (explainer, sigma, n_samples, k, kappa, alpha,
            seed, internal_batch_size); keywords override `options`.

    Examples:
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
        >>> x = torch.rand(2, 1, 4, 4)
        >>> cert = certify_explanations(net, x, net(x).argmax(1), k=4, n_samples=200, seed=0)
        >>> cert.certified_overlap.shape, cert.overlap_at(0.0).tolist()  # a linear model
        (torch.Size([2, 11]), [1.0, 1.0])
    """
    o = build_options(SmoothingOptions, kwargs, where="certify_explanations", base=options)
    check_images(inputs, "inputs")
    target = check_target(target, inputs.shape[0]).to(inputs.device)
    _, channels, height, width = inputs.shape
    explain, name = resolve_explainer(o.explainer, differentiable=False)
    k = _check_size(default_k(height, width) if o.k is None else o.k, "k", height * width)
    kappa = _check_size(k if o.kappa is None else o.kappa, "kappa", height * width)
    grid = _radii(radii, o.sigma, channels * height * width)
    counts = sparsified_counts(
        model,
        inputs,
        target,
        explain=explain,
        sigma=o.sigma,
        n_samples=o.n_samples,
        kappa=kappa,
        generator=generator,
        seed=o.seed,
        internal_batch_size=o.internal_batch_size,
        progress=progress,
        desc=f"certify {name}",
    )
    return certificate_from_counts(
        counts, o.n_samples, target, explain, name, o.sigma, k, kappa, o.alpha, grid
    )


def certificate_from_counts(
    counts: Tensor,
    n_samples: int,
    target: Tensor,
    explain: Explainer,
    name: str,
    sigma: float,
    k: int,
    kappa: int,
    alpha: float,
    radii: Tensor,
) -> ExplanationCertificate:
    """The certificate of counts (B, H, W) from `sparsified_counts` (checked settings)."""
    lower, upper = simultaneous_bounds(counts, n_samples, alpha)
    reference = reference_set(lower, k)
    radius_of = overlap_radii(lower, upper, reference, sigma)
    overlap = (radius_of.unsqueeze(1) > radii.to(radius_of).view(1, -1, 1)).sum(2).double() / k
    return ExplanationCertificate(
        reference=reference,
        probability=counts.double() / n_samples,
        lower=lower,
        upper=upper,
        overlap_radii=radius_of,
        pixel_radius=pixel_radii(lower, reference, radius_of),
        radii=radii,
        certified_overlap=overlap,
        target=target,
        explain=explain,
        explainer=name,
        sigma=sigma,
        n_samples=n_samples,
        k=k,
        kappa=kappa,
        alpha=alpha,
    )


def _check_size(value: object, name: str, pixels: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= pixels:
        raise ValueError(f"`{name}` must be an int in [1, H*W] = [1, {pixels}], got {value!r}")
    return value


def _radii(radii: Sequence[float] | None, sigma: float, dimension: int) -> Tensor:
    if radii is None:
        return torch.tensor([round(r * sigma, 12) for r in RADIUS_GRID], dtype=torch.float64)
    values = list(radii) if not isinstance(radii, (int, float)) else [radii]
    if not values:
        raise ValueError("`radii` is empty: give at least one L2 radius")
    checked = [check_radius(r, dimension, "radii") for r in values]
    return torch.tensor(checked, dtype=torch.float64)
