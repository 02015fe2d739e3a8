"""The options of a fragility attack, defined once (`AttackOptions`).

`fragility_attack`, `ExplanationFragility`, the evaluation settings (which hold one),
the monitors and the `robust-train evaluate` flags all take these fields; their defaults that
depend on the image size are resolved here (`resolved`), from `robust_train.attacks.defaults`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from torch import Tensor

from robust_train.attacks._setup import check_k
from robust_train.attacks.defaults import default_epsilon, default_k
from robust_train.core.balls import NORMS
from robust_train.core.options import option
from robust_train.core.runtime import check_optional_positive
from robust_train.core.validation import check_choice, check_positive
from robust_train.explain.protocol import Explainer

__all__ = [
    "DIRECTIONS",
    "AttackGoal",
    "AttackOptions",
    "check_linf_budget",
    "default_step_size",
]

# Which attack directions run (`robust_train.attacks._directions`): every candidate, keeping per
# image the worst result; the one the explainer declares; or one of them.
DIRECTIONS = ("all", "declared", "model", "surrogate", "exact")


def check_linf_budget(value: object, name: str) -> None:
    """Refuse an L_inf budget of 1 or more: it covers the whole [0, 1] pixel range, so the
    "imperceptible" perturbation can be any image and the number measures nothing.

    Examples:
        >>> check_linf_budget(5.0, "epsilon")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `epsilon` is an L_inf budget on [0, 1] images and must be < 1 ...
    """
    check_positive(value, name)
    if not float(value) < 1.0:  # type: ignore[arg-type]
        v = float(value)  # type: ignore[arg-type]
        hint = f"; {v:g} is probably {v:g}/255 = {v / 255:.4g} (pixel levels)" if v <= 255 else ""
        raise ValueError(
            f"`{name}` is an L_inf budget on [0, 1] images and must be < 1 (a budget of 1 covers "
            f"the whole pixel range, so nothing is measured), got {value!r}{hint}"
        )


def default_step_size(epsilon: float, n_steps: int) -> float:
    """The attack step: epsilon / 8, or 2 * epsilon / n_steps when fewer than 16 steps could not
    otherwise reach the border of the ball and come back (a cheap monitor's 3 steps: 2 eps / 3).

    Examples:
        >>> default_step_size(0.4, 50), round(default_step_size(0.3, 3), 3)
        (0.05, 0.2)
    """
    return max(epsilon / 8, 2 * epsilon / n_steps)


@dataclass(frozen=True)
class AttackGoal:
    """What an attack on an explanation moves, and by which objective: one declaration for
    `fragility_attack` and `ensemble_attack`, which take these as keywords (checked there,
    with the images, before any work).

    Attributes:
        explainer: a name for `robust_train.explain.get_explainer`, or a callable
            `explainer(model, x, target, *, create_graph=False)`.
        objective: a name in `robust_train.attacks.OBJECTIVES` ("topk", "mass_center",
            "targeted", "random_sign", or one registered with `register_objective`).
        target_region: bool (B or 1, H, W) region to pull importance into; "targeted" only.
    """

    explainer: str | Explainer = "saliency"
    objective: str = "topk"
    target_region: Tensor | None = None


@dataclass(frozen=True)
class AttackOptions:
    """Settings of one fragility attack (Ghorbani, Abid & Zou, AAAI 2019).

    Attributes:
        epsilon: the budget in pixel units of [0, 1] images: L_inf, in (0, 1), None: 0.1 up to
            28 px a side, else 8/255 (`robust_train.attacks.defaults.default_epsilon`); with
            `norm="l2"` the L2 radius (required).
        norm: "linf" (default) or "l2": the ball of `epsilon`; the steps (sign or
            L2-normalised) and the random restart points (uniform in that ball) follow it.
        step_size: step per iteration; None: `default_step_size` (epsilon / 8, larger for fewer
            than 16 steps). With a fixed step the first n iterates do not depend on `n_steps`.
        n_steps: iterations per restart.
        k: size of the top-k set the "topk" objective empties; None: H*W // 8.
        measure_k: k of the reported top-k intersection (and of the iterate ranking); None: k.
        n_restarts: runs per image (the first from the image, later ones from random points of
            the ball), the worst case kept.
        noise_draws: draws R of the "random_sign" baseline, x + epsilon * s with s uniform
            random signs, clipped to [0, 1]; the worst (lowest top-k intersection) label-keeping
            draw is kept. The worst of R is a low quantile of the noise's effect, so it keeps
            falling, ever more slowly, as R grows; the default R = 10 costs ten maps per image and
            no gradient.
        direction: where gradient attacks take their direction (`robust_train.attacks.
            _directions`): "all" (default) runs every candidate direction of the explainer and
            keeps, per image, the worst result (costs one attack per candidate: 1 for the
            gradient family, up to 3 for Grad-CAM); "declared" the explainer's declared one
            (the softplus surrogate where its map is piecewise constant on ReLU nets, else the
            model with a map's own final ReLU smoothed); "model", "surrogate", "exact" (no
            surrogate at all) one of them.
        surrogate_beta: beta of the softplus surrogates of the directions (the model's ReLUs
            and a map's own final ReLU); None: no surrogate, the direction is "exact".
        internal_batch_size: images per gradient computation (memory of double backprop); None:
            from the image size (`robust_train.core.runtime.auto_chunk`).
    """

    epsilon: float | None = option(
        None, "attack budget: L_inf (default 0.1 up to 28 px, else 8/255) or L2"
    )
    norm: str = option("linf", "the attack's ball: linf or l2")
    step_size: float | None = option(
        None, "attack step (default epsilon / 8, or 2 epsilon / steps)"
    )
    n_steps: int = option(50, "attack steps per restart")
    k: int | None = option(None, "top-k size (default: an eighth of the pixels)")
    measure_k: int | None = option(None, "k of the reported top-k intersection (default: k)")
    n_restarts: int = option(1, "attack restarts, the worst kept")
    noise_draws: int = option(
        10,
        "draws of the random_sign baseline x + epsilon * random signs, the worst "
        "label-keeping one kept",
    )
    direction: str = option(
        "all",
        "attack directions: all (every candidate, the worst per image kept), "
        "declared, model, surrogate or exact",
    )
    surrogate_beta: float | None = option(10.0, "softplus beta of the attack's surrogate")
    internal_batch_size: int | None = option(
        None, "images per gradient computation (default: by size)"
    )

    def __post_init__(self) -> None:
        check_choice(self.norm, "norm", NORMS)
        if self.norm == "linf" and self.epsilon is not None:
            check_linf_budget(self.epsilon, "epsilon")
        elif self.norm != "linf":
            if self.epsilon is None:
                raise ValueError("`epsilon` must be given for norm='l2' (an L2 radius)")
            check_positive(self.epsilon, "epsilon")
        check_optional_positive(self.step_size, "step_size")
        check_positive(self.n_steps, "n_steps", integer=True)
        check_optional_positive(self.k, "k", integer=True)
        check_optional_positive(self.measure_k, "measure_k", integer=True)
        check_positive(self.n_restarts, "n_restarts", integer=True)
        check_positive(self.noise_draws, "noise_draws", integer=True)
        check_choice(self.direction, "direction", DIRECTIONS)
        if self.direction == "surrogate" and self.surrogate_beta is None:
            raise ValueError("`direction` 'surrogate' needs `surrogate_beta` (e.g. 10.0), got None")
        check_optional_positive(self.surrogate_beta, "surrogate_beta")
        if self.surrogate_beta is not None and not math.isfinite(self.surrogate_beta):
            raise ValueError(
                f"`surrogate_beta` must be finite (or None), got {self.surrogate_beta}"
            )
        check_optional_positive(self.internal_batch_size, "internal_batch_size", integer=True)

    def resolved(self, height: int, width: int) -> AttackOptions:
        """A copy with every size-dependent default filled in and checked against the size
        (options resolved for this size already are returned as they are).

        Examples:
            >>> o = AttackOptions(n_steps=3).resolved(28, 28)
            >>> o.epsilon, o.k, o.measure_k, round(o.step_size, 4)
            (0.1, 98, 98, 0.0667)
        """
        if getattr(self, "_resolved_for", None) == (height, width):
            return self  # resolved for this size already: passed on as it is
        epsilon = self.epsilon if self.epsilon is not None else default_epsilon(height, width)
        k = check_k(self.k if self.k is not None else default_k(height, width), "k", height, width)
        measure_k = check_k(
            self.measure_k if self.measure_k is not None else k, "measure_k", height, width
        )
        step = self.step_size if self.step_size is not None else None
        out = dataclasses.replace(
            self,
            epsilon=float(epsilon),
            k=k,
            measure_k=measure_k,
            step_size=float(step if step is not None else default_step_size(epsilon, self.n_steps)),
        )
        object.__setattr__(out, "_resolved_for", (height, width))
        return out

    def attack_options(self) -> AttackOptions:
        """The attack's options: these (an option set that holds them, such as
        `robust_train.evaluation.EvaluationSettings`, gives its own).

        Examples:
            >>> AttackOptions(n_steps=2).attack_options()
            AttackOptions(epsilon=None, norm='linf', step_size=None, n_steps=2, k=None, \
measure_k=None, n_restarts=1, noise_draws=10, direction='all', surrogate_beta=10.0, \
internal_batch_size=None)
        """
        return self
