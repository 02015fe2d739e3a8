"""The explanation "map = input": a reference that knows nothing of the model.

Adebayo et al., "Sanity Checks for Saliency Maps" (NeurIPS 2018), show that some saliency maps
look like edge detectors of the input and hardly change when the model's weights are
randomised. A map can then also look robust under input changes for a reason that has nothing
to do with the model. The map that IS the input is the extreme case: every robustness number of
an explainer can be read against what this reference scores under the same attack on the same
images (`robust-train evaluate` and the leaderboard attack it beside every explainer,
`EvaluationSettings.input_reference`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from robust_train.explain.autograd import prepare_inputs, target_scores
from robust_train.explain.registry import register_explainer

__all__ = ["input_reference"]


@register_explainer("input_reference", piecewise_constant=False, model_free=True)
def input_reference(
    model: nn.Module, inputs: Tensor, target: Tensor, *, create_graph: bool = False
) -> Tensor:
    """The input itself as its explanation (a copy; the map does not depend on the model, which
    is called once, on one image and without gradients, only to check `target`).

    Differentiable: with `create_graph=True` the map is the identity function of the input, so
    an attack on it sees its true gradient. A fragility attack can still move this map only by
    moving the input: the top-k attack lowers the pixels of the clean top-k set and raises the
    others (`piecewise_constant=False`: no softplus surrogate is needed; `model_free=True`: the
    model is used only for the label check, so an attack runs one direction, since every
    surrogate of the model gives the same map and the same gradient). Its importance map
    (`importance_map`: sum over channels of |x|) is the image for a single-channel image in
    [0, 1].

    Args:
        model: the classifier (not used: the map does not depend on it).
        inputs: images (B, C, H, W).
        target: class indices (B,) (checked against the model's classes, not used).
        create_graph: keep the graph to the input.

    Returns:
        A tensor equal to `inputs`.

    Examples:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(16, 2))
        >>> x = torch.rand(2, 1, 4, 4)
        >>> torch.equal(input_reference(net, x, torch.tensor([0, 1])), x)
        True
    """
    x, target = prepare_inputs(inputs, target)
    with torch.no_grad():
        logits = model(x[:1].detach())  # refuse a class index the model does not have
        target_scores(logits.expand(len(target), *logits.shape[1:]), target)
    out = x.clone()
    return out if create_graph else out.detach()
