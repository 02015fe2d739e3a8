"""The smoothed sparsified explainer, by Monte Carlo: how often each pixel is in the top-kappa set
of the explainer's map of a Gaussian-noised copy of the image.

For an explainer E, a target class t and an image x, the base function is the sparsified map

    h(y)_i = 1[pixel i is among the kappa largest of importance_map(E(model, y, t))]   in {0, 1},

and the smoothed explainer is its Gaussian smoothing p(x)_i = P_{delta ~ N(0, sigma^2 I)}[h(x +
delta)_i = 1] (the "sparsified SmoothGrad" of Levine, Singla & Feizi 2019, arXiv 1905.12105,
for any explainer of `robust_train.explain`, as Anani et al. 2025 do for any attribution method).
Every p_i lies in [0, 1], which is what the certificate needs (`robust_train.certify.bounds`).
Any deterministic tie rule makes h a function of y (ties go to the lower pixel index,
`topk_mask`); a stochastic explainer is fine too when its randomness is independent of delta
(then h is replaced by its average over that randomness, still a [0, 1]-valued function).

Noise: drawn chunk by chunk (never all B * n copies at once), rows sample-major (row r is image
r % B, sample r // B) from `generator`, a fresh generator from `seed`, or torch's global one. The
same seed and `internal_batch_size` give the same counts.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from robust_train.core.runtime import (
    auto_chunk,
    check_optional_positive,
    eval_mode,
    generator_device,
    make_generator,
    require_grad_mode,
    row_chunks,
)
from robust_train.core.validation import check_images, check_positive, check_target
from robust_train.explain.maps import importance_map
from robust_train.explain.protocol import Explainer
from robust_train.explain.similarity import topk_mask

__all__ = ["check_sigma", "sparsified_counts"]


def check_sigma(sigma: object, name: str = "sigma") -> float:
    """Raise unless the noise level is a number in (0, 1] (pixel units of images in [0, 1]).

    Noise of a standard deviation above the whole pixel range turns every noisy copy into noise:
    the smoothed map would describe the model on noise, not on the image.

    Examples:
        >>> check_sigma(0.25)
        0.25
        >>> check_sigma(0)
        Traceback (most recent call last):
        ...
        ValueError: `sigma` must be > 0, got 0
    """
    check_positive(sigma, name)
    if sigma > 1:  # type: ignore[operator]
        raise ValueError(
            f"`{name}` must be <= 1 (a noise standard deviation in the pixel units of images in "
            f"[0, 1]; above it every noisy copy is mostly noise), got {sigma!r}"
        )
    return float(sigma)  # type: ignore[arg-type]


def sparsified_counts(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    explain: Explainer,
    sigma: float,
    n_samples: int,
    kappa: int,
    generator: torch.Generator | None = None,
    seed: int | None = None,
    internal_batch_size: int | None = None,
    progress: bool = False,
    desc: str = "smoothing",
) -> Tensor:
    """How many of `n_samples` noisy copies put each pixel in the top-`kappa` set, (B, H, W).

    The model runs in eval mode (every submodule's flag restored after); the explainer is called
    without a graph on chunks of noisy copies.

    Args:
        model: classifier returning logits.
        inputs: images (B, C, H, W) in [0, 1].
        target: (B,) class explained at every noisy copy of its image.
        explain: a resolved explainer callable (`resolve_explainer`).
        sigma: noise standard deviation in pixel units, in (0, 1].
        n_samples: noisy copies per image.
        kappa: size of the top set of each noisy map, in [1, H*W].
        generator, seed: randomness of the noise (exclusive).
        internal_batch_size: noisy copies per explainer call; None: `auto_chunk` of the image.
        progress: show a tqdm bar over the samples.
        desc: the bar's label.

    Examples:
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
        >>> from robust_train.explain import saliency
        >>> c = sparsified_counts(net, torch.rand(2, 1, 4, 4), torch.tensor([0, 1]),
        ...                       explain=saliency, sigma=0.1, n_samples=5, kappa=3, seed=0)
        >>> c.shape, c.sum(dim=(1, 2)).tolist()  # a linear model: the same 3 pixels every time
        (torch.Size([2, 4, 4]), [15, 15])
    """
    check_images(inputs, "inputs")
    target = check_target(target, inputs.shape[0]).to(inputs.device)
    check_sigma(sigma)
    check_positive(n_samples, "n_samples", integer=True)
    check_positive(kappa, "kappa", integer=True)
    check_optional_positive(internal_batch_size, "internal_batch_size", integer=True)
    require_grad_mode("sparsified_counts")
    gen = make_generator(generator, seed, inputs.device)
    batch = inputs.shape[0]
    chunk = internal_batch_size or auto_chunk(inputs.shape[1:], device=inputs.device)
    counts: Tensor | None = None
    bar = _bar(progress, n_samples, desc)
    with eval_mode(model), torch.enable_grad():
        for start, stop in row_chunks(batch * n_samples, chunk):
            image = torch.arange(start, stop, device=inputs.device) % batch
            noise = torch.randn(
                (stop - start, *inputs.shape[1:]),
                generator=gen,
                device=generator_device(gen, inputs.device),
                dtype=inputs.dtype,
            ).to(inputs.device)
            noisy = inputs[image] + sigma * noise
            maps = importance_map(explain(model, noisy, target[image], create_graph=False))
            maps = torch.nan_to_num(maps.detach(), nan=0.0, posinf=0.0, neginf=0.0)
            _check_kappa(kappa, maps)
            hits = topk_mask(maps, kappa).long()
            if counts is None:
                counts = hits.new_zeros((batch, *hits.shape[1:]))
            counts.index_add_(0, image, hits)
            bar.update(stop // batch - start // batch)
    bar.close()
    assert counts is not None  # the batch and n_samples are >= 1
    return counts


def _check_kappa(kappa: int, maps: Tensor) -> None:
    pixels = maps.shape[1] * maps.shape[2]
    if kappa > pixels:
        raise ValueError(
            f"`kappa` must be an int in [1, H*W] = [1, {pixels}] for maps of size "
            f"{maps.shape[1]}x{maps.shape[2]}, got {kappa!r}"
        )


def _bar(enabled: bool, total: int, desc: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc=desc, unit="sample", leave=False)
