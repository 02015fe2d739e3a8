"""Local Lipschitz estimate of an explainer: Alvarez-Melis & Jaakkola, "On the Robustness of
Interpretability Methods" (arXiv 1806.08049, 2018).

    L(x) = max_{x' in B_radius(x)} ||E(x) - E(x')|| / ||x - x'||_2

The maximum is estimated from below by random sampling of the ball or by projected gradient ascent
on the ratio; both spend `n_samples` explainer calls per image, so they compare at equal calls.
What is compared: the explainer output (B, C, H, W), flattened, unless `map="importance"` (then
the per-pixel importance `sum_c |E_c|`); `normalize_maps` rescales each flattened explanation
before the difference. The denominator is always ||x - x'||_2 (as in the paper).

Peers, and how to reproduce them:
- Quantus `LocalLipschitzEstimate` (defaults: 200 samples x' = x + N(0, 0.1^2), no clamping,
  explanations divided by their max absolute value, L2 norms on both sides) equals
  `sampling="gaussian", radius=0.1, clamp=False, normalize_maps="max"` up to its 1e-10 guard.
  Quantus normalises over the whole batch unless `normalise_func_kwargs={"normalise_axes":
  (1, 2, 3)}`; this function always normalises per image.
- Captum `sensitivity_max` (uniform L_inf samples of radius 0.02, no division by the distance)
  equals `divide_by_distance=False, clamp=False` divided by ||E(x)||_2 (Captum reports the change
  relative to the clean explanation's norm, and uses 1 when that norm is 0).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from robust_train.core.runtime import (
    auto_chunk,
    check_optional_positive,
    make_generator,
    require_grad_mode,
)
from robust_train.core.validation import (
    check_bool,
    check_choice,
    check_images,
    check_positive,
    check_target,
)
from robust_train.explain.registry import resolve_explainer
from robust_train.metrics.functional._lipschitz_parts import (
    MAP_NORMS,
    MAPS,
    NORMALIZATIONS,
    NORMS,
    SAMPLINGS,
    sample_perturbations,
)
from robust_train.metrics.functional._lipschitz_search import (
    Ball,
    Problem,
    gradient_search,
    random_search,
)

__all__ = ["local_lipschitz_estimate", "lipschitz_ratios", "sample_perturbations"]


def local_lipschitz_estimate(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    explainer: object,
    radius: float = 0.1,
    n_samples: int = 32,
    search: str = "random",
    norm: str = "linf",
    sampling: str = "uniform",
    normalize_maps: str = "none",
    divide_by_distance: bool = True,
    map: str = "explanation",
    map_norm: str = "l2",
    n_steps: int = 8,
    step_size: float | None = None,
    clamp: bool = True,
    internal_batch_size: int | None = None,
    generator: torch.Generator | None = None,
    seed: int | None = None,
) -> Tensor:
    """Per-image lower bound on the local Lipschitz constant of an explainer, shape (B,).

    What is compared, and how to match Quantus and Captum: see the module docstring.

    Args:
        model: classifier returning logits; its train/eval mode is left as is.
        inputs: images (B, C, H, W) in [0, 1].
        target: class indices (B,) that the explainer explains.
        explainer: callable `explainer(model, x, target, *, create_graph=False)` or a name for
            `robust_train.explain.get_explainer`.
        radius: radius of the ball (L_inf or L2, see `norm`); std of the "gaussian" samples.
        n_samples: explainer calls per image on perturbed inputs (the clean call is extra).
        search: "random" (max over samples) or "gradient": projected ascent on the ratio from
            `n_samples // n_steps` random starts, `n_steps` points each (the start and
            `n_steps - 1` ascent steps, each point one explainer call with double backprop);
            left-over calls are spent on random samples. The maximum over every visited point is
            returned. ReLU saliency has zero second derivative, so only the distance term moves.
        norm: "linf" or "l2": the ball that samples and ascent steps stay in.
        sampling: "uniform" in the ball, or "gaussian" N(0, radius^2) per value (not confined to
            the ball in random search, as Quantus; gradient search projects its starts).
        normalize_maps: "none", "max" (divide by max |E|, Quantus) or "sum" (by sum |E|).
        divide_by_distance: False returns max ||E(x) - E(x')|| (Captum sensitivity_max style).
        map: "explanation" or "importance" (see above).
        map_norm: "l2", "l1" or "linf" norm of the flattened explanation difference.
        n_steps: points per restart of gradient search.
        step_size: ascent step (sign step for L_inf, normalised-gradient step for L2);
            default 2.5 * radius / n_steps.
        clamp: clip perturbed images to [0, 1] (the distance uses the clipped image).
        internal_batch_size: most perturbed rows per explainer call (default: chosen from the
            image size, `robust_train.core.runtime.auto_chunk`: 83 for 28x28, 64 for 32x32).
        generator, seed: randomness (one of them, or neither for the global RNG).

    Returns:
        Tensor (B,), detached, non-negative.

    Raises:
        RuntimeError: called under `torch.inference_mode()`.
        TypeError: `inputs` or `target` is not a tensor of the right kind, or `explainer` is
            neither a name nor a callable.
        ValueError: malformed images or labels, an unknown explainer (or, for
            `search="gradient"`, one that cannot keep a graph), or a setting out of range; the
            message names the argument and the value.

    Examples:
        >>> from robust_train.explain import saliency
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
        >>> x = torch.rand(2, 1, 4, 4)
        >>> local_lipschitz_estimate(model, x, torch.tensor([0, 1]), explainer=saliency, seed=0)
        tensor([0., 0.])
    """
    check_images(inputs)
    target = check_target(target, inputs.shape[0]).to(inputs.device)
    _check_search(radius, n_samples, search, norm, sampling, n_steps, step_size)
    settings = _compare_settings(normalize_maps, map, map_norm, divide_by_distance)
    check_optional_positive(internal_batch_size, "internal_batch_size", integer=True)
    require_grad_mode("local_lipschitz_estimate")
    explain, _ = resolve_explainer(explainer, differentiable=search == "gradient")
    gen = make_generator(generator, seed, inputs.device)
    step = 2.5 * radius / n_steps if step_size is None else float(step_size)

    chunk = internal_batch_size or auto_chunk(inputs.shape[1:], device=inputs.device)
    problem = Problem(model, explain, inputs, target, settings, chunk)
    ball = Ball(float(radius), norm, sampling, clamp)
    n_restarts = n_samples // n_steps if search == "gradient" else 0
    best = random_search(problem, n_samples - n_restarts * n_steps, ball, gen)
    if n_restarts:
        best = torch.maximum(best, gradient_search(problem, n_restarts, n_steps, step, ball, gen))
    return best


def lipschitz_ratios(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    perturbed: Tensor,
    *,
    explainer: object,
    normalize_maps: str = "none",
    divide_by_distance: bool = True,
    map: str = "explanation",
    map_norm: str = "l2",
    internal_batch_size: int | None = None,
) -> Tensor:
    """The ratio ||E(x) - E(x')|| / ||x - x'||_2 for given perturbed inputs, shape (N, B).

    `perturbed` is (N, B, C, H, W), e.g. from `sample_perturbations`, or N dataset neighbours of
    each image for the paper's "discrete" variant. Settings as in `local_lipschitz_estimate`.

    Examples:
        >>> from robust_train.explain import input_x_gradient
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
        >>> x = torch.full((1, 1, 2, 2), 0.5)
        >>> xp = x.clone(); xp[0, 0, 0, 0] += 0.1
        >>> r = lipschitz_ratios(model, x, torch.tensor([0]), xp[None], explainer=input_x_gradient)
        >>> torch.allclose(r, model[1].weight[0, 0].abs())
        True
    """
    check_images(inputs)
    target = check_target(target, inputs.shape[0]).to(inputs.device)
    if (
        not isinstance(perturbed, Tensor)
        or perturbed.dim() != 5
        or perturbed.shape[1:] != inputs.shape
    ):
        shape = (
            tuple(perturbed.shape) if isinstance(perturbed, Tensor) else type(perturbed).__name__
        )
        raise ValueError(
            f"`perturbed` must have shape (N, *inputs.shape) with inputs.shape = "
            f"{tuple(inputs.shape)}, got {shape}"
        )
    check_images(perturbed.flatten(0, 1), "perturbed", check_range=False)
    settings = _compare_settings(normalize_maps, map, map_norm, divide_by_distance)
    check_optional_positive(internal_batch_size, "internal_batch_size", integer=True)
    require_grad_mode("lipschitz_ratios")
    explain, _ = resolve_explainer(explainer, differentiable=False)
    chunk = internal_batch_size or auto_chunk(inputs.shape[1:], device=inputs.device)
    problem = Problem(model, explain, inputs, target, settings, chunk)
    return problem.ratios(perturbed.flatten(0, 1)).view(perturbed.shape[0], inputs.shape[0])


def _check_search(
    radius: float,
    n_samples: int,
    search: str,
    norm: str,
    sampling: str,
    n_steps: int,
    step_size: float | None,
) -> None:
    check_positive(radius, "radius")
    check_positive(n_samples, "n_samples", integer=True)
    check_choice(search, "search", ("random", "gradient"))
    check_choice(norm, "norm", NORMS)
    check_choice(sampling, "sampling", SAMPLINGS)
    check_positive(n_steps, "n_steps", integer=True)
    check_optional_positive(step_size, "step_size")


def _compare_settings(normalize_maps: str, map: str, map_norm: str, divide: bool) -> dict:
    check_choice(normalize_maps, "normalize_maps", NORMALIZATIONS)
    check_choice(map, "map", MAPS)
    check_choice(map_norm, "map_norm", MAP_NORMS)
    check_bool(divide, "divide_by_distance")
    return {"normalize": normalize_maps, "map": map, "map_norm": map_norm, "divide": divide}
