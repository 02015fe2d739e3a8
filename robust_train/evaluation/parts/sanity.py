"""The sanity part: does each map depend on what the model learned? (Adebayo, Gilmer, Muelly,
Goodfellow, Hardt & Kim, "Sanity Checks for Saliency Maps", NeurIPS 2018.)

Model-parameter randomisation: every explainer's map of the predicted class is compared with
the map of the same explainer, for the same class, on a copy of the model whose every layer is
re-initialised (`randomized_copy`). Cascading randomisation, top-down (the output layer first,
then each layer below it), reported at its end, when every layer is random: the one number per
explainer that says whether the map still depends on the learned weights (Adebayo et al.'s
rightmost column; a map that matches the random network's map reflects the architecture and
the input, not the training). Independent randomisation (one layer at a time) asks which layer
a map depends on, one number per layer; it is not reported here. Measures, per image:
`sanity/<explainer>/random_weights_topk` (top-k intersection at `measure_k` of the two
importance maps) and `.../random_weights_spearman` (their Spearman correlation): lower is
better. Beside them the map's likeness to the input itself (the reference "map = input",
`robust_train.explain.input_reference`): `.../input_topk` and `.../input_spearman`, neither
good nor bad in themselves, the measure that robustness numbers are read against (a map that
is mostly the input moves with the input only).
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from robust_train.evaluation.measures import Measure, part_key, register_measure
from robust_train.evaluation.parts.base import EvaluationPart, PartOutput, register_part
from robust_train.explain import bind_settings, explainer_name, importance_map
from robust_train.explain.similarity import spearman_correlation, topk_intersection

__all__ = ["SanityPart", "randomization_similarity", "randomized_copy"]

MEASURE_NAMES = ("random_weights_topk", "random_weights_spearman", "input_topk", "input_spearman")

for _measure in (
    Measure(
        "random_weights_topk",
        "top-k ∩ with the random-weights map",
        False,
        meaning="share of the map's top-k pixels also in the top-k of the same explainer on the "
        "same architecture with every layer re-initialised (Adebayo et al. 2018, cascading "
        "randomisation to its end): a map that depends on what the model learned scores low",
    ),
    Measure(
        "random_weights_spearman",
        "Spearman with the random-weights map",
        False,
        meaning="rank correlation of the map with the same explainer's map on the randomised "
        "copy of the model: low when the map depends on the learned weights",
    ),
    Measure(
        "input_topk",
        "top-k ∩ with the input",
        None,
        meaning="share of the map's top-k pixels that are among the input's own top-k pixels "
        "(the reference 'map = input'): how much of the map is the image itself",
    ),
    Measure(
        "input_spearman",
        "Spearman with the input",
        None,
        meaning="rank correlation of the map with the input image itself",
    ),
):
    register_measure(_measure)


def randomized_copy(model: nn.Module, *, seed: int) -> nn.Module:
    """A copy of `model` with every module that has `reset_parameters()` re-initialised, in
    cascading top-down order (the last module first), from one CPU generator seeded with
    `seed` (the copy is drawn on the CPU, then moved back to the model's device, so a seed gives
    the same weights on every device); buffers without a reset (a `Normalize`) are kept, the
    model itself is untouched and every module's train/eval flag is copied.

    Raises:
        ValueError: no module of `model` has `reset_parameters` (nothing to randomise).

    Examples:
        >>> net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        >>> twin = randomized_copy(net, seed=0)
        >>> torch.equal(twin[0].weight, net[0].weight), torch.equal(
        ...     twin[0].weight, randomized_copy(net, seed=0)[0].weight)
        (False, True)
    """
    if not any(_resettable(m) for m in model.modules()):
        raise ValueError(
            f"`model` ({type(model).__name__}) has no module with reset_parameters(): "
            "there are no weights to randomise"
        )
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    twin = copy.deepcopy(model).cpu()
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for module in reversed([m for m in twin.modules() if _resettable(m)]):
            module.reset_parameters()  # type: ignore[operator]
    return twin.to(device)


def _resettable(module: nn.Module) -> bool:
    return callable(getattr(module, "reset_parameters", None))


def randomization_similarity(
    model: nn.Module,
    random_model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    explainer: object,
    k: int,
) -> dict[str, Tensor]:
    """Per image (B,): top-k intersection and Spearman of the importance maps of `explainer` on
    `model` and on `random_model` for the same `target`, and of the map with the input's own
    importance map; keyed by the measure names of this part."""
    maps = importance_map(explainer(model, inputs, target).detach())  # type: ignore[operator]
    random_maps = importance_map(explainer(random_model, inputs, target).detach())  # type: ignore[operator]
    image = importance_map(inputs.detach())
    return {
        "random_weights_topk": topk_intersection(maps, random_maps, k),
        "random_weights_spearman": spearman_correlation(maps, random_maps),
        "input_topk": topk_intersection(maps, image, k),
        "input_spearman": spearman_correlation(maps, image),
    }


@register_part("sanity")
class SanityPart(EvaluationPart):
    """The sanity checks of every explainer of the settings (see the module docstring)."""

    def keys(self) -> tuple[str, ...]:
        return self.explainer_keys(MEASURE_NAMES)

    def run(
        self, model: nn.Module, inputs: Tensor, labels: Tensor, predictions: Tensor
    ) -> PartOutput:
        s = self.settings
        random_model = randomized_copy(model, seed=s.seed)
        out = PartOutput()
        for explainer in s.explainers:
            explain = bind_settings(explainer, s)
            values = randomization_similarity(
                model, random_model, inputs, predictions, explain, s.measure_k
            )
            for measure, value in values.items():
                out.values[part_key("sanity", explainer_name(explainer), measure)] = value
        return out
