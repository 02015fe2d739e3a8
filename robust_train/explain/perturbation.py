"""Meaningful perturbation (Fong & Vedaldi, "Interpretable Explanations of Black Boxes by
Meaningful Perturbation", ICCV 2017): a learned mask that deletes (or preserves) the evidence.

Deletion game (eq. 3): `min_m l1 ||1 - m||_1 + tv TV_beta(m) + p_c(m * x + (1 - m) * x_null)`,
with `p_c` the softmax probability of the target class; the importance is `1 - m`. Preservation
game: `min_m l1 ||m||_1 + tv TV_beta(m) - p_c(...)`; the importance is `m`. `x_null` is a blurred
copy of x ("blur"), a constant image ("constant": the per-channel mean colour of each image, or
`constant_value`), or `x` plus Gaussian noise of std `noise_std` ("noise").

As in the authors' code: Adam (lr 0.1, 300 steps), the mask at 1/8 of the input resolution
upsampled bilinearly, clipped to [0, 1] after each step, the perturbed image randomly shifted
(jitter) at each step. Choices made here for small images, so 8 x 8 digits work:
- the mask side is `round(side * mask_scale)` but at least `min_mask_size` (and at most the
  side): 224 px -> 28, 32 px -> 8, 8 px -> 8 (full resolution);
- `l1_coeff` and `tv_coeff` are the paper's values for a 28 x 28 mask. A smooth mask sampled on
  n x n cells has an L1 sum growing like n^2 and a TV_beta sum like n^(2 - beta), so for an
  h x w mask the sums are rescaled by 784 / (h w) and (sqrt(h w) / 28)^(beta - 2): the balance
  with the class score then does not depend on the mask resolution;
- the jitter is at most 1/8 of the smaller image side (1 pixel for 8 x 8 images);
- `blur_sigma` defaults to the paper's 10 px at 224 px, scaled to the image: max(1, side / 22.4);
- the mask starts at 0.5, where the class probability is less saturated than at 1.
One Adam runs over the whole batch of masks; the loss is a sum over images and Adam is
elementwise, so each image is optimised independently. The model runs in eval mode (BatchNorm
statistics are not updated by the 300 forwards); each submodule's mode is restored, its
parameters' `requires_grad` and `.grad` are not touched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from robust_train.core.runtime import eval_mode, make_generator, require_grad_mode
from robust_train.core.validation import (
    check_choice,
    check_images,
    check_non_negative,
    check_positive,
    check_probability,
    check_target,
)
from robust_train.explain._masks import gaussian_blur, mask_size, shift, total_variation, upsample
from robust_train.explain._random_draws import randint_pair, randn_like_rows
from robust_train.explain.autograd import target_scores
from robust_train.explain.registry import register_explainer

GAMES = ("deletion", "preservation")
PERTURBATIONS = ("blur", "constant", "noise")
#: The paper's coefficients are for a 28 x 28 mask (224 px input at 1/8); see the docstring.
_REFERENCE_CELLS = 28 * 28


class NotDifferentiableError(ValueError):
    """Raised when an explainer that is an optimisation (not a formula) is asked for a graph."""


@register_explainer(
    "meaningful_perturbation",
    differentiable=False,
    piecewise_constant=False,
    settings={"seed": "seed"},
)
def meaningful_perturbation(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    game: str = "deletion",
    perturbation: str = "blur",
    l1_coeff: float = 1e-4,
    tv_coeff: float = 1e-2,
    tv_beta: float = 3.0,
    n_iter: int = 300,
    lr: float = 0.1,
    mask_scale: float = 1 / 8,
    min_mask_size: int = 8,
    jitter: int = 4,
    blur_sigma: float | None = None,
    constant_value: float | None = None,
    noise_std: float = 0.2,
    generator: torch.Generator | None = None,
    seed: int | None = None,
    return_mask: bool = False,
    create_graph: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Learn a mask m in [0, 1] (1 = keep) per image; return the importance map (B, 1, H, W).

    The deletion or preservation game of Fong & Vedaldi (2017), solved with Adam as in the
    authors' code, with the resolution-independent choices listed in the module docstring.

    Args:
        model: classifier returning logits (B, num_classes).
        inputs: images (B, C, H, W).
        target: class indices (B,).
        game: "deletion" or "preservation".
        perturbation: "blur", "constant" or "noise".
        l1_coeff, tv_coeff, tv_beta: regularisation weights (for a 28 x 28 mask) and TV exponent.
        n_iter, lr: Adam iterations and learning rate.
        mask_scale, min_mask_size: mask resolution.
        jitter: maximum random shift in pixels (0 disables).
        blur_sigma, constant_value, noise_std: parameters of the perturbations.
        generator, seed: randomness of the jitter and the noise perturbation (exclusive).
        return_mask: also return the upsampled mask m (B, 1, H, W).
        create_graph: must be False: the map is the result of an optimisation and cannot be
            differentiated with respect to the input, so it cannot be an attack target or penalty.

    Returns:
        Importance (B, 1, H, W) in [0, 1], detached; with `return_mask`, (importance, mask).

    Raises:
        NotDifferentiableError: `create_graph=True` (the map cannot keep a graph).
        RuntimeError: called under `torch.inference_mode()`.
        TypeError, ValueError: `inputs`, `target` or an option is malformed; the message names
            the argument and the value.

    Examples:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 2))
        >>> imp = meaningful_perturbation(model, torch.rand(2, 1, 8, 8), torch.tensor([0, 1]),
        ...                               n_iter=5, seed=0)
        >>> imp.shape, bool(((imp >= 0) & (imp <= 1)).all())
        (torch.Size([2, 1, 8, 8]), True)
    """
    if create_graph:
        raise NotDifferentiableError(
            "meaningful_perturbation is not differentiable with respect to its input (its map is "
            "the result of an optimisation), so it cannot be an attack target or a training "
            "penalty; use it with create_graph=False (evaluation only)"
        )
    require_grad_mode("meaningful_perturbation")
    check_images(inputs, "inputs", check_range=False)
    target = check_target(target, inputs.shape[0]).to(inputs.device)
    game_ = _Game(game, l1_coeff, tv_coeff, tv_beta, lr, n_iter)
    _check_perturbation(
        perturbation, noise_std, mask_scale, min_mask_size, jitter, blur_sigma, constant_value
    )
    x = inputs.detach()
    gen = make_generator(generator, seed, x.device)
    x_null = _null_image(x, perturbation, blur_sigma, constant_value, noise_std, gen)
    mask_hw = mask_size(x.shape[2], x.shape[3], mask_scale, min_mask_size)
    max_shift = min(jitter, min(x.shape[2], x.shape[3]) // 8)
    with eval_mode(model), torch.enable_grad():
        mask = _optimise_mask(model, x, x_null, target, game_, mask_hw, max_shift, gen)
    final = upsample(mask, (x.shape[2], x.shape[3]))
    importance = 1 - final if game == "deletion" else final
    return (importance, final) if return_mask else importance


@dataclass
class _Game:
    """The checked objective and optimiser settings of one call."""

    name: str
    l1_coeff: float
    tv_coeff: float
    tv_beta: float
    lr: float
    n_iter: int

    def __post_init__(self) -> None:
        check_choice(self.name, "game", GAMES)
        check_non_negative(self.l1_coeff, "l1_coeff")
        check_non_negative(self.tv_coeff, "tv_coeff")
        check_positive(self.tv_beta, "tv_beta")
        check_positive(self.lr, "lr")
        check_positive(self.n_iter, "n_iter", integer=True)

    def loss(self, mask: Tensor, prob: Tensor, mask_cells: int) -> Tensor:
        """Per-image loss; the L1 and TV sums rescaled to a 28 x 28 mask (module docstring)."""
        area_scale = _REFERENCE_CELLS / mask_cells
        tv_scale = math.sqrt(area_scale) ** (2.0 - self.tv_beta)
        area = (1 - mask) if self.name == "deletion" else mask
        return (
            self.l1_coeff * area_scale * area.abs().flatten(1).sum(1)
            + self.tv_coeff * tv_scale * total_variation(mask, self.tv_beta)
            + (prob if self.name == "deletion" else -prob)
        )


def _check_perturbation(
    perturbation: str,
    noise_std: float,
    mask_scale: float,
    min_mask_size: int,
    jitter: int,
    blur_sigma: float | None,
    constant_value: float | None,
) -> None:
    check_choice(perturbation, "perturbation", PERTURBATIONS)
    check_non_negative(noise_std, "noise_std")
    check_positive(mask_scale, "mask_scale")
    if mask_scale > 1:
        raise ValueError(f"`mask_scale` must be in (0, 1], got {mask_scale!r}")
    check_positive(min_mask_size, "min_mask_size", integer=True)
    check_non_negative(jitter, "jitter", integer=True)
    if blur_sigma is not None:
        check_positive(blur_sigma, "blur_sigma")
    if constant_value is not None:
        check_probability(constant_value, "constant_value")


def _null_image(
    x: Tensor,
    perturbation: str,
    blur_sigma: float | None,
    constant_value: float | None,
    noise_std: float,
    gen: torch.Generator | None,
) -> Tensor:
    """The image that removed evidence is replaced with (blurred, constant, or noisy)."""
    if perturbation == "blur":
        sigma = blur_sigma if blur_sigma is not None else max(1.0, min(x.shape[2:]) / 22.4)
        return gaussian_blur(x, sigma)
    if perturbation == "constant":
        fill = (
            x.mean(dim=(2, 3), keepdim=True)
            if constant_value is None
            else torch.full_like(x[:, :, :1, :1], float(constant_value))
        )
        return fill.expand_as(x)
    return x + noise_std * randn_like_rows(tuple(x.shape), gen, x)


def _optimise_mask(
    model: nn.Module,
    x: Tensor,
    x_null: Tensor,
    target: Tensor,
    game: _Game,
    mask_hw: tuple[int, int],
    max_shift: int,
    gen: torch.Generator | None,
) -> Tensor:
    """Adam on a batch of low-resolution masks, clipped to [0, 1] after every step."""
    size = (x.shape[2], x.shape[3])
    mask = torch.full((x.shape[0], 1, *mask_hw), 0.5, dtype=x.dtype, device=x.device)
    mask.requires_grad_(True)
    optimizer = torch.optim.Adam([mask], lr=game.lr)
    for _ in range(game.n_iter):
        m = upsample(mask, size)
        perturbed = m * x + (1 - m) * x_null
        if max_shift > 0:
            dy, dx = randint_pair(2 * max_shift + 1, gen)
            perturbed = shift(perturbed, dy - max_shift, dx - max_shift)
        prob = target_scores(model(perturbed).softmax(dim=1), target)
        loss = game.loss(mask, prob, mask_hw[0] * mask_hw[1])
        (mask.grad,) = torch.autograd.grad(loss.sum(), mask)
        optimizer.step()
        with torch.no_grad():
            mask.clamp_(0.0, 1.0)
    return mask.detach()


__all__ = ["meaningful_perturbation", "NotDifferentiableError", "GAMES", "PERTURBATIONS"]
