"""Fragility attacks on explanations (Ghorbani, Abid & Zou, AAAI 2019, arXiv 1710.10547)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from robust_train.attacks import _loop
from robust_train.attacks._directions import Direction
from robust_train.attacks._setup import check_region, restart_seeds
from robust_train.attacks.objectives.base import FragilityObjective, get_objective
from robust_train.attacks.options import AttackGoal, AttackOptions
from robust_train.attacks.result import FragilityResult
from robust_train.core.options import build_options, split_options, takes_options
from robust_train.core.runtime import auto_chunk, eval_mode, require_grad_mode
from robust_train.core.validation import check_images, check_target
from robust_train.explain.registry import explainer_spec, resolve_explainer

__all__ = ["fragility_attack"]


@takes_options(AttackOptions)
@takes_options(AttackGoal)
def fragility_attack(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    generator: torch.Generator | None = None,
    seed: int | None = None,
    progress: bool = False,
    options: AttackOptions | None = None,
    **kwargs: Any,
) -> FragilityResult:
    """Move an explanation as far as possible with an imperceptible, label-keeping perturbation.

    Iterative L_inf sign steps (Ghorbani et al. 2019):
    `x_p = clip_[0,1](x_0 + clip_[-eps,eps](x_{p-1} + step_size * sign(d_p) - x_0))`, or with
    `norm="l2"` L2-normalised steps `x_{p-1} + step_size * d_p / ||d_p||_2` projected exactly onto
    `{||x - x_0||_2 <= eps}` intersected with [0, 1] (`robust_train.core.balls.project`), with
    d_p the gradient of the objective (a class registered in `robust_train.attacks.OBJECTIVES`),
    or random signs for an objective that needs no gradient. Where the gradient is taken is the
    attack's direction (`robust_train.attacks._directions`): on the model with a map's own final
    ReLU (Grad-CAM's) on its scale-free softplus surrogate (`smooth_map_clamps`, so that a map
    with fewer positive pixels than k can still be moved out of its clean top-k set); on the
    softplus surrogate of the model as well (`robust_train.models.softplus.smooth_relus`: every
    ReLU call, module or functional, computes softplus_beta), which the gradient family needs
    (`ExplainerSpec.piecewise_constant`: its map of a ReLU net is piecewise constant); or exactly.
    With `direction="all"` (the default) every candidate that can differ runs and each image
    keeps its worst result over them, since none is the strongest on every image. After every
    step the ORIGINAL model gives the label and the map; the best iterate whose predicted label
    equals the clean prediction is kept (never a label-changing one), else the clean input. The
    objective sets the schedule (`FragilityObjective.schedule`, `start_point`): by default
    restart 0 starts at x_0, later restarts at a uniform random point of the ball, each of
    `n_steps` steps, and the best over all directions and restarts is returned; "random_sign"
    draws `noise_draws` times x_0 + epsilon * random signs instead. Each restart draws from its
    own generator, seeded up front, so with a fixed `step_size` the first n iterates do not
    depend on `n_steps`: more steps can only improve the result. Samples are attacked together
    (no loop over samples); gradients are taken w.r.t. the input only, so parameter `.grad` is
    untouched; every module's train/eval flag is restored. Where the gradient direction of a
    sample is exactly zero (a flat point: a zero-baseline IG or DeepLIFT map, or an LRP map, of
    a thin digit has fewer than k non-zero pixels, so the clean top-k set holds all its mass)
    that sample takes a random sign step instead and follows the gradient from there. A sample
    whose gradient direction was exactly zero at every step of every direction (constant map,
    diverged model, piecewise-linear model without surrogate) is NOT reported as robust: its
    metrics are NaN, `measured` is False, and a warning names the cause.

    Args:
        model: classifier returning logits; run in eval mode during the attack.
        inputs: clean images (B, C, H, W) in [0, 1]; the budget is in these pixel units.
        target: (B,) class whose explanation is attacked (usually the predicted class). The label
            check compares predicted labels, clean vs attacked, whatever `target` is.
        explainer: name for `robust_train.explain.get_explainer`, or a callable
            `explainer(model, x, target, *, create_graph=False)`; it must be differentiable (with
            create_graph=True) for every objective except "random_sign". Bind a seed to a
            stochastic explainer (`get_explainer("smoothgrad", seed=0)`) so that its map is a
            function of the input and iterates are compared fairly.
        objective: a name in `OBJECTIVES`: "topk", "mass_center", "targeted", "random_sign",
            or one registered with `register_objective`.
        target_region: bool (B or 1, H, W) region to pull importance into; "targeted" only.
        generator, seed: randomness of restarts, random signs and the mass-center tie direction
            (exclusive); with neither, torch's global generator draws the per-restart seeds.
        progress: show a tqdm bar over restarts x steps (with the rate and the time left).
        options: an `AttackOptions` to start from (e.g. an `EvaluationSettings`); keywords
            given beside it override its fields.
        **kwargs: the fields of `AttackGoal` (explainer, objective, target_region: above) and
            the attack's settings, the fields of `AttackOptions` (epsilon, step_size, n_steps,
            k, measure_k, n_restarts, noise_draws, direction, surrogate_beta,
            internal_batch_size), defined and documented once there with their size-dependent
            defaults (epsilon 0.1 up to 28 px, else 8/255; k = H*W // 8; step epsilon / 8).

    Returns:
        FragilityResult (adversarial inputs, clean and attacked maps of the original model,
        label_kept, improved, measured, n_label_changes, top-k intersection, Spearman, Kendall,
        center shift).

    Examples:
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8), torch.nn.ReLU(),
        ...                             torch.nn.Linear(8, 3))
        >>> x = torch.rand(4, 1, 4, 4)
        >>> res = fragility_attack(model, x, model(x).argmax(1), epsilon=0.05, n_steps=5, k=4)
        >>> bool((res.adversarial - x).abs().max() <= 0.05 + 1e-6), res.topk_intersection.shape
        (True, torch.Size([4]))
    """
    given, settings = split_options(kwargs, AttackGoal)
    ctx = _context(
        model,
        inputs,
        target,
        goal=build_options(AttackGoal, given, where="fragility_attack"),
        generator=generator,
        seed=seed,
        progress=progress,
        options=build_options(AttackOptions, settings, where="fragility_attack", base=options),
    )
    with eval_mode(model), torch.enable_grad():
        state = _loop.start(ctx)
        runs: list[Direction | None] = [*state.directions] or [None]
        state.bar = _progress_bar(
            progress,
            len(runs) * len(ctx.seeds) * ctx.options.n_steps,
            f"{ctx.objective_cls.name} attack on {ctx.explainer_name} ({len(inputs)} images)",
        )
        for direction in runs:
            for restart, restart_seed in enumerate(ctx.seeds):
                _loop.run_restart(ctx, state, restart, restart_seed, direction)
        state.bar.close()
        return _loop.finish(ctx, state)


def _context(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    goal: AttackGoal,
    generator: torch.Generator | None,
    seed: int | None,
    progress: bool,
    options: AttackOptions,
) -> _loop.AttackContext:
    """Check every argument (naming it and its value) before any work; fill in the defaults."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"`model` must be a torch.nn.Module, got {type(model).__name__}")
    check_images(inputs, "inputs")
    batch, _, height, width = inputs.shape
    target = check_target(target, batch).to(inputs.device)
    objective_cls = get_objective(goal.objective)
    resolved = objective_cls.schedule(options.attack_options().resolved(height, width))
    region = _region(objective_cls, goal.target_region, batch, height, width, inputs.device)
    explain, name = resolve_explainer(goal.explainer, differentiable=objective_cls.needs_gradient)
    seeds = restart_seeds(generator, seed, resolved.n_restarts)
    require_grad_mode("fragility_attack")
    return _loop.AttackContext(
        model=model,
        inputs=inputs,
        target=target,
        explain=explain,
        explainer_name=name,
        objective_cls=objective_cls,
        options=resolved,
        region=region,
        seeds=seeds,
        piecewise_constant=explainer_spec(explain).piecewise_constant,
        chunk=resolved.internal_batch_size
        or auto_chunk(inputs.shape[1:], device=inputs.device, create_graph=True),
        progress=progress,
    )


def _region(
    objective_cls: type[FragilityObjective],
    region: Tensor | None,
    batch: int,
    height: int,
    width: int,
    device: torch.device,
) -> Tensor | None:
    name = objective_cls.name
    if not objective_cls.needs_region:
        if region is not None:
            raise ValueError(f"`target_region` is only used by objective='targeted', got {name!r}")
        return None
    if region is None:
        raise ValueError(f"objective={name!r} needs `target_region`, a bool (B or 1, H, W) mask")
    return check_region(region, batch, height, width).to(device)


def _progress_bar(enabled: bool, total: int, desc: str) -> Any:
    """A bar over restarts x steps, with the rate (steps/s) and the time left."""
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc=desc, unit="step", leave=False)
