"""Fragility attacks on explanations (Ghorbani, Abid & Zou, AAAI 2019, arXiv 1710.10547)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from robust_train._runtime import (
    auto_chunk,
    check_optional_positive,
    eval_mode,
    require_grad_mode,
)
from robust_train._validation import check_choice, check_images, check_positive, check_target
from robust_train.attacks import _loop
from robust_train.attacks._balls import NORMS
from robust_train.attacks._setup import check_k, check_region, restart_seeds
from robust_train.attacks.defaults import default_k
from robust_train.attacks.objectives import FragilityObjective, get_objective
from robust_train.attacks.result import FragilityResult
from robust_train.explain.protocol import Explainer
from robust_train.explain.registry import explainer_spec, resolve_explainer

__all__ = ["fragility_attack"]


def fragility_attack(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    explainer: str | Explainer = "saliency",
    objective: str = "topk",
    epsilon: float,
    norm: str = "linf",
    step_size: float | None = None,
    n_steps: int = 50,
    k: int | None = None,
    target_region: Tensor | None = None,
    n_restarts: int = 1,
    surrogate_beta: float | None = 10.0,
    measure_k: int | None = None,
    generator: torch.Generator | None = None,
    seed: int | None = None,
    progress: bool = False,
    internal_batch_size: int | None = None,
) -> FragilityResult:
    """Move an explanation as far as possible with an imperceptible, label-keeping perturbation.

    Iterative L_inf sign steps (Ghorbani et al. 2019):
    x_p = clip_[0,1](x_0 + clip_[-eps,eps](x_{p-1} + step_size * sign(d_p) - x_0)), or with
    `norm="l2"` L2-normalised steps x_{p-1} + step_size * d_p / ||d_p||_2 projected exactly onto
    {||x - x_0||_2 <= eps} intersected with [0, 1] (`robust_train.attacks._balls.project`), with
    d_p the gradient of the objective (a class registered in `robust_train.attacks.OBJECTIVES`)
    taken on the softplus surrogate of the model (`robust_train.models.softplus.smooth_relus`: every
    ReLU call, module or functional, computes softplus_beta) when the explainer's map of a ReLU
    net is piecewise constant (`ExplainerSpec.piecewise_constant`: the gradient family), or
    random signs. After every step the ORIGINAL model gives the label and the map; the best iterate
    whose predicted label equals the clean prediction is kept (never a label-changing one), else
    the clean input. Restart 0 starts at x_0, later restarts at a
    uniform random point of the ball; the best over all restarts is returned. Each restart draws
    from its own generator, seeded up front, so with a fixed `step_size` the first n iterates do
    not depend on `n_steps`: more steps can only improve the result. Samples are attacked
    together (no loop over samples); gradients are taken w.r.t. the input only, so parameter
    `.grad` is untouched; every module's train/eval flag is restored. A sample whose direction
    was exactly zero at every step (constant map, diverged model) is NOT reported as robust: its
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
        epsilon: L_inf budget (> 0), e.g. 8/255 for CIFAR-10, 0.1 for 8x8 digits; with
            `norm="l2"` the L2 radius in the same pixel units.
        norm: "linf" (default) or "l2": the ball of `epsilon`, the steps (sign or L2-normalised)
            and the random restart points (uniform in that ball) follow it.
        step_size: step per iteration; default `epsilon / 8` (independent of `n_steps`, so that
            more steps never hurt; the paper's ImageNet run used epsilon / 16 for 300 steps).
        n_steps: iterations per restart.
        k: size of the top-k set the "topk" objective empties; default
            `robust_train.attacks.defaults.default_k` (H*W // 8: 8 for 8x8 digits, 98 for 28x28).
            For ImageNet-size inputs the paper used k=1000; pass it explicitly.
        target_region: bool (B or 1, H, W) region to pull importance into; "targeted" only.
        n_restarts: number of runs, keeping the best.
        surrogate_beta: beta of the softplus surrogate that gives the direction of a piecewise-
            constant explainer (`ExplainerSpec.piecewise_constant`); None uses the model itself.
            An explainer that declares its map continuous in the input takes its direction on
            the model itself whatever this is.
        measure_k: k of the reported top-k intersection (and of the iterate ranking); default k.
        generator, seed: randomness of restarts, random signs and the mass-center tie direction
            (exclusive); with neither, torch's global generator draws the per-restart seeds.
        progress: show a tqdm bar over the steps.
        internal_batch_size: samples per gradient computation (memory of double backprop);
            None: chosen from the image size (`robust_train._runtime.auto_chunk` with
            create_graph: 41 for 28x28, 32 for 32x32, all of a batch of 8x8 digits).

    Returns:
        FragilityResult (adversarial inputs, clean and attacked maps of the original model,
        label_kept, improved, measured, n_label_changes, top-k intersection, Spearman, Kendall,
        center shift).

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8), torch.nn.ReLU(),
        ...                             torch.nn.Linear(8, 3))
        >>> x = torch.rand(4, 1, 4, 4)
        >>> res = fragility_attack(model, x, model(x).argmax(1), epsilon=0.05, n_steps=5, k=4)
        >>> bool((res.adversarial - x).abs().max() <= 0.05 + 1e-6), res.topk_intersection.shape
        (True, torch.Size([4]))
    """
    ctx = _context(
        model,
        inputs,
        target,
        explainer=explainer,
        objective=objective,
        epsilon=epsilon,
        norm=norm,
        step_size=step_size,
        n_steps=n_steps,
        k=k,
        target_region=target_region,
        n_restarts=n_restarts,
        surrogate_beta=surrogate_beta,
        measure_k=measure_k,
        generator=generator,
        seed=seed,
        progress=progress,
        internal_batch_size=internal_batch_size,
    )
    with eval_mode(model), torch.enable_grad():
        state = _loop.start(ctx)
        state.bar = _progress_bar(progress, len(ctx.seeds) * ctx.n_steps)
        for restart, restart_seed in enumerate(ctx.seeds):
            _loop.run_restart(ctx, state, restart, restart_seed)
        state.bar.close()
        return _loop.finish(ctx, state)


def _context(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    explainer: object,
    objective: str,
    epsilon: float,
    step_size: float | None,
    n_steps: int,
    k: int | None,
    target_region: Tensor | None,
    n_restarts: int,
    surrogate_beta: float | None,
    measure_k: int | None,
    generator: torch.Generator | None,
    seed: int | None,
    progress: bool,
    internal_batch_size: int | None,
    norm: str = "linf",
) -> _loop.AttackContext:
    """Check every argument (naming it and its value) before any work; fill in the defaults."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"`model` must be a torch.nn.Module, got {type(model).__name__}")
    check_images(inputs, "inputs")
    batch, _, height, width = inputs.shape
    target = check_target(target, batch).to(inputs.device)
    objective_cls = get_objective(objective)
    check_positive(epsilon, "epsilon")
    check_choice(norm, "norm", NORMS)
    check_optional_positive(step_size, "step_size")
    check_positive(n_steps, "n_steps", integer=True)
    check_positive(n_restarts, "n_restarts", integer=True)
    check_optional_positive(surrogate_beta, "surrogate_beta")
    check_optional_positive(internal_batch_size, "internal_batch_size", integer=True)
    k = check_k(default_k(height, width) if k is None else k, "k", height, width)
    measure_k = check_k(k if measure_k is None else measure_k, "measure_k", height, width)
    region = _region(objective_cls, target_region, batch, height, width, inputs.device)
    explain, name = resolve_explainer(explainer, differentiable=objective_cls.needs_gradient)
    spec = explainer_spec(explain)
    seeds = restart_seeds(generator, seed, n_restarts)
    require_grad_mode("fragility_attack")
    return _loop.AttackContext(
        model=model,
        inputs=inputs,
        target=target,
        explain=explain,
        explainer_name=name,
        objective_cls=objective_cls,
        epsilon=float(epsilon),
        norm=norm,
        step_size=float(epsilon) / 8 if step_size is None else float(step_size),
        n_steps=n_steps,
        k=k,
        measure_k=measure_k,
        region=region,
        seeds=seeds,
        surrogate_beta=surrogate_beta,
        piecewise_constant=spec.piecewise_constant,
        chunk=internal_batch_size
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


def _progress_bar(enabled: bool, total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc="fragility attack", leave=False)
