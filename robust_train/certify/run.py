"""Both sides of the bracket for one model: the certified overlap curve and, at some radii, the
empirical overlap of the L2 attack and of random points on the same smoothed explainer.

`CertifySettings` checks every setting once; `certify_model(model, x, target, settings)` returns a
JSON-ready dict (numbers and lists only), which `robust-train certify` writes and plots and which
any other caller (a notebook, the evaluation engine) can use as it is.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.certify.attack import (
    EmpiricalOverlap,
    attack_certificate,
    measure_overlap,
    random_search,
)
from robust_train.certify.certificate import RADIUS_GRID, SmoothingOptions, certify_explanations
from robust_train.core.validation import check_non_negative, check_positive

__all__ = ["CertifySettings", "certify_model"]

ATTACK_GRID = (0.5, 1.0, 1.5, 2.0)


@dataclass(frozen=True)
class CertifySettings(SmoothingOptions):
    """Settings of a certification run: the smoothed explainer's `SmoothingOptions` (seed 0 by
    default, so runs repeat) and those of the attack side (see `attack_certificate`).

    `radii` and `attack_radii` are L2 radii in pixel units; None: `RADIUS_GRID` and `ATTACK_GRID`
    times sigma. `random_points` 0 skips the random search; `attack_steps` 0 skips the attack.

    Examples:
        >>> s = CertifySettings(sigma=0.2)
        >>> s.resolved_radii()[-1], s.resolved_attack_radii()
        (0.5, (0.1, 0.2, 0.3, 0.4))
        >>> CertifySettings(attack_samples=0)
        Traceback (most recent call last):
        ...
        ValueError: `attack_samples` must be > 0, got 0
    """

    explainer: str = "saliency"
    seed: int = 0
    radii: tuple[float, ...] | None = None
    attack_radii: tuple[float, ...] | None = None
    attack_steps: int = 20
    attack_restarts: int = 1
    attack_samples: int = 8
    random_points: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("attack_steps", "random_points"):
            check_non_negative(getattr(self, name), name, integer=True)
        for name in ("attack_restarts", "attack_samples"):
            check_positive(getattr(self, name), name, integer=True)
        for name in ("radii", "attack_radii"):
            values = getattr(self, name)
            if values is not None:
                if not values:
                    raise ValueError(f"`{name}` is empty: give at least one L2 radius")
                for r in values:
                    check_non_negative(r, name)
        if self.attack_radii is not None and not all(r > 0 for r in self.attack_radii):
            raise ValueError(f"`attack_radii` must be > 0, got {list(self.attack_radii)}")

    def resolved_radii(self) -> tuple[float, ...]:
        if self.radii is not None:
            return self.radii
        return tuple(round(r * self.sigma, 12) for r in RADIUS_GRID)

    def resolved_attack_radii(self) -> tuple[float, ...]:
        if self.attack_radii is not None:
            return self.attack_radii
        return tuple(round(r * self.sigma, 12) for r in ATTACK_GRID)

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["radii"], out["attack_radii"] = self.resolved_radii(), self.resolved_attack_radii()
        return out


def certify_model(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    settings: CertifySettings,
    *,
    progress: bool = False,
) -> dict[str, Any]:
    """Certify `inputs` (explaining `target`), then attack at each attack radius; JSON-ready.

    Returns a dict with `radii`, `certified_overlap` (mean per radius) and `per_image` (B lists),
    `curve` (the mean certified overlap at 101 radii from 0 to the largest, for plots),
    `certified_radius_half` (mean radius certifying half of the top-k set), `attack` (one record
    per attack radius: certified, attack estimate and its upper confidence bound, random search,
    `empirical` = mean over images of the lower of attack and random, label kept rate, and
    `attack_note`: why the attack did not run, where the smoothed map does not depend on the
    input and x itself was measured),
    `resampled_overlap` (the overlap measured with fresh noise at x itself: the Monte Carlo floor
    of the empirical numbers) and `seconds`.
    """
    s = settings
    start = time.perf_counter()
    cert = certify_explanations(
        model, inputs, target, radii=s.resolved_radii(), progress=progress, options=s
    )
    certify_seconds = time.perf_counter() - start
    records, resampled = _bracket(model, inputs, cert, s, progress)
    batch = inputs.shape[0]
    fine = torch.linspace(0, max(cert.radii.max().item(), 1e-12), 101, dtype=torch.float64)
    return {
        "n_images": batch,
        "radii": [float(r) for r in cert.radii],
        "certified_overlap": cert.certified_overlap.mean(0).tolist(),
        "per_image": cert.certified_overlap.tolist(),
        "curve": {
            "radii": fine.tolist(),
            "certified": [float(cert.overlap_at(float(r)).mean()) for r in fine],
        },
        "certified_radius_half": float(cert.certified_radius(0.5).mean()),
        "k": cert.k,
        "kappa": cert.kappa,
        "attack": records,
        "resampled_overlap": resampled,
        "seconds": {
            "certify": certify_seconds,
            "certify_per_image": certify_seconds / batch,
            "attack": time.perf_counter() - start - certify_seconds,
        },
    }


def _bracket(
    model: nn.Module, inputs: Tensor, cert: Any, s: CertifySettings, progress: bool
) -> tuple[list[dict[str, Any]], float | None]:
    """One record per attack radius, and the Monte Carlo floor: the overlap measured with fresh
    noise at x itself (what sampling noise alone costs the empirical numbers)."""
    if not (s.attack_steps or s.random_points):
        return [], None
    floor = measure_overlap(model, inputs, inputs, cert, seed=s.seed + 1)
    records = []
    for radius in s.resolved_attack_radii():
        found = _empirical(model, inputs, cert, radius, s, progress)
        certified = cert.overlap_at(radius)
        empirical = found[0].overlap
        for other in found[1:]:
            empirical = empirical.minimum(other.overlap)
        records.append(
            {
                "radius": radius,
                "certified": float(certified.mean()),
                "empirical": float(empirical.mean()),
                "empirical_min": float(empirical.min()),
                "certified_max": float(certified.max()),
                **_fields(found, s),
            }
        )
    return records, float(floor.overlap.mean())


def _empirical(
    model: nn.Module,
    inputs: Tensor,
    cert: Any,
    radius: float,
    s: CertifySettings,
    progress: bool,
) -> list[EmpiricalOverlap]:
    found = []
    common: dict[str, Any] = dict(
        radius=radius, seed=s.seed, internal_batch_size=s.internal_batch_size
    )
    if s.attack_steps:
        attack = dict(n_steps=s.attack_steps, n_restarts=s.attack_restarts)
        attack.update(attack_samples=s.attack_samples)
        found.append(attack_certificate(model, inputs, cert, progress=progress, **attack, **common))
    if s.random_points:
        found.append(random_search(model, inputs, cert, n_points=s.random_points, **common))
    return found


def _fields(found: list[EmpiricalOverlap], s: CertifySettings) -> dict[str, float | str | None]:
    attack = found[0] if s.attack_steps else None
    noise = found[-1] if s.random_points else None
    return {
        "attack": None if attack is None else float(attack.overlap.mean()),
        "attack_upper": None if attack is None else float(attack.overlap_upper.mean()),
        "attack_label_kept": None if attack is None else float(attack.label_kept.double().mean()),
        "attack_note": None if attack is None else attack.note,
        "random": None if noise is None else float(noise.overlap.mean()),
    }
