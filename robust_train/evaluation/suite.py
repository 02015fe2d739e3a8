"""`evaluate_classifier`: the evaluation engine on one model's held-out images, summarised.

Behind `robust-train evaluate`, `compare`, the demo and the leaderboard: accuracy; fragility
attacks on the explanations of the correctly classified images (Ghorbani et al. 2019); the local
Lipschitz estimate of each explainer (Alvarez-Melis & Jaakkola 2018); MIF/LIF fidelity curves and
the fidelity estimate AUC_LIF - AUC_MIF (Brocki & Chung 2022): the parts of
`robust_train.evaluation.engine`, under one key scheme (`robust_train.evaluation.measures`).
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.core.validation import check_images, check_target
from robust_train.evaluation.engine import run_parts, summarize
from robust_train.evaluation.parts.ground_truth import check_masks
from robust_train.evaluation.settings import EvaluationSettings

__all__ = ["evaluate_classifier"]


def evaluate_classifier(
    model: nn.Module,
    inputs: Tensor,
    labels: Tensor,
    settings: EvaluationSettings | None = None,
    *,
    progress: bool = True,
    masks: Tensor | None = None,
) -> dict[str, Any]:
    """Run every part of the settings on the first `n_samples` images; a JSON-ready dict
    (`robust_train.evaluation.engine.summarize`: `measures`, `intervals`, `counts`, `curves`,
    `seconds`, `settings`, `n_images`, `_examples`). `masks` (B, H, W), the ground truth of
    the evidence where the data has it, adds the localisation of the clean and attacked maps
    (`localisation/<explainer>/<measure>`, `attack/<explainer>/<objective>/<measure>`).

    Examples:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3),
        ...                           torch.nn.Softplus(), torch.nn.Linear(3, 2))
        >>> s = EvaluationSettings(n_samples=4, n_steps=2, lipschitz_samples=2, fidelity_steps=4,
        ...                        explainers=("saliency",), attacks=("topk",), search_queries=5)
        >>> r = evaluate_classifier(net, torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 0, 1]), s,
        ...                         progress=False)
        >>> sorted(r["measures"])[:4]  # doctest: +NORMALIZE_WHITESPACE
        ['accuracy', 'attack/input_reference/topk/center_shift',
         'attack/input_reference/topk/improved', 'attack/input_reference/topk/kendall']
    """
    check_images(inputs, "inputs")
    labels = check_target(labels, inputs.shape[0], "labels")
    s = settings or EvaluationSettings()
    x, y = inputs[: s.n_samples], labels[: s.n_samples]
    m = None if masks is None else check_masks(masks, inputs)[: s.n_samples]
    evaluation = run_parts(model, x, y, s, masks=m, progress=progress, inputs_checked=True)
    result = summarize(evaluation)
    result["images_digest"] = images_digest(x)
    return result


def images_digest(images: Tensor) -> str:
    """A short digest of the evaluated images: two results with the same digest measured the
    same images in the same order (their `per_image` values line up).

    Examples:
        >>> import torch
        >>> images_digest(torch.zeros(2, 1, 2, 2)) == images_digest(torch.zeros(2, 1, 2, 2))
        True
    """
    data = images.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()
    return hashlib.sha1(data).hexdigest()[:16]
