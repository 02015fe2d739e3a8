"""Ground-truth localisation of clean and attacked maps: does the map still point at the object
after the attack?

Where the data come with a mask of the evidence (`robust_train.data.ClutteredMNIST5kDataModule`:
`masks(split)`), the engine scores the maps of the fragility part's attacks against it
(`run_parts(..., masks=...)`, `evaluate_classifier(..., masks=...)`; `robust-train evaluate`
passes the masks of a datamodule that has them): the clean maps under
`localisation/<explainer>/<measure>` and the attacked maps under
`attack/<explainer>/<objective>/<measure>`, for the relevance mass accuracy, the relevance rank
accuracy (Arras et al. 2022) and the pointing game (Zhang et al. 2018)
(`robust_train.evaluation.parts.ground_truth`). `localisation_values` runs those attacks alone
and returns only these values. Images not attacked get NaN.
"""

from __future__ import annotations

from torch import Tensor, nn

from robust_train.core.validation import check_images, check_target
from robust_train.evaluation.engine import run_parts
from robust_train.evaluation.parts.base import EvaluationPart
from robust_train.evaluation.parts.fragility import FragilityPart
from robust_train.evaluation.parts.ground_truth import LOCALISATION_MEASURES, check_masks
from robust_train.evaluation.parts.input_reference import InputReferencePart
from robust_train.evaluation.settings import EvaluationSettings

__all__ = ["LOCALISATION_MEASURES", "localisation_values"]


def localisation_values(
    model: nn.Module,
    inputs: Tensor,
    labels: Tensor,
    masks: Tensor,
    settings: EvaluationSettings | None = None,
) -> dict[str, Tensor]:
    """Localisation of the clean and the attacked maps of every explainer and attack of the
    settings (see the module docstring), per image: the fragility part's attacks (and
    input_reference's, "map = input", when the settings' `input_reference` is set), run with
    the masks, their other measures left out.

    Args:
        model: the classifier (put in eval mode for the call, each module's flag restored).
        inputs: images (B, C, H, W) in [0, 1].
        labels: true classes (B,).
        masks: ground-truth masks of the evidence (B, H, W).
        settings: the evaluation settings (default `EvaluationSettings()`); their `attacks`,
            `explainers`, `epsilon`, `correct_only`, `ensemble` and `input_reference` apply.

    Returns:
        key -> (B,) values, NaN where an image was not attacked.

    Raises:
        ValueError: `masks` not (B, H, W) for `inputs` (B, C, H, W), or bad images or labels.

    Examples:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8),
        ...                           torch.nn.Softplus(), torch.nn.Linear(8, 2))
        >>> s = EvaluationSettings(explainers=("saliency",), attacks=("topk",), n_steps=2,
        ...                        correct_only=False, input_reference=False, ensemble=False)
        >>> x, mask = torch.rand(3, 1, 4, 4), torch.zeros(3, 4, 4, dtype=torch.bool)
        >>> mask[:, 1:3, 1:3] = True
        >>> values = localisation_values(net, x, torch.tensor([0, 1, 0]), mask, s)
        >>> sorted(values)[:2]
        ['attack/saliency/topk/pointing_game', 'attack/saliency/topk/relevance_mass']
        >>> values["localisation/saliency/relevance_mass"].shape
        torch.Size([3])
    """
    check_images(inputs, "inputs")
    masks = check_masks(masks, inputs)
    s = (settings or EvaluationSettings()).resolved(*inputs.shape[-2:])
    parts: list[EvaluationPart] = [FragilityPart(s)]
    parts += [InputReferencePart(s)] if s.input_reference else []
    labels = check_target(labels, inputs.shape[0], "labels")
    values = run_parts(
        model, inputs, labels, s, parts=parts, masks=masks, inputs_checked=True
    ).values
    return {k: v for k, v in values.items() if k.rsplit("/", 1)[-1] in LOCALISATION_MEASURES}
