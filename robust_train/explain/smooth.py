"""SmoothGrad (Smilkov, Thorat, Kim, Viegas, Wattenberg, "SmoothGrad: removing noise by adding
noise", 2017): the average explanation over Gaussian-noised copies of the input.

Noise: all `B * n_samples` standard normal draws are made at once, image-major (rows
`b * n_samples + s`, Captum's layout), from `generator`, from a fresh generator seeded with
`seed`, or else from torch's global generator. Drawing them before chunking makes the result
independent of `internal_batch_size`. With `seed` the noise is fixed: the explanation is then a
deterministic, differentiable function of the input, which attacks and penalties need.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from robust_train.core.runtime import (
    auto_chunk,
    check_optional_positive,
    make_generator,
    require_grad_mode,
    row_chunks,
)
from robust_train.core.validation import check_choice, check_non_negative, check_positive
from robust_train.explain._random_draws import randn_like_rows
from robust_train.explain.autograd import prepare_inputs
from robust_train.explain.gradient import saliency
from robust_train.explain.registry import register_explainer

NOISE_SCALES = ("relative", "absolute")


@register_explainer(
    "smoothgrad",
    settings={"seed": "seed"},
)
def smoothgrad(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    explainer: Callable[..., Tensor] = saliency,
    n_samples: int = 16,
    noise_level: float = 0.1,
    noise_scale: str = "relative",
    generator: torch.Generator | None = None,
    seed: int | None = None,
    internal_batch_size: int | None = None,
    create_graph: bool = False,
    squared: bool = False,
) -> Tensor:
    """Average `explainer` over `n_samples` noisy copies `x + N(0, sigma^2)` of each image.

    With `noise_scale="relative"` (Smilkov et al. 2017) the standard deviation of image i is
    `sigma_i = noise_level * (max(x_i) - min(x_i))` (the paper recommends 10-20%); with
    "absolute" it is `noise_level` itself (Captum's `stdevs`). `squared=True` averages the
    squared explanations (SmoothGrad-squared, Captum's "smoothgrad_sq"). The noise is drawn
    before chunking (see the module docstring), so `internal_batch_size` does not change it.

    Args:
        model: classifier returning logits (B, num_classes); its train/eval mode is left as is.
        inputs: images (B, C, H, W).
        target: class indices (B,).
        explainer: any callable `explainer(model, x, target, *, create_graph)`.
        n_samples: noisy copies per image.
        noise_level: noise standard deviation, relative or absolute (see `noise_scale`); 0 gives
            the plain explanation.
        noise_scale: "relative" or "absolute".
        generator: random generator for the noise; exclusive with `seed`.
        seed: draw the noise from a fresh generator seeded with this at every call.
        internal_batch_size: at most this many noisy copies per explainer call; None: chosen
            from the image size (`robust_train.core.runtime.auto_chunk`).
        create_graph: keep the graph (passed to `explainer`); the result is then differentiable
            with respect to the inputs (through the noisy copies and sigma) and the parameters.
        squared: average the squared explanations instead.

    Returns:
        The averaged explanation, shaped like the explainer's output for `inputs`.

    Raises:
        RuntimeError: called under `torch.inference_mode()`.
        TypeError: `explainer` is not callable, or a count is not an int.
        ValueError: `n_samples` or `internal_batch_size` is not positive, `noise_level` is
            negative, `noise_scale` is not "relative" or "absolute", or both `generator` and
            `seed` are given.

    Examples:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
        >>> x, t = torch.rand(2, 1, 2, 2), torch.tensor([0, 2])
        >>> smooth = smoothgrad(model, x, t, n_samples=4, seed=0, internal_batch_size=3)
        >>> torch.allclose(smooth, saliency(model, x, t))  # a linear model has a constant gradient
        True
    """
    require_grad_mode("smoothgrad")
    if not callable(explainer):
        raise TypeError(
            f"`explainer` must be a callable explainer, got {explainer!r} (look one up by name "
            "with robust_train.explain.get_explainer)"
        )
    check_positive(n_samples, "n_samples", integer=True)
    check_non_negative(noise_level, "noise_level")
    check_choice(noise_scale, "noise_scale", NOISE_SCALES)
    check_optional_positive(internal_batch_size, "internal_batch_size", integer=True)
    with torch.enable_grad():
        x, target = prepare_inputs(inputs, target)
        if not create_graph:
            x = x.detach()
        sigma = _sigma(x, noise_level, noise_scale)
        gen = make_generator(generator, seed, x.device)
        noise = randn_like_rows((x.shape[0] * n_samples, *x.shape[1:]), gen, x)
        total = _sum_over_samples(
            model,
            x,
            target,
            explainer,
            sigma,
            noise,
            n_samples,
            internal_batch_size,
            create_graph=create_graph,
            squared=squared,
        )
    return total / n_samples


def _sigma(x: Tensor, noise_level: float, noise_scale: str) -> Tensor:
    """Per-image noise standard deviation (B,): relative to the value range, or absolute."""
    if noise_scale == "relative":
        return noise_level * (x.amax(dim=(1, 2, 3)) - x.amin(dim=(1, 2, 3)))
    return torch.full((x.shape[0],), float(noise_level), dtype=x.dtype, device=x.device)


def _sum_over_samples(
    model: nn.Module,
    x: Tensor,
    target: Tensor,
    explainer: Callable[..., Tensor],
    sigma: Tensor,
    noise: Tensor,
    n_samples: int,
    internal_batch_size: int | None,
    *,
    create_graph: bool,
    squared: bool,
) -> Tensor:
    """Sum of the explanations of the noisy copies of each image, in chunks of rows."""
    total: Tensor | None = None
    chunk = internal_batch_size or auto_chunk(
        x.shape[1:], device=x.device, create_graph=create_graph
    )
    for start, stop in row_chunks(x.shape[0] * n_samples, chunk):
        image = torch.arange(start, stop, device=x.device) // n_samples
        noisy = x[image] + sigma[image].view(-1, 1, 1, 1) * noise[start:stop]
        explanation = explainer(model, noisy, target[image], create_graph=create_graph)
        if not create_graph:
            explanation = explanation.detach()
        if squared:
            explanation = explanation * explanation
        if total is None:
            total = explanation.new_zeros((x.shape[0], *explanation.shape[1:]))
        total = total.index_add(0, image, explanation)
    assert total is not None  # n_samples >= 1 and the batch is not empty
    return total


__all__ = ["smoothgrad", "NOISE_SCALES"]
