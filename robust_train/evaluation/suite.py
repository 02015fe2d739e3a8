"""The robustness evaluation suite behind `robust-train evaluate`, `compare` and the demo.

On held-out images: accuracy; fragility attacks on the explanations of the correctly classified
images (Ghorbani et al. 2019: every objective of `robust_train.attacks.OBJECTIVES` that the
settings name, on each attacked explainer); the local Lipschitz estimate of each explainer
(Alvarez-Melis & Jaakkola 2018); MIF/LIF fidelity curves and the fidelity estimate
AUC_LIF - AUC_MIF of each explainer (Brocki & Chung 2022).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from robust_train._runtime import eval_mode, predict
from robust_train._validation import check_images, check_target
from robust_train.attacks import fragility_attack, get_objective
from robust_train.attacks.defaults import target_region
from robust_train.attacks.result import FragilityResult
from robust_train.evaluation.settings import EvaluationSettings
from robust_train.explain import bind_settings, importance_map
from robust_train.metrics.functional import (
    fidelity_curves,
    fidelity_estimate,
    local_lipschitz_estimate,
    mean_confidence_interval,
)

__all__ = ["evaluate_classifier", "mean_and_ci", "suite_explainer"]

SUMMARY_METRICS = ("topk_intersection", "spearman", "kendall", "center_shift")


def mean_and_ci(values: Tensor) -> dict[str, float]:
    """Mean of the finite values with a 95% Student-t interval over images (NaN entries dropped).

    Example:
        >>> mean_and_ci(torch.tensor([1.0, 3.0, float("nan")]))["mean"]
        2.0
    """
    v = values.detach()[torch.isfinite(values.detach())].double()
    if v.numel() == 0:
        return {"mean": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": 0}
    mean, low, high = (float(t) for t in mean_confidence_interval(v))
    return {"mean": mean, "ci_low": low, "ci_high": high, "n": int(v.numel())}


def evaluate_classifier(
    model: nn.Module,
    inputs: Tensor,
    labels: Tensor,
    settings: EvaluationSettings | None = None,
    *,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the whole suite on one model and held-out images; return a JSON-ready dict.

    Layout: `accuracy`, `n_samples`, `n_attacked`; `attacks[attack]` (rows of the first attacked
    explainer) and `attacks_by_explainer[explainer][attack]` (every attacked explainer), each a
    dict of mean metrics, `n`, `n_unmeasured` (samples the attack could not move: left out of
    the means, never counted as robust) and `improved`; `lipschitz[explainer]`,
    `fidelity[explainer]`; `seconds`; `settings`; and `_examples` (tensors, not JSON).

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3),
        ...                           torch.nn.Softplus(), torch.nn.Linear(3, 2))
        >>> s = EvaluationSettings(n_samples=4, n_steps=2, lipschitz_samples=2, fidelity_steps=4,
        ...                        explainers=("saliency",), attacks=("topk",))
        >>> r = evaluate_classifier(net, torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 0, 1]), s,
        ...                         progress=False)
        >>> sorted(k for k in r if not k.startswith("_"))  # doctest: +NORMALIZE_WHITESPACE
        ['accuracy', 'attacks', 'attacks_by_explainer', 'fidelity', 'lipschitz', 'n_attacked',
         'n_samples', 'seconds', 'settings']
    """
    check_images(inputs, "inputs")
    labels = check_target(labels, inputs.shape[0], "labels")
    s = (settings or EvaluationSettings()).resolved((inputs.shape[-2], inputs.shape[-1]))
    with eval_mode(model):
        x, y = inputs[: s.n_samples], labels[: s.n_samples]
        pred = predict(model, x, 256)
        correct = pred == y
        result: dict[str, Any] = {
            "accuracy": float(correct.float().mean()),
            "n_samples": int(x.shape[0]),
            "n_attacked": int(correct.sum()) if s.correct_only else int(x.shape[0]),
        }
        steps = len(s.attacks) * len(s.attack_explainers) + 2 * len(s.explainers)
        bar = tqdm(total=steps, desc="robustness evaluation", disable=not progress, leave=False)
        seconds: dict[str, float] = {}
        xa, ya = (x[correct], y[correct]) if s.correct_only else (x, pred)
        _run_attacks(model, xa, ya, s, result, seconds, bar)
        _run_explainer_metrics(model, x, pred, s, result, seconds, bar)
        bar.close()
    result["seconds"] = seconds
    result["settings"] = {k: v for k, v in dataclasses.asdict(s).items() if k != "extra"}
    return result


def suite_explainer(name: str, s: EvaluationSettings) -> Any:
    """The named explainer with the options its spec ties to the suite's settings bound (IG
    steps and baseline, the seed of a stochastic explainer; `ExplainerSpec.settings`).

    Example:
        >>> suite_explainer("integrated_gradients", EvaluationSettings(ig_steps=4))
        integrated_gradients(n_steps=4, baseline=0.0)
    """
    return bind_settings(name, s)


def attack_one(
    model: nn.Module, x: Tensor, y: Tensor, explainer: str, attack: str, s: EvaluationSettings
) -> FragilityResult:
    """One attack of the suite on one explainer, with the suite's settings."""
    region = None
    if get_objective(attack).needs_region:
        region = target_region(*x.shape[-2:]).to(x.device)
    assert s.epsilon is not None, "call with resolved settings"
    return fragility_attack(
        model,
        x,
        y,
        explainer=suite_explainer(explainer, s),
        objective=attack,
        epsilon=s.epsilon,
        step_size=s.step_size,
        n_steps=s.n_steps,
        k=s.k,
        measure_k=s.measure_k,
        n_restarts=s.n_restarts,
        target_region=region,
        seed=s.seed,
    )


def _run_attacks(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    s: EvaluationSettings,
    result: dict[str, Any],
    seconds: dict[str, float],
    bar: Any,
) -> None:
    result["attacks_by_explainer"] = {}
    for i, explainer in enumerate(s.attack_explainers):
        rows: dict[str, Any] = {}
        for attack in s.attacks:
            bar.set_postfix_str(f"attack {attack} on {explainer}")
            start = time.perf_counter()
            res = attack_one(model, x, y, explainer, attack, s) if len(x) else None
            key = f"attack/{attack}" if i == 0 else f"attack/{explainer}/{attack}"
            seconds[key] = time.perf_counter() - start
            rows[attack] = attack_summary(res)
            if res is not None and i == 0 and attack == "topk":
                result["_examples"] = _examples(x, res)
            bar.update()
        result["attacks_by_explainer"][explainer] = rows
    result["attacks"] = result["attacks_by_explainer"][s.attack_explainers[0]]


def attack_summary(res: FragilityResult | None) -> dict[str, Any]:
    """Means over the measured samples of one attack; `n_unmeasured` counts the others.

    Example:
        >>> attack_summary(None)
        {'n': 0}
    """
    if res is None:
        return {"n": 0}
    out: dict[str, Any] = {
        key: mean_and_ci(getattr(res, key).float())["mean"] for key in SUMMARY_METRICS
    }
    out["n"] = len(res)
    measured = res.measured if res.measured is not None else torch.ones_like(res.improved)
    out["n_unmeasured"] = int((~measured).sum())
    out["improved"] = float(res.improved.float().mean())
    if res.region_mass is not None and res.clean_region_mass is not None:
        out["region_mass"] = mean_and_ci(res.region_mass.float())["mean"]
        out["clean_region_mass"] = mean_and_ci(res.clean_region_mass[measured].float())["mean"]
    return out


def _examples(x: Tensor, res: FragilityResult) -> dict[str, Tensor]:
    n = min(4, len(res))
    return {
        "inputs": x[:n].detach().cpu(),
        "clean_map": res.clean_map[:n].detach().cpu(),
        "adversarial": res.adversarial[:n].detach().cpu(),
        "attacked_map": res.attacked_map[:n].detach().cpu(),
    }


def _run_explainer_metrics(
    model: nn.Module,
    x: Tensor,
    pred: Tensor,
    s: EvaluationSettings,
    result: dict[str, Any],
    seconds: dict[str, float],
    bar: Any,
) -> None:
    result["lipschitz"], result["fidelity"] = {}, {}
    assert s.lipschitz_radius is not None, "call with resolved settings"
    for name in s.explainers:
        bar.set_postfix_str(f"lipschitz {name}")
        start = time.perf_counter()
        lip = local_lipschitz_estimate(
            model,
            x,
            pred,
            explainer=suite_explainer(name, s),
            radius=s.lipschitz_radius,
            n_samples=s.lipschitz_samples,
            normalize_maps=s.lipschitz_normalize,
            seed=s.seed,
        )
        seconds[f"lipschitz/{name}"] = time.perf_counter() - start
        result["lipschitz"][name] = mean_and_ci(lip)
        bar.update()
        bar.set_postfix_str(f"fidelity {name}")
        start = time.perf_counter()
        result["fidelity"][name] = _fidelity(model, x, pred, name, s)
        seconds[f"fidelity/{name}"] = time.perf_counter() - start
        bar.update()


def _fidelity(
    model: nn.Module, x: Tensor, pred: Tensor, name: str, s: EvaluationSettings
) -> dict[str, Any]:
    explanation = suite_explainer(name, s)(model, x, pred)
    curves = fidelity_curves(
        model,
        x,
        pred,
        importance_map(explanation).detach(),
        n_steps=s.fidelity_steps,
        perturbation=s.fidelity_perturbation,
        seed=s.seed,
    )
    fractions = curves.fractions
    return {
        "mif_auc": float(torch.trapezoid(curves.mif, fractions, dim=1).mean()),
        "lif_auc": float(torch.trapezoid(curves.lif, fractions, dim=1).mean()),
        "estimate": mean_and_ci(fidelity_estimate(curves)),
        "fractions": fractions.tolist(),
        "mif": curves.mif.mean(0).tolist(),
        "lif": curves.lif.mean(0).tolist(),
    }
