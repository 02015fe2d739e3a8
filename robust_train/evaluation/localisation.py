"""Ground-truth localisation of clean and attacked maps: does the map still point at the object
after the attack?

Where the data come with a mask of the evidence (`robust_train.data.ClutteredMNIST5kDataModule`:
`masks(split)`), `localisation_values` runs the fragility part's attacks (same images: the
correctly classified ones unless `correct_only` is False; same settings and explainers, "map =
input" included when `input_reference` is set) and scores, per image, the clean maps under
`localisation/<explainer>/<measure>` and the attacked maps under
`attack/<explainer>/<objective>/<measure>`, for the relevance mass accuracy, the relevance rank
accuracy (Arras et al. 2022) and the pointing game (Zhang et al. 2018)
(`robust_train.metrics.functional.localisation`). Images not attacked get NaN. The values go into
`robust_train.evaluation.summarize` like any part's (`Evaluation(settings, values=...)`).

The engine's parts see images and labels only, so this runs beside `run_parts` rather than as a
part that `EvaluationSettings(parts=...)` names.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from robust_train.core.runtime import eval_mode, predict, require_grad_mode
from robust_train.core.validation import check_images, check_target
from robust_train.evaluation.measures import Measure, attack_key, part_key, register_measure
from robust_train.evaluation.parts.fragility import FragilityPart
from robust_train.evaluation.parts.input_reference import REFERENCE
from robust_train.evaluation.settings import EvaluationSettings
from robust_train.explain import explainer_name
from robust_train.metrics.functional.localisation import (
    pointing_game,
    relevance_mass_accuracy,
    relevance_rank_accuracy,
)

__all__ = ["LOCALISATION_MEASURES", "localisation_values"]

LOCALISATION_MEASURES: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "relevance_mass": relevance_mass_accuracy,
    "relevance_rank": relevance_rank_accuracy,
    "pointing_game": pointing_game,
}

for _measure in (
    Measure(
        "relevance_mass",
        "relevance mass accuracy",
        True,
        meaning="share of the map's mass inside the object's ground-truth mask (Arras et al. "
        "2022): higher points at the evidence; a uniform map scores the mask's area share",
    ),
    Measure(
        "relevance_rank",
        "relevance rank accuracy",
        True,
        meaning="share of the map's K highest pixels inside the object's mask, K the mask's "
        "size (Arras et al. 2022): higher points at the evidence",
    ),
    Measure(
        "pointing_game",
        "pointing game",
        True,
        meaning="share of maps whose maximum falls on the object's mask (Zhang et al. 2018)",
    ),
):
    register_measure(_measure)


def _scores(maps: Tensor, masks: Tensor, attacked: Tensor) -> dict[str, Tensor]:
    """Each measure of the attacked images' maps, NaN at the other images."""
    out = {}
    for measure, score in LOCALISATION_MEASURES.items():
        full = torch.full(attacked.shape, float("nan"), device=attacked.device)
        full[attacked] = score(maps, masks).to(full.device)
        out[measure] = full
    return out


def localisation_values(
    model: nn.Module,
    inputs: Tensor,
    labels: Tensor,
    masks: Tensor,
    settings: EvaluationSettings | None = None,
) -> dict[str, Tensor]:
    """Localisation of the clean and the attacked maps of every explainer and attack of the
    settings (see the module docstring), per image.

    Args:
        model: the classifier (put in eval mode for the call, each module's flag restored).
        inputs: images (B, C, H, W) in [0, 1].
        labels: true classes (B,).
        masks: ground-truth masks of the evidence (B, H, W).
        settings: the evaluation settings (default `EvaluationSettings()`); their `attacks`,
            `explainers`, `epsilon`, `correct_only` and `input_reference` apply.

    Returns:
        key -> (B,) values, NaN where an image was not attacked.

    Raises:
        ValueError: `masks` not (B, H, W) for `inputs` (B, C, H, W), or bad images or labels.

    Examples:
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8),
        ...                           torch.nn.Softplus(), torch.nn.Linear(8, 2))
        >>> s = EvaluationSettings(explainers=("saliency",), attacks=("topk",), n_steps=2,
        ...                        correct_only=False, input_reference=False)
        >>> x, mask = torch.rand(3, 1, 4, 4), torch.zeros(3, 4, 4, dtype=torch.bool)
        >>> mask[:, 1:3, 1:3] = True
        >>> values = localisation_values(net, x, torch.tensor([0, 1, 0]), mask, s)
        >>> sorted(values)[:2]
        ['attack/saliency/topk/pointing_game', 'attack/saliency/topk/relevance_mass']
        >>> values["localisation/saliency/relevance_mass"].shape
        torch.Size([3])
    """
    check_images(inputs, "inputs")
    labels = check_target(labels, inputs.shape[0], "labels").to(inputs.device)
    if tuple(masks.shape) != (inputs.shape[0], *inputs.shape[-2:]):
        raise ValueError(
            f"`masks` must be (B, H, W) = {(inputs.shape[0], *inputs.shape[-2:])} for inputs "
            f"{tuple(inputs.shape)}, got {tuple(masks.shape)}"
        )
    require_grad_mode("localisation")
    s = (settings or EvaluationSettings()).resolved(*inputs.shape[-2:])
    part = FragilityPart(s)
    explainers = (*s.explainers, REFERENCE) if s.input_reference else s.explainers
    out: dict[str, Tensor] = {}
    with eval_mode(model), torch.enable_grad():
        predictions = predict(model, inputs, 256)
        attacked = predictions == labels if s.correct_only else torch.ones_like(labels).bool()
        x, y, m = (
            inputs[attacked],
            (labels if s.correct_only else predictions)[attacked],
            masks[attacked.to(masks.device)].to(inputs.device),
        )
        for explainer in explainers:
            name = explainer_name(explainer)
            for attack in s.attacks:
                result = part.attack(model, x, y, explainer, attack)
                if result is None:
                    continue
                for measure, v in _scores(result.clean_map, m, attacked).items():
                    out[part_key("localisation", name, measure)] = v
                for measure, v in _scores(result.attacked_map, m, attacked).items():
                    out[attack_key(name, attack, measure)] = v
    return out
