"""Settings of the evaluation suite, with the size-dependent defaults of `robust_train.attacks`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from robust_train._runtime import check_optional_positive
from robust_train._validation import check_positive
from robust_train.attacks.defaults import default_epsilon, default_k
from robust_train.attacks.objectives import OBJECTIVES, get_objective
from robust_train.explain.registry import resolve_explainer

__all__ = ["ATTACKS", "DEFAULT_ATTACKS", "EvaluationSettings"]

# The live registry of objectives (names iterate in registration order); kept under this name.
ATTACKS = OBJECTIVES
DEFAULT_ATTACKS = ("random_sign", "topk", "mass_center", "targeted")


@dataclass
class EvaluationSettings:
    """Settings of the suite; None picks a default from the image size (see `resolved`).

    Attributes:
        n_samples: held-out images evaluated (the first ones of the test split).
        explainers: explainers scored by the Lipschitz estimate and the fidelity curves.
        attack_explainer: the explainer whose maps the attacks target.
        attacks: attack objectives to run (names in `robust_train.attacks.OBJECTIVES`).
        epsilon: L_inf budget of the attacks (pixel units); default 0.1 up to 28 px, else 8/255.
        n_steps: attack iterations per restart.
        k: top-k size of the attack; default an eighth of the pixels (8 for 8x8 digits).
        lipschitz_radius: L_inf radius of the Lipschitz estimate; default epsilon.
        lipschitz_samples: explainer calls per image of the (random) Lipschitz search.
        lipschitz_normalize: "max" divides each explanation by its largest |value| before the
            ratio (as Quantus does), so models whose gradients differ in scale compare by the shape
            of their explanations; "none" keeps raw explanations (Alvarez-Melis & Jaakkola).
        fidelity_steps: points on each MIF/LIF curve.
        ig_steps: integration steps of integrated gradients (Riemann trapezoid).
        fidelity_perturbation: fill of removed pixels ("mean", "zero", "blur", "noise",
            "imputation").
        seed: all randomness (attacks, samples) is seeded from it.
        attack_explainers: explainers attacked, each with every attack; empty: just
            `attack_explainer`. The first one's rows are `result["attacks"]`; all are in
            `result["attacks_by_explainer"][explainer][attack]`.
        n_restarts: attack restarts (the first from the clean image, later ones from random
            points of the ball), the worst case kept.
        measure_k: k of the reported top-k intersection; default `k`.
        step_size: attack step; default epsilon / 8 (the attack's default).
        correct_only: attack only the correctly classified images (the RAR/ART protocol); False
            attacks every image, with its predicted class as target.
        ig_baseline: value of the constant baseline image of integrated gradients (0.0: the
            black image, the zero baseline of RAR's evaluation).
        extra: free-form notes carried along (not used by the suite).
    """

    n_samples: int = 200
    explainers: tuple[str, ...] = ("saliency", "input_x_gradient", "integrated_gradients")
    attack_explainer: str = "saliency"
    attacks: tuple[str, ...] = DEFAULT_ATTACKS
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
    attack_explainers: tuple[str, ...] = ()
    n_restarts: int = 1
    measure_k: int | None = None
    step_size: float | None = None
    correct_only: bool = True
    ig_baseline: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def resolved(self, image_size: tuple[int, int]) -> EvaluationSettings:
        """A copy with every None replaced by its size-dependent default, validated."""
        h, w = image_size
        eps = self.epsilon if self.epsilon is not None else default_epsilon(h, w)
        k = self.k if self.k is not None else default_k(h, w)
        out = dataclasses.replace(
            self,
            epsilon=eps,
            k=k,
            measure_k=self.measure_k if self.measure_k is not None else k,
            lipschitz_radius=self.lipschitz_radius if self.lipschitz_radius is not None else eps,
            explainers=tuple(self.explainers),
            attacks=tuple(self.attacks),
            attack_explainers=tuple(self.attack_explainers) or (self.attack_explainer,),
        )
        out._check(h, w)
        return out

    def _check(self, h: int, w: int) -> None:
        for name in ("n_samples", "n_steps", "lipschitz_samples", "fidelity_steps", "n_restarts"):
            check_positive(getattr(self, name), name, integer=True)
        check_positive(self.epsilon, "epsilon")
        check_optional_positive(self.step_size, "step_size")
        if isinstance(self.ig_baseline, bool) or not isinstance(self.ig_baseline, (int, float)):
            raise TypeError(f"`ig_baseline` must be a number, got {self.ig_baseline!r}")
        for attack in self.attacks:
            if attack not in OBJECTIVES:
                raise ValueError(f"Unknown `attacks` {attack!r}; expected one of {list(ATTACKS)}")
        for name in ("k", "measure_k"):
            value = getattr(self, name)
            if not 1 <= value <= h * w:
                raise ValueError(f"`{name}` must lie in [1, {h * w}] for {h}x{w} maps, got {value}")
        gradient = any(get_objective(a).needs_gradient for a in self.attacks)
        for explainer in self.attack_explainers:
            resolve_explainer(explainer, differentiable=gradient, name="attack_explainers")
        for explainer in self.explainers:
            resolve_explainer(explainer, differentiable=False, name="explainers")
