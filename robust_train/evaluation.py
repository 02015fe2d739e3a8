"""The robustness evaluation suite behind `robust-train evaluate`, `compare` and the demo.

On held-out images: accuracy; fragility attacks on the explanation of the correctly classified
images (Ghorbani et al. 2019: random_sign, topk, mass_center, targeted); the local Lipschitz
estimate of each explainer (Alvarez-Melis & Jaakkola 2018); MIF/LIF fidelity curves and the
fidelity estimate AUC_LIF - AUC_MIF of each explainer (Brocki & Chung 2022).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from robust_train._validation import check_choice, check_images, check_positive, check_target

ATTACKS = ("random_sign", "topk", "mass_center", "targeted")


@dataclass
class EvaluationSettings:
    """Settings of the suite; None picks a default from the image size (see `resolved`).

    Attributes:
        n_samples: held-out images evaluated (the first ones of the test split).
        explainers: explainers scored by the Lipschitz estimate and the fidelity curves.
        attack_explainer: the explainer whose maps the attacks target.
        attacks: attack objectives to run.
        epsilon: L_inf budget of the attacks (pixel units); default 0.1 up to 28 px, else 8/255.
        n_steps: attack iterations; step size epsilon / n_steps * 2 (attack default).
        k: top-k size; default an eighth of the pixels (8 for 8x8 digits).
        lipschitz_radius: L_inf radius of the Lipschitz estimate; default epsilon.
        lipschitz_samples: explainer calls per image of the (random) Lipschitz search.
        lipschitz_normalize: "max" divides each explanation by its largest |value| before the
            ratio (as Quantus does), so models whose gradients differ in scale compare by the shape
            of their explanations; "none" keeps raw explanations (Alvarez-Melis & Jaakkola).
        fidelity_steps: points on each MIF/LIF curve.
        ig_steps: integration steps of integrated gradients (Riemann trapezoid).
        fidelity_perturbation: fill of removed pixels ("mean", "zero", "blur", "noise", "imputation").
        seed: all randomness (attacks, samples) is seeded from it.
    """

    n_samples: int = 200
    explainers: tuple[str, ...] = ("saliency", "input_x_gradient", "integrated_gradients")
    attack_explainer: str = "saliency"
    attacks: tuple[str, ...] = ATTACKS
    epsilon: float | None = None
    n_steps: int = 50
    k: int | None = None
    lipschitz_radius: float | None = None
    lipschitz_samples: int = 16
    lipschitz_normalize: str = "max"
    fidelity_steps: int = 20
    ig_steps: int = 16
    fidelity_perturbation: str = "mean"
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def resolved(self, image_size: tuple[int, int]) -> EvaluationSettings:
        """A copy with every None replaced by its size-dependent default, validated."""
        h, w = image_size
        eps = self.epsilon if self.epsilon is not None else (0.1 if max(h, w) <= 28 else 8 / 255)
        out = dataclasses.replace(
            self, epsilon=eps, k=self.k if self.k is not None else max(1, (h * w) // 8),
            lipschitz_radius=self.lipschitz_radius if self.lipschitz_radius is not None else eps,
            explainers=tuple(self.explainers), attacks=tuple(self.attacks))
        check_positive(out.n_samples, "n_samples", integer=True)
        check_positive(out.epsilon, "epsilon")
        check_positive(out.n_steps, "n_steps", integer=True)
        check_positive(out.lipschitz_samples, "lipschitz_samples", integer=True)
        check_positive(out.fidelity_steps, "fidelity_steps", integer=True)
        for a in out.attacks:
            check_choice(a, "attacks", ATTACKS)
        if not 1 <= out.k <= h * w:  # type: ignore[operator]
            raise ValueError(f"`k` must lie in [1, {h * w}] for {h}x{w} maps, got {out.k}")
        return out


def target_region(height: int, width: int) -> Tensor:
    """Default region of the targeted attack: the top-left quarter of the image, (1, H, W) bool."""
    region = torch.zeros(1, height, width, dtype=torch.bool)
    region[:, : max(1, height // 2), : max(1, width // 2)] = True
    return region


def mean_and_ci(values: Tensor) -> dict[str, float]:
    """Mean of the finite values with a 95% Student-t interval over images (NaN entries dropped)."""
    from robust_train.metrics.functional import mean_confidence_interval

    v = values.detach()[torch.isfinite(values.detach())].double()
    if v.numel() == 0:
        return {"mean": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": 0}
    mean, low, high = (float(t) for t in mean_confidence_interval(v))
    return {"mean": mean, "ci_low": low, "ci_high": high, "n": int(v.numel())}


@torch.no_grad()
def predict(model: nn.Module, inputs: Tensor, batch_size: int = 256) -> Tensor:
    """Predicted labels (B,), batched."""
    return torch.cat([model(inputs[i:i + batch_size]).argmax(1) for i in range(0, inputs.shape[0], batch_size)])


def evaluate_classifier(model: nn.Module, inputs: Tensor, labels: Tensor,
                        settings: EvaluationSettings | None = None, *, progress: bool = True) -> dict[str, Any]:
    """Run the whole suite on one model and held-out images; return a JSON-ready dict.

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3), torch.nn.Softplus(),
        ...                           torch.nn.Linear(3, 2))
        >>> s = EvaluationSettings(n_samples=4, n_steps=2, lipschitz_samples=2, fidelity_steps=4,
        ...                        explainers=("saliency",), attacks=("topk",))
        >>> r = evaluate_classifier(net, torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 0, 1]), s, progress=False)
        >>> sorted(k for k in r if not k.startswith("_"))
        ['accuracy', 'attacks', 'fidelity', 'lipschitz', 'n_attacked', 'n_samples', 'seconds', 'settings']
    """
    from robust_train.attacks import fragility_attack
    from robust_train.metrics.functional import (
        fidelity_curves,
        fidelity_estimate,
        local_lipschitz_estimate,
    )

    check_images(inputs, "inputs")
    labels = check_target(labels, inputs.shape[0], "labels")
    s = (settings or EvaluationSettings()).resolved((inputs.shape[-2], inputs.shape[-1]))
    was_training = model.training
    model.eval()
    try:
        x, y = inputs[: s.n_samples], labels[: s.n_samples]
        seconds: dict[str, float] = {}
        pred = predict(model, x)
        correct = pred == y
        result: dict[str, Any] = {"accuracy": float(correct.float().mean()), "n_samples": int(x.shape[0]),
                                  "n_attacked": int(correct.sum())}
        xa, ya = x[correct], y[correct]
        steps = len(s.attacks) + 2 * len(s.explainers)
        bar = tqdm(total=steps, desc="robustness evaluation", disable=not progress, leave=False)
        result["attacks"] = {}
        for name in s.attacks:
            bar.set_postfix_str(f"attack {name}")
            start = time.perf_counter()
            region = target_region(*x.shape[-2:]) if name == "targeted" else None
            res = fragility_attack(model, xa, ya, explainer=_explainer(s.attack_explainer, s), objective=name, epsilon=s.epsilon,
                                   n_steps=s.n_steps, k=s.k, target_region=region, seed=s.seed) if len(xa) else None
            seconds[f"attack/{name}"] = time.perf_counter() - start
            result["attacks"][name] = _attack_summary(res)
            if res is not None and name == "topk":
                n = min(4, len(res))
                result["_examples"] = {"inputs": xa[:n].detach().cpu(), "clean_map": res.clean_map[:n].detach().cpu(),
                                       "adversarial": res.adversarial[:n].detach().cpu(),
                                       "attacked_map": res.attacked_map[:n].detach().cpu()}
            bar.update()
        result["lipschitz"], result["fidelity"] = {}, {}
        for name in s.explainers:
            bar.set_postfix_str(f"lipschitz {name}")
            start = time.perf_counter()
            lip = local_lipschitz_estimate(model, x, pred, explainer=_explainer(name, s), radius=s.lipschitz_radius,
                                           n_samples=s.lipschitz_samples, normalize_maps=s.lipschitz_normalize,
                                           seed=s.seed)
            seconds[f"lipschitz/{name}"] = time.perf_counter() - start
            result["lipschitz"][name] = mean_and_ci(lip)
            bar.update()
            bar.set_postfix_str(f"fidelity {name}")
            start = time.perf_counter()
            result["fidelity"][name] = _fidelity(model, x, pred, name, s, fidelity_curves, fidelity_estimate)
            seconds[f"fidelity/{name}"] = time.perf_counter() - start
            bar.update()
        bar.close()
        result["seconds"] = seconds
        result["settings"] = {k: v for k, v in dataclasses.asdict(s).items() if k != "extra"}
        return result
    finally:
        model.train(was_training)


def _explainer(name: str, s: EvaluationSettings) -> Any:
    """The named explainer with the suite's settings bound (IG steps; SmoothGrad with fixed noise)."""
    from robust_train.explain import get_explainer

    if name == "integrated_gradients":
        return get_explainer(name, n_steps=s.ig_steps)
    if name == "smoothgrad":
        return get_explainer(name, seed=s.seed)
    return get_explainer(name)


def _attack_summary(res: Any) -> dict[str, Any]:
    if res is None:
        return {"n": 0}
    out: dict[str, Any] = {key: mean_and_ci(getattr(res, key).float())["mean"]
                           for key in ("topk_intersection", "spearman", "kendall", "center_shift")}
    out["n"] = len(res)
    out["improved"] = float(res.improved.float().mean())
    if res.region_mass is not None:
        out["region_mass"] = float(res.region_mass.mean())
        out["clean_region_mass"] = float(res.clean_region_mass.mean())
    return out


def _fidelity(model: nn.Module, x: Tensor, pred: Tensor, name: str, s: EvaluationSettings, curves_fn: Any,
              estimate_fn: Any) -> dict[str, Any]:
    from robust_train.explain import importance_map

    explanation = _explainer(name, s)(model, x, pred)
    curves = curves_fn(model, x, pred, importance_map(explanation).detach(), n_steps=s.fidelity_steps,
                       perturbation=s.fidelity_perturbation, seed=s.seed)
    fractions = curves.fractions
    estimate = estimate_fn(curves)
    return {
        "mif_auc": float(torch.trapezoid(curves.mif, fractions, dim=1).mean()),
        "lif_auc": float(torch.trapezoid(curves.lif, fractions, dim=1).mean()),
        "estimate": mean_and_ci(estimate),
        "fractions": fractions.tolist(),
        "mif": curves.mif.mean(0).tolist(),
        "lif": curves.lif.mean(0).tolist(),
    }
