"""Fragility attacks on explanations (Ghorbani, Abid & Zou, AAAI 2019, arXiv 1710.10547)."""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from robust_train._validation import check_choice, check_images, check_positive, check_target
from robust_train.attacks import _setup
from robust_train.attacks._setup import Explainer
from robust_train.attacks.objectives import OBJECTIVES, FragilityObjective
from robust_train.attacks.result import FragilityResult
from robust_train.explain.maps import importance_map
from robust_train.metrics.functional.similarity import (
    center_of_mass_shift,
    kendall_tau,
    spearman_correlation,
    topk_intersection,
)


def fragility_attack(
    model: nn.Module, inputs: Tensor, target: Tensor, *, explainer: str | Explainer = "saliency",
    objective: str = "topk", epsilon: float, step_size: float | None = None, n_steps: int = 50,
    k: int | None = None, target_region: Tensor | None = None, n_restarts: int = 1,
    surrogate_beta: float | None = 10.0, measure_k: int | None = None,
    generator: torch.Generator | None = None, seed: int | None = None, progress: bool = False,
    internal_batch_size: int | None = None,
) -> FragilityResult:
    """Move an explanation as far as possible with an imperceptible, label-keeping perturbation.

    Iterative L_inf sign steps (Ghorbani et al. 2019):
    x_p = clip_[0,1](x_0 + clip_[-eps,eps](x_{p-1} + step_size * sign(d_p) - x_0)), with d_p the
    gradient of the objective (see `robust_train.attacks.objectives`) on a softplus copy of the
    model, or random signs. After every step the ORIGINAL model gives the label and the map; the
    best iterate whose predicted label equals the clean prediction is kept (never a
    label-changing one), else the clean input. Restart 0 starts at x_0, later restarts at a
    uniform random point of the ball; the best over all restarts is returned. Each restart draws
    from its own generator, seeded up front, so with a fixed `step_size` the first n iterates do
    not depend on `n_steps`: more steps can only improve the result. Samples are attacked
    together (no loop over samples); gradients are taken w.r.t. the input only, so parameter
    `.grad` is untouched; every module's train/eval flag is restored.

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
        objective: "topk", "mass_center", "targeted" or "random_sign".
        epsilon: L_inf budget (> 0), e.g. 8/255 for CIFAR-10, 0.1 for 8x8 digits.
        step_size: step per iteration; default `epsilon / 8` (independent of `n_steps`, so that
            more steps never hurt; the paper's ImageNet run used epsilon / 16 for 300 steps).
        n_steps: iterations per restart.
        k: size of the top-k set the "topk" objective empties; default max(1, H*W // 8), i.e. 8
            for 8x8 digits, 98 for 28x28 (RAR uses 100), 128 for 32x32 (papers use 100). For
            ImageNet-size inputs the paper used k=1000; pass it explicitly.
        target_region: bool (B or 1, H, W) region to pull importance into; "targeted" only.
        n_restarts: number of runs, keeping the best.
        surrogate_beta: beta of the softplus copy that gives the direction; None, or a model with no
            nn.ReLU module, uses the model itself.
        measure_k: k of the reported top-k intersection (and of the iterate ranking); default k.
        generator, seed: randomness of restarts, random signs and the mass-center tie direction
            (exclusive); with neither, torch's global generator draws the per-restart seeds.
        progress: show a tqdm bar over the steps.
        internal_batch_size: samples per gradient computation (memory of double backprop).

    Returns:
        FragilityResult (adversarial inputs, clean and attacked maps of the original model,
        label_kept, improved, n_label_changes, top-k intersection, Spearman, Kendall, center shift).

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8), torch.nn.ReLU(),
        ...                             torch.nn.Linear(8, 3))
        >>> x = torch.rand(4, 1, 4, 4)
        >>> res = fragility_attack(model, x, model(x).argmax(1), epsilon=0.05, n_steps=5, k=4)
        >>> bool((res.adversarial - x).abs().max() <= 0.05 + 1e-6), res.topk_intersection.shape
        (True, torch.Size([4]))
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"`model` must be a torch.nn.Module, got {type(model).__name__}")
    check_images(inputs, "inputs")
    batch, _, height, width = inputs.shape
    target = check_target(target, batch).to(inputs.device)
    check_choice(objective, "objective", OBJECTIVES)
    check_positive(epsilon, "epsilon")
    _setup.check_optional_positive(step_size, "step_size")
    check_positive(n_steps, "n_steps", integer=True)
    check_positive(n_restarts, "n_restarts", integer=True)
    _setup.check_optional_positive(surrogate_beta, "surrogate_beta")
    _setup.check_optional_positive(internal_batch_size, "internal_batch_size", integer=True)
    k = _setup.check_k(max(1, height * width // 8) if k is None else k, "k", height, width)
    measure_k = _setup.check_k(k if measure_k is None else measure_k, "measure_k", height, width)
    region = None
    if objective == "targeted":
        if target_region is None:
            raise ValueError("objective='targeted' needs `target_region`, a bool (B or 1, H, W) mask")
        region = _setup.check_region(target_region, batch, height, width).to(inputs.device)
    elif target_region is not None:
        raise ValueError(f"`target_region` is only used by objective='targeted', got {objective!r}")
    explain, explainer_name = _setup.resolve_explainer(
        explainer, needs_gradient=objective != "random_sign")
    seeds = _setup.restart_seeds(generator, seed, n_restarts)
    _setup.check_grad_available()
    alpha = float(epsilon) / 8 if step_size is None else float(step_size)
    chunk = batch if internal_batch_size is None else internal_batch_size

    with _setup.eval_mode(model), torch.enable_grad():
        surrogate, beta_used = _setup.make_surrogate(model, surrogate_beta)
        x0 = inputs.detach().clone()

        def evaluate(x: Tensor) -> tuple[Tensor, Tensor]:
            labels, maps = [], []
            for s in range(0, batch, chunk):
                rows = slice(s, s + chunk)
                with torch.no_grad():
                    labels.append(model(x[rows]).argmax(1))
                explanation = explain(model, x[rows].detach(), target[rows], create_graph=False)
                maps.append(importance_map(explanation).detach())
            return torch.cat(labels), torch.cat(maps)

        clean_label, clean_map = evaluate(x0)
        objective_fn = FragilityObjective(objective, clean_map, k, measure_k, region)

        def direction(x: Tensor, gen: torch.Generator) -> Tensor:
            if not objective_fn.needs_gradient:
                noise = torch.randn(x.shape, generator=gen, device=gen.device, dtype=x.dtype)
                return noise.to(x.device).sign()
            parts = []
            for s in range(0, batch, chunk):
                rows = slice(s, s + chunk)
                xv = x[rows].detach().requires_grad_(True)
                maps = importance_map(explain(surrogate, xv, target[rows], create_graph=True))
                value = objective_fn.ascent_value(maps, rows)
                grad = None
                if value.requires_grad:
                    (grad,) = torch.autograd.grad(value.sum(), xv, allow_unused=True)
                if grad is None:
                    raise ValueError(
                        f"the map of `explainer` {explainer_name!r} is not a differentiable "
                        "function of the input: the explainer detaches (e.g. a Captum wrapper) or "
                        "the map does not depend on the input (a linear model), so no gradient "
                        "attack can move it")
                parts.append(torch.nan_to_num(grad, nan=0.0).sign())
            return torch.cat(parts)

        best_x, best_map = x0.clone(), clean_map.clone()
        best_score = objective_fn.score(clean_map)
        improved = torch.zeros(batch, dtype=torch.bool, device=x0.device)
        n_changes = torch.zeros(batch, dtype=torch.long, device=x0.device)
        any_move = False
        bar = _progress_bar(progress, n_restarts * n_steps)
        for restart, restart_seed in enumerate(seeds):
            gen = torch.Generator(device=x0.device).manual_seed(restart_seed)
            if objective == "mass_center":
                unit = torch.randn(batch, 2, generator=gen, device=x0.device, dtype=x0.dtype)
                objective_fn.center_direction = unit / unit.norm(dim=1, keepdim=True)
            x = x0
            if restart > 0:
                start = torch.rand(x0.shape, generator=gen, device=x0.device, dtype=x0.dtype)
                x = (x0 + (2 * start - 1) * epsilon).clamp(0, 1)
            for _ in range(n_steps):
                d = direction(x, gen)
                any_move = any_move or bool(d.ne(0).any())
                x = (x0 + (x + alpha * d - x0).clamp(-epsilon, epsilon)).clamp(0, 1).detach()
                labels, maps = evaluate(x)
                kept = labels == clean_label
                n_changes += (~kept).long()
                score = objective_fn.score(maps)
                better = kept & FragilityObjective.better(score, best_score)
                best_x[better], best_map[better] = x[better], maps[better]
                best_score = (torch.where(better, score[0], best_score[0]),
                              torch.where(better, score[1], best_score[1]))
                improved |= better
                bar.update(1)
        bar.close()
        if not any_move:
            warnings.warn(
                "fragility_attack: the attack direction was zero at every step, so the inputs did "
                "not move. A piecewise-linear model (ReLU called functionally, which the softplus "
                "surrogate cannot replace) has zero second derivative; use a module nn.ReLU or a "
                "smooth model.", RuntimeWarning, stacklevel=2)
        with torch.no_grad():
            label_kept = model(best_x).argmax(1) == clean_label

    return FragilityResult(
        adversarial=best_x, clean_map=clean_map, attacked_map=best_map, target=target,
        label_kept=label_kept,
        clean_label=clean_label, improved=improved, n_label_changes=n_changes,
        topk_intersection=topk_intersection(clean_map, best_map, measure_k),
        spearman=spearman_correlation(clean_map, best_map),
        kendall=kendall_tau(clean_map, best_map),
        center_shift=_center_shift(clean_map, best_map),
        objective=objective, epsilon=float(epsilon), step_size=alpha, n_steps=n_steps,
        n_restarts=n_restarts, k=k, measure_k=measure_k, surrogate_beta=beta_used,
        explainer=explainer_name,
        region_mass=None if region is None else objective_fn.region_mass(best_map),
        clean_region_mass=None if region is None else objective_fn.region_mass(clean_map),
    )


def _center_shift(clean_map: Tensor, attacked_map: Tensor) -> Tensor:
    return center_of_mass_shift(clean_map.clamp_min(0), attacked_map.clamp_min(0))


def _progress_bar(enabled: bool, total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc="fragility attack", leave=False)
