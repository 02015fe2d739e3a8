"""IGR (Wang & Kong, "Exploiting the Relationship Between Kendall's Rank Correlation and Cosine
Similarity for Attribution Protection", NeurIPS 2022, arXiv 2205.07279), as a preset of the
explanation-smoothness penalty.

penalty(x) = 1 - cos(IG(x), IG(x')), x' from projected sign ascent on that distance in
B_inf(x, eps), IG the integrated gradients of the target logit from a zero baseline, on the
importance maps (sum over channels of |IG|). The paper combines it with adversarial training
(AT/TRADES/MART); here it is one term, and a list of terms composes it with `adversarial`.
"""

from __future__ import annotations

from robust_train.core.validation import check_positive
from robust_train.explain.registry import get_explainer
from robust_train.regularizers.base import register_penalty
from robust_train.regularizers.smoothness import ExplanationSmoothness


@register_penalty("igr")
class IGRPenalty(ExplanationSmoothness):
    """1 - cosine between the IG maps at x and at an ascent point x' (see module docstring).

    Args:
        weight: penalty weight.
        radius: L_inf radius eps of x' (MNIST: 0.3).
        n_ascent_steps: sign-ascent steps on the distance (0: a uniform random x').
        ascent_step_size: step of the ascent (default 2.5 * radius / max(1, n_ascent_steps)).
        n_ig_steps: path points of the integrated gradients (trapezoid rule).
        n_samples: x' per input.
        name, seed: as every term.
        detach_clean: the clean IG map without create_graph (see `explanation_smoothness`).
        ascent_beta: the ascent direction is taken with every ReLU module swapped for
            Softplus(ascent_beta) (None: the model itself; on a ReLU network the IG map is then
            moved only through its (x - baseline) factor); the penalty uses the model itself.

    Examples:
        >>> term = IGRPenalty(n_ig_steps=8)
        >>> term.options.distance, term.options.explainer
        ('cosine', integrated_gradients(n_steps=8))
    """

    def __init__(
        self,
        weight: float = 1.0,
        radius: float = 0.3,
        n_ascent_steps: int = 5,
        ascent_step_size: float | None = None,
        n_ig_steps: int = 10,
        n_samples: int = 1,
        name: str | None = None,
        seed: int | None = None,
        detach_clean: bool = False,
        ascent_beta: float | None = 10.0,
    ) -> None:
        check_positive(n_ig_steps, "n_ig_steps", integer=True)
        if n_ig_steps < 2:
            raise ValueError(f"`n_ig_steps` must be >= 2 (trapezoid rule), got {n_ig_steps}")
        step = ascent_step_size
        if step is None:
            step = 2.5 * radius / max(1, n_ascent_steps)
        super().__init__(
            weight,
            name,
            seed,
            explainer=get_explainer("integrated_gradients", n_steps=n_ig_steps),
            radius=radius,
            n_samples=n_samples,
            distance="cosine",
            n_ascent_steps=n_ascent_steps,
            ascent_step_size=step,
            detach_clean=detach_clean,
            ascent_beta=ascent_beta,
        )
        self.n_ig_steps = n_ig_steps
