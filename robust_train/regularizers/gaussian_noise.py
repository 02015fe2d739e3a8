"""Gaussian-noise training: cross-entropy at x + N(0, sigma^2 I), clipped to the image range.

Data augmentation with isotropic Gaussian noise (the training of Cohen, Rosenfeld & Kolter 2019,
"Certified Adversarial Robustness via Randomized Smoothing", arXiv 1902.02918, without the
smoothing at test time): each training image is replaced by one noisy draw. A baseline for
explanation robustness that needs no gradient of the explanation and no inner attack: it costs one
forward and backward per step, as natural training does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.core.options import build_options, takes_options
from robust_train.core.validation import check_bool, check_non_negative
from robust_train.regularizers.base import PenaltyTerm, register_penalty

__all__ = ["GaussianNoiseOptions", "GaussianNoiseTraining", "gaussian_noise_loss", "noisy_copy"]


@dataclass(frozen=True)
class GaussianNoiseOptions:
    """The noise of Gaussian-noise training.

    Attributes:
        sigma: standard deviation of the noise, in pixel units (images in [0, 1]); 0 gives natural
            training.
        clip: clip the noisy image to [0, 1] (the image range the model sees at test time).
    """

    sigma: float = 0.25
    clip: bool = True

    def __post_init__(self) -> None:
        check_non_negative(self.sigma, "sigma")
        check_bool(self.clip, "clip")


def noisy_copy(
    inputs: Tensor, options: GaussianNoiseOptions, generator: torch.Generator | None = None
) -> Tensor:
    """`inputs + sigma * N(0, I)` (clipped to [0, 1] when `options.clip`), detached.

    The noise is drawn on the CPU with `generator` (reproducible on every device) and moved to
    the inputs' device and dtype.

    Examples:
        >>> x = torch.full((2, 1, 3, 3), 0.5)
        >>> out = noisy_copy(x, GaussianNoiseOptions(sigma=10.0), torch.Generator().manual_seed(0))
        >>> bool(((out == 0) | (out == 1)).all())  # sigma far above the range: every pixel clipped
        True
        >>> bool(torch.equal(noisy_copy(x, GaussianNoiseOptions(sigma=0.0)), x))
        True
    """
    x = inputs.detach()
    noise = torch.randn(x.shape, generator=generator, dtype=torch.float32)
    out = x + options.sigma * noise.to(device=x.device, dtype=x.dtype)
    return out.clamp(0.0, 1.0) if options.clip else out


@takes_options(GaussianNoiseOptions)
def gaussian_noise_loss(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    generator: torch.Generator | None = None,
    **options: Any,
) -> Tensor:
    """Per-sample cross-entropy at one Gaussian-noise draw of each image, shape (B,).

    Args:
        model: the classifier being trained.
        inputs: images (B, C, H, W) in [0, 1].
        target: labels (B,).
        generator: RNG of the noise (CPU generator).
        **options: `GaussianNoiseOptions` (sigma, clip).

    Returns:
        CE(model(clip(x + sigma * z)), y) per image, z ~ N(0, I); differentiable in the model's
        parameters only.

    Raises:
        ValueError: a negative `sigma`.

    Examples:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
        >>> x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 2, 0])
        >>> clean = F.cross_entropy(net(x), y, reduction="none")
        >>> bool(torch.allclose(gaussian_noise_loss(net, x, y, sigma=0.0), clean))
        True
    """
    opts = build_options(GaussianNoiseOptions, options, where="gaussian_noise_loss")
    return _noise_ce(model, inputs, target, opts, generator)


def _noise_ce(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    options: GaussianNoiseOptions,
    generator: torch.Generator | None,
) -> Tensor:
    return F.cross_entropy(model(noisy_copy(inputs, options, generator)), target, reduction="none")


@register_penalty("gaussian_noise")
@takes_options(GaussianNoiseOptions)
class GaussianNoiseTraining(PenaltyTerm):
    """CE at a Gaussian-noise copy of each image, replacing the natural CE (`replaces_task_loss`).

    Training on noisy copies (clipped to [0, 1]) is the plain data-augmentation baseline of
    robustness: it smooths the model around the data without any gradient of the explanation.

    Args:
        weight, name, seed: as every `PenaltyTerm` (`seed`: the noise generator's seed).
        **options: `GaussianNoiseOptions` (sigma 0.25, clip True).

    Raises:
        ValueError: a negative `sigma`; `every_n_steps` or `batch_fraction` other than 1 (the
            term replaces the task loss).

    Examples:
        >>> term = GaussianNoiseTraining(sigma=0.3, seed=0)
        >>> term.replaces_task_loss, term.options.sigma
        (True, 0.3)
        >>> GaussianNoiseTraining(sigma=-0.1)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `sigma` must be >= 0, got -0.1
    """

    replaces_task_loss = True
    double_backprop = False
    options_class = GaussianNoiseOptions

    def __init__(
        self, weight: float = 1.0, name: str | None = None, seed: int | None = None, **options: Any
    ) -> None:
        super().__init__(weight, name, seed, **options)

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        return _noise_ce(model, inputs, target, self.options, self.generator)
