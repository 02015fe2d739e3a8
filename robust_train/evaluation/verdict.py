"""A short verdict per explainer from an evaluation's summary, and the budget it was measured at.

The rule (docs/concepts/measures.md, "Verdict") reads three means of the top-k intersection
(the share of the clean map's k most important pixels still among the k most important after the
perturbation; 1: unmoved), all at the same L_inf budget on the same images:

- `score`: the explainer's maps under the strongest attack measured (the lowest mean among its
  gradient attacks that report a top-k intersection);
- `reference`: the maps "map = input" (`robust_train.explain.input_reference`, which knows
  nothing of the model) under the same attack;
- `noise`: the explainer's maps under random signs of the same budget.

Verdicts: "not measurable" (no attacked image gave a score), "below the input reference"
(`score < reference`: the attack moves the model's maps further than it moves the image itself),
"fragile" (the attack's drop `1 - score` is more than twice the drop random noise causes), else
"robust".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["VERDICTS", "Verdict", "budget_line", "verdicts"]

VERDICTS = ("robust", "fragile", "below the input reference", "not measurable")
MEASURE = "topk_intersection"
NOISE = "random_sign"
REFERENCE = "input_reference"


@dataclass(frozen=True)
class Verdict:
    """One explainer's verdict and the numbers it rests on (NaN: not measured).

    Attributes:
        explainer: the explainer's name.
        verdict: one of `VERDICTS`.
        attack: the attack that gave `score` (None when none did).
        score, reference, noise: the three means of the rule (module docstring).
        interval: 95% interval of `score` over images, when known.
    """

    explainer: str
    verdict: str
    attack: str | None
    score: float
    reference: float
    noise: float
    interval: tuple[float, float] | None = None

    def sentence(self) -> str:
        """One line: the verdict and its numbers.

        Examples:
            >>> Verdict("saliency", "fragile", "topk", 0.2, 0.1, 0.8).sentence()[:50]
            'saliency: fragile (top-k intersection 0.200 under '
        """
        if self.attack is None:
            return f"{self.explainer}: {self.verdict} (no attacked image gave a top-k score)"
        ci = f" [{self.interval[0]:.3f}, {self.interval[1]:.3f}]" if self.interval else ""
        return (
            f"{self.explainer}: {self.verdict} (top-k intersection {self.score:.3f}{ci} under "
            f"the {self.attack} attack; map = input {_fmt(self.reference)}; random noise "
            f"{_fmt(self.noise)})"
        )


def _fmt(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"


def _value(measures: dict[str, Any], key: str) -> float:
    value = measures.get(key)
    return float(value) if isinstance(value, (int, float)) else math.nan


def _explainers(measures: dict[str, Any]) -> list[str]:
    names = [k.split("/")[1] for k in measures if k.startswith("attack/")]
    return [n for n in dict.fromkeys(names) if n != REFERENCE]


def verdicts(result: dict[str, Any]) -> list[Verdict]:
    """The verdict of every attacked explainer of one evaluation (`evaluate_classifier`'s dict).

    Examples:
        >>> m = {"attack/saliency/topk/topk_intersection": 0.2,
        ...      "attack/saliency/random_sign/topk_intersection": 0.9,
        ...      "attack/input_reference/topk/topk_intersection": 0.4}
        >>> [v.verdict for v in verdicts({"measures": m})]
        ['below the input reference']
    """
    measures = result.get("measures") or {}
    intervals = result.get("intervals") or {}
    out = []
    for name in _explainers(measures):
        attacks = {
            k.split("/")[2]: _value(measures, k)
            for k in measures
            if k.startswith(f"attack/{name}/") and k.endswith(f"/{MEASURE}")
        }
        noise = attacks.pop(NOISE, math.nan)
        finite = {a: v for a, v in attacks.items() if not math.isnan(v)}
        if not finite:
            out.append(Verdict(name, "not measurable", None, math.nan, math.nan, noise))
            continue
        attack = min(finite, key=finite.__getitem__)
        score = finite[attack]
        reference = _value(measures, f"attack/{REFERENCE}/{attack}/{MEASURE}")
        bounds = intervals.get(f"attack/{name}/{attack}/{MEASURE}")
        interval = (float(bounds[0]), float(bounds[1])) if bounds else None
        if score < reference:
            verdict = "below the input reference"
        elif not math.isnan(noise) and (1 - score) > 2 * (1 - noise):
            verdict = "fragile"
        else:
            verdict = "robust"
        out.append(Verdict(name, verdict, attack, score, reference, noise, interval))
    return out


def budget_line(settings: dict[str, Any], n_images: int | None = None) -> str:
    """The budget and protocol an evaluation ran with, in one line.

    Examples:
        >>> budget_line({"epsilon": 8 / 255, "n_steps": 20, "step_size": 0.002,
        ...              "n_restarts": 1, "attacks": ["topk"], "correct_only": True}, 30)[:55]
        'budget: L_inf epsilon 0.0314 (8/255 of the pixel range)'
    """
    eps = settings.get("epsilon")
    levels = f" ({eps * 255:.3g}/255 of the pixel range)" if isinstance(eps, float) else ""
    attacks = ", ".join(settings.get("attacks") or [])
    who = "correctly classified ones attacked" if settings.get("correct_only") else "all attacked"
    images = f"{n_images} images, " if n_images is not None else ""
    step = settings.get("step_size")
    size = f" of {step:.3g}" if isinstance(step, float) else ""
    if settings.get("ensemble"):
        how = f"the attack ensemble (its worst member per image, {settings.get('search_queries')}"
        how += " random-search queries)"
    else:
        how = "one attack per objective (not the ensemble)"
    return (
        f"budget: L_inf epsilon {eps:.3g}{levels}, {settings.get('n_steps')} steps{size}, "
        f"{settings.get('n_restarts')} restart(s); attacks {attacks}, {how}; {images}{who}"
    )
