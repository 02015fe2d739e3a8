"""Ground-truth localisation of the maps the attack parts see: does the map point at the object,
before and after the attack?

When the engine is given the masks of the evidence (`run_parts(..., masks=...)`, which sets
`EvaluationPart.masks`), the fragility and input_reference parts score, per attacked image, each
explainer's clean map under `localisation/<explainer>/<measure>` and its map after each attack
under `attack/<explainer>/<objective>/<measure>`, for the relevance mass accuracy, the relevance
rank accuracy (Arras et al. 2022) and the pointing game (Zhang et al. 2018)
(`robust_train.metrics.functional.localisation`). Without masks nothing is reported.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from robust_train.evaluation.measures import Measure, register_measure
from robust_train.metrics.functional.localisation import (
    pointing_game,
    relevance_mass_accuracy,
    relevance_rank_accuracy,
)

__all__ = ["LOCALISATION", "LOCALISATION_MEASURES", "check_masks", "localisation_scores"]

LOCALISATION = "localisation"  # the key prefix of the clean maps' scores

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


def check_masks(masks: Tensor, inputs: Tensor) -> Tensor:
    """`masks` as bool, after checking it is (B, H, W) for `inputs` (B, C, H, W).

    Raises:
        ValueError: another shape (the message names `masks` and both shapes).

    Examples:
        >>> check_masks(torch.ones(2, 4, 4), torch.rand(2, 3, 4, 4)).dtype
        torch.bool
    """
    expected = (inputs.shape[0], *inputs.shape[-2:])
    if not isinstance(masks, Tensor) or tuple(masks.shape) != expected:
        shape = tuple(masks.shape) if isinstance(masks, Tensor) else type(masks).__name__
        raise ValueError(
            f"`masks` must be (B, H, W) = {expected} for inputs {tuple(inputs.shape)}, got {shape}"
        )
    return masks.bool()


def localisation_scores(maps: Tensor | None, masks: Tensor, attacked: Tensor) -> dict[str, Tensor]:
    """Each measure of the attacked images' maps (B', H, W) against their masks (B', H, W),
    scattered back to the whole batch (`attacked`, bool (B,)): NaN at the other images, all NaN
    when `maps` is None.

    Examples:
        >>> mask = torch.zeros(1, 2, 2, dtype=torch.bool)
        >>> mask[0, 0, 0] = True
        >>> maps = torch.tensor([[[3.0, 1.0], [0.0, 0.0]]])
        >>> s = localisation_scores(maps, mask, torch.tensor([False, True]))
        >>> s["relevance_mass"].tolist(), s["pointing_game"].tolist()
        ([nan, 0.75], [nan, 1.0])
    """
    out = {}
    for measure, score in LOCALISATION_MEASURES.items():
        full = torch.full(attacked.shape, float("nan"), device=attacked.device)
        if maps is not None:
            full[attacked] = score(maps, masks.to(maps.device)).to(full.device)
        out[measure] = full
    return out
