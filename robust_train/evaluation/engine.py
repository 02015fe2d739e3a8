"""The evaluation engine: what is measured, on which images, with which settings, defined once.

`run_parts(model, inputs, labels, settings)` puts the model in eval mode (every module's own flag
restored after), predicts, resolves the settings' size-dependent defaults, runs every part the
settings name (`robust_train.evaluation.PARTS`) and returns their per-image values under the
project's key scheme (`robust_train.evaluation.measures`). `summarize` reduces them with
`robust_train.metrics.KeyedMean` (means with 95% intervals over images, NaN left out; counts
summed), the reduction the monitors use across DDP ranks too, into the JSON-ready dict that
`robust-train evaluate`/`compare`, the demo and the leaderboard write.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from robust_train.core.runtime import eval_mode, predict, require_grad_mode
from robust_train.core.validation import check_images, check_target
from robust_train.evaluation.measures import measure_of
from robust_train.evaluation.parts import Curve, EvaluationPart, get_part
from robust_train.evaluation.parts.base import AttackExamples
from robust_train.evaluation.parts.ground_truth import check_masks
from robust_train.evaluation.parts.input_reference import beats_reference
from robust_train.evaluation.settings import EvaluationSettings
from robust_train.metrics.keyed import KeyedMean

__all__ = ["Evaluation", "build_parts", "progress_bar", "run_parts", "summarize", "total_work"]


@dataclass
class Evaluation:
    """Per-image values of one evaluation, by key, with the curves, examples and part timings.

    Attributes:
        settings: the resolved settings used.
        values: key -> per-image values (B,) (NaN: not measured for that image).
        curves: curve key -> per-image curves.
        examples: a few attacked images for figures.
        seconds: part name -> wall seconds.
        notes: topic -> JSON-ready notes of the parts (e.g. "attack_cost").
    """

    settings: EvaluationSettings
    values: dict[str, Tensor] = field(default_factory=dict)
    curves: dict[str, Curve] = field(default_factory=dict)
    examples: dict[str, AttackExamples] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    notes: dict[str, dict[str, Any]] = field(default_factory=dict)


def build_parts(settings: EvaluationSettings, height: int, width: int) -> list[EvaluationPart]:
    """The settings' parts, bound to the settings resolved for `height` x `width` images.

    Examples:
        >>> [p.name for p in build_parts(EvaluationSettings(parts=("lipschitz",)), 8, 8)]
        ['lipschitz']
    """
    resolved = settings.resolved(height, width)
    return [get_part(name)(resolved) for name in resolved.parts]


def run_parts(
    model: nn.Module,
    inputs: Tensor,
    labels: Tensor,
    settings: EvaluationSettings | None = None,
    *,
    parts: list[EvaluationPart] | None = None,
    predictions: Tensor | None = None,
    masks: Tensor | None = None,
    progress: bool = False,
    inputs_checked: bool = False,
) -> Evaluation:
    """Run the parts on one model and held-out images (all of them; see `n_samples` in
    `evaluate_classifier`); `accuracy` is reported per image too. `predictions` (the model's
    labels, when the caller has them) saves a forward. `masks` (B, H, W), the ground truth of
    the evidence in each image where the data has it, adds the localisation of the clean and
    the attacked maps (`robust_train.evaluation.parts.ground_truth`); a ValueError names it
    when its shape does not fit `inputs`. `inputs_checked`: the caller has checked `inputs`,
    `labels` and `masks` already (`robust_train.core.validation.check_images`, `check_target`,
    `check_masks`), so the batch is checked once.

    Examples:
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3),
        ...                           torch.nn.Softplus(), torch.nn.Linear(3, 2))
        >>> s = EvaluationSettings(parts=("lipschitz",), explainers=("saliency",),
        ...                        lipschitz_samples=2)
        >>> ev = run_parts(net, torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 0, 1]), s)
        >>> sorted(ev.values), ev.values["lipschitz/saliency/lipschitz"].shape
        (['accuracy', 'lipschitz/saliency/lipschitz'], torch.Size([4]))
    """
    if not inputs_checked:
        check_images(inputs, "inputs")
        labels = check_target(labels, inputs.shape[0], "labels")
        masks = None if masks is None else check_masks(masks, inputs)
    labels = labels.to(inputs.device)
    masks = None if masks is None else masks.to(inputs.device)
    require_grad_mode("evaluation")
    if parts is None:
        parts = build_parts(settings or EvaluationSettings(), *inputs.shape[-2:])
    resolved = parts[0].settings if parts else (settings or EvaluationSettings())
    evaluation = Evaluation(settings=resolved)
    with eval_mode(model), torch.enable_grad():
        pred = predict(model, inputs, 256) if predictions is None else predictions
        evaluation.values["accuracy"] = (pred == labels).float()
        bar = progress_bar(parts, inputs.shape[0], enabled=progress)
        for part in parts:
            part.progress, part.masks = progress, masks
            bar.set_postfix_str(part.name)
            start, done = time.perf_counter(), bar.n
            part.advance = _advance(bar, inputs.shape[0], done + part.work() * inputs.shape[0])
            try:
                out = part.run(model, inputs, labels, pred)
            finally:
                part.advance = _ignore
            evaluation.seconds[part.name] = time.perf_counter() - start
            evaluation.values.update(out.values)
            evaluation.curves.update(out.curves)
            evaluation.examples.update(out.examples)
            for topic, notes in out.notes.items():
                evaluation.notes.setdefault(topic, {}).update(notes)
            end = min(done + part.work() * inputs.shape[0], bar.total or 0.0)
            bar.update(max(end - bar.n, 0.0))
        bar.close()
    evaluation.values.update(beats_reference(evaluation.values))
    return evaluation


def total_work(parts: list[EvaluationPart], n_images: int) -> float:
    """The whole evaluation's work, known before it starts: every part's `work()` per image
    times the images, in attack steps of a one-pass map (attack steps, and random-sign draws,
    search queries, Lipschitz samples and curve forwards weighed by their passes:
    `robust_train.evaluation.cost`).

    Examples:
        >>> s = EvaluationSettings(parts=("lipschitz",), explainers=("saliency",),
        ...                        lipschitz_samples=3)
        >>> total_work(build_parts(s, 8, 8), n_images=10)  # 4 maps of a fifth of a step each
        8.0
    """
    return float(sum(part.work() for part in parts) * n_images)


def progress_bar(parts: list[EvaluationPart], n_images: int, *, enabled: bool) -> Any:
    """One line on stderr for the whole evaluation: the share of `total_work` done, the time
    spent and the time left: the weighted work left times the seconds per weighted unit over
    all the time spent so far (no smoothing: a stretch of cheap or dear work does not swing it).
    """
    return tqdm(
        total=total_work(parts, n_images),
        desc="evaluation",
        disable=not enabled,
        leave=False,
        smoothing=0.0,
        unit="step",
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed} spent, {remaining} left{postfix}",
    )


def _advance(bar: Any, n_images: int, ceiling: float) -> Any:
    """`part.advance`: units per image, times the images, never past the part's share."""

    def advance(units: float) -> None:
        bar.update(max(min(units * n_images, ceiling - bar.n, (bar.total or 0.0) - bar.n), 0.0))

    return advance


def _ignore(units: float) -> None:
    """No progress to show (a part run outside the engine)."""


def summarize(evaluation: Evaluation) -> dict[str, Any]:
    """The JSON-ready reduction of an evaluation.

    Layout: `measures` (key -> mean over the images that key measured, or the sum for counts:
    `Measure.reduce`), `intervals` (key -> [low, high], 95% over images, for means), `counts`
    (key -> images measured), `per_image` (key -> the value of every evaluated image, NaN where
    not measured: tables that put models side by side compare them on the same images),
    `curves` (key -> {"xs", "xname", line -> mean curve}), `seconds` (part -> s), the parts'
    notes by topic (`attack_cost`: each attack's ensemble members and cost), `settings`;
    `n_images`; `_examples` (figures' tensors, not JSON).

    Examples:
        >>> ev = Evaluation(EvaluationSettings(), values={"accuracy": torch.tensor([1.0, 0.0])})
        >>> summarize(ev)["measures"]
        {'accuracy': 0.5}
    """
    values = evaluation.values
    sums = tuple(key for key in values if measure_of(key).reduce == "sum")
    metric = KeyedMean({key: () for key in values}, sums=sums)
    metric.update({key: v.flatten() for key, v in values.items()})
    measures = {key: float(v) for key, v in metric.compute().items()}
    intervals = {key: list(bounds) for key, bounds in metric.intervals().items()}
    counts = {key: int(n) for key, n in metric.counts().items()}
    return {
        "measures": measures,
        "intervals": intervals,
        "counts": counts,
        "per_image": {key: v.flatten().tolist() for key, v in values.items()},
        "n_images": int(next(iter(evaluation.values.values())).shape[0])
        if evaluation.values
        else 0,
        "curves": {key: _mean_curve(c) for key, c in evaluation.curves.items()},
        "seconds": dict(evaluation.seconds),
        **{topic: dict(notes) for topic, notes in evaluation.notes.items()},
        "settings": {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in evaluation.settings.as_dict().items()
            if k != "extra"
        },
        "_examples": evaluation.examples,
    }


def _mean_curve(curve: Curve) -> dict[str, Any]:
    out: dict[str, Any] = {"xs": list(curve.xs), "xname": curve.xname}
    for name, lines in curve.lines.items():
        finite = torch.isfinite(lines).all(1)
        out[name] = lines[finite].mean(0).tolist() if bool(finite.any()) else []
    return out
