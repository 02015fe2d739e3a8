"""Both sides of the deterministic bracket for one model: the certified top-k overlap of the
saliency (or input x gradient) map at each L_inf radius (`certify_topk`), and the overlap that
the project's L_inf fragility attack and random points of the ball leave at the same radius.

`BoundSettings` checks every setting once; `certify_model_bounds(model, x, target, settings)`
returns a JSON-ready dict that `robust-train certify --method interval|crown` writes, and
`bounds_summary_markdown` its table.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.attacks import fragility_attack
from robust_train.certify.deterministic import (
    certify_topk,
    check_bound_explainer,
    check_epsilon,
    check_method,
)
from robust_train.core.runtime import check_optional_positive
from robust_train.core.validation import check_non_negative
from robust_train.explain.maps import importance_map
from robust_train.explain.registry import resolve_explainer
from robust_train.explain.similarity import topk_mask

__all__ = ["BoundSettings", "bounds_summary_markdown", "certify_model_bounds"]

EPSILON_GRID = (0.005, 0.01, 0.02, 0.05)


@dataclass(frozen=True)
class BoundSettings:
    """Settings of a deterministic certification run.

    Attributes:
        method: ``interval`` or ``crown``.
        explainer: ``saliency`` or ``input_x_gradient``.
        epsilons: L_inf radii (pixel units).
        k: size of the top-k set; None: H*W // 8 (`default_k`).
        attack_steps: steps of the L_inf top-k fragility attack at each radius (0: none).
        random_points: uniform random points of the ball per image and radius (0: none).
        seed: seed of the attack's restarts and of the random points.

    Examples:
        >>> BoundSettings(method="crown").epsilons
        (0.005, 0.01, 0.02, 0.05)
        >>> BoundSettings(epsilons=(0.01, 2.0))
        Traceback (most recent call last):
        ...
        ValueError: `epsilons` must be an L_inf radius in [0, 1], got 2.0
    """

    method: str = "interval"
    explainer: str = "saliency"
    epsilons: tuple[float, ...] = EPSILON_GRID
    k: int | None = None
    attack_steps: int = 20
    random_points: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        check_method(self.method)
        check_bound_explainer(self.explainer)
        if not self.epsilons:
            raise ValueError("`epsilons` is empty: give at least one L_inf radius")
        for eps in self.epsilons:
            check_epsilon(eps, "epsilons")
        check_optional_positive(self.k, "k", integer=True)
        for name in ("attack_steps", "random_points", "seed"):
            check_non_negative(getattr(self, name), name, integer=True)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def certify_model_bounds(
    model: nn.Module, inputs: Tensor, target: Tensor, settings: BoundSettings
) -> dict[str, Any]:
    """Certify, then attack at each radius; a JSON-ready dict.

    Returns a dict with `epsilons`, `certified_overlap` (mean per radius), `certified_median`,
    `per_image` (B lists), `stable_relus` (mean share of ReLUs fixed per radius), `empirical`
    (mean per radius of the lowest overlap the attack and the random points found, None without
    either), `empirical_min_gap` (the smallest empirical - certified over images and radii: a
    negative value would contradict the certificate), `k` and `seconds` (certify_per_image per
    radius, attack).
    """
    s = settings
    k = s.k if s.k is not None else max(1, inputs.shape[-2] * inputs.shape[-1] // 8)
    cert = certify_topk(
        model, inputs, target, epsilons=s.epsilons, k=k, method=s.method, explainer=s.explainer
    )
    start = time.perf_counter()
    empirical = [_empirical(model, inputs, target, cert.reference, eps, k, s) for eps in s.epsilons]
    attack_seconds = time.perf_counter() - start
    certified = cert.certified_overlap
    found = None if empirical[0] is None else torch.stack(empirical, 1)  # type: ignore[arg-type]
    return {
        "n_images": inputs.shape[0],
        "method": s.method,
        "explainer": s.explainer,
        "epsilons": list(s.epsilons),
        "k": k,
        "certified_overlap": certified.mean(0).tolist(),
        "certified_median": [statistics.median(c) for c in certified.T.tolist()],
        "per_image": certified.tolist(),
        "stable_relus": cert.stable_share.mean(0).tolist(),
        "empirical": None if found is None else found.mean(0).tolist(),
        "empirical_min_gap": None if found is None else float((found - certified).min()),
        "seconds": {
            "certify_per_image": (cert.seconds / inputs.shape[0]).tolist(),
            "attack": attack_seconds,
        },
    }


def _empirical(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    reference: Tensor,
    eps: float,
    k: int,
    s: BoundSettings,
) -> Tensor | None:
    """(B,) the lowest overlap with the reference set over the attack's result and the random
    points of the ball (None where neither runs)."""
    points = []
    if s.attack_steps and eps > 0:
        result = fragility_attack(
            model, inputs, target, explainer=s.explainer, epsilon=eps, step_size=eps / 4,
            n_steps=s.attack_steps, k=k, seed=s.seed,
        )  # fmt: skip
        points.append(result.adversarial.unsqueeze(0))
    if s.random_points:
        gen = torch.Generator().manual_seed(s.seed)
        noise = (torch.rand((s.random_points, *inputs.shape), generator=gen) * 2 - 1) * eps
        points.append((inputs + noise.to(inputs)).clamp(0, 1))
    if not points:
        return None
    every = torch.cat(points)  # (P, B, C, H, W)
    explain, _ = resolve_explainer(s.explainer, differentiable=False)
    overlaps = []
    for batch in every:
        maps = importance_map(explain(model, batch, target)).detach()
        overlaps.append((topk_mask(maps, k) & reference).flatten(1).sum(1).double() / k)
    return torch.stack(overlaps).amin(0)


READING = (
    "**certified** (a guarantee, no probability): at every input of the L_inf ball intersected "
    "with [0, 1], at least this share of the top-k pixels of the map at x stays in the top-k "
    "of the map (mean, and median, over the images)",
    "**empirical**: the lowest share the L_inf top-k fragility attack and the random points of "
    "the ball kept (an upper bound on the true worst case); the truth lies between the two",
    "**stable ReLUs**: share of the ReLUs whose derivative the bounds fix over the ball; the "
    "certificate is loose as soon as many are not",
)


def bounds_summary_markdown(results: dict[str, Any]) -> str:
    """Markdown: L_inf radius -> certified mean / median / empirical / stable ReLUs per model."""
    models = results["models"]
    first = next(iter(models.values()))
    header = ["L_inf radius"]
    for name in models:
        header += [f"{name} certified (median)", f"{name} empirical", f"{name} stable ReLUs"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for i, eps in enumerate(first["epsilons"]):
        row = [f"{eps:g}"]
        for m in models.values():
            emp = m["empirical"]
            row += [
                f"{m['certified_overlap'][i]:.3f} ({m['certified_median'][i]:.3f})",
                "-" if emp is None else f"{emp[i]:.3f}",
                f"{m['stable_relus'][i]:.3f}",
            ]
        lines.append("| " + " | ".join(row) + " |")
    cost = ", ".join(
        f"{name} {max(m['seconds']['certify_per_image']):.3g} s" for name, m in models.items()
    )
    title = (
        f"# Deterministic certificate ({first['method']}, {first['explainer']}, top-{first['k']})"
    )
    reading = "\n".join(f"- {line}" for line in READING)
    text = f"{title}\n\n" + "\n".join(lines) + f"\n\n{reading}\n- certifying one image takes at"
    return text + f" most (over the radii): {cost}\n"
