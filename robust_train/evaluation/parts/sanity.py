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

The whole cascade and the independent randomisation are reported as curves (Adebayo et al.'s
figures), per explainer: `sanity/<explainer>/cascade` (x: the number of layers randomised from
the top, 0 = none) and `sanity/<explainer>/independent` (x: the layer randomised alone, 1 = the
top one), each with the lines "topk" (top-k intersection at `measure_k`), "spearman" (rank
correlation of the absolute maps, `importance_map`), "spearman_signed" (of the signed maps, the
channel sum without absolute values) and "ssim" (`robust_train.explain.ssim.ssim` of the
absolute maps scaled to [0, 1] by their maximum). The layers are the modules with
`reset_parameters`, top-down, named in the notes under `sanity_layers`. Beside the end of the
cascade: `random_weights_spearman_signed`, `random_weights_ssim`, and `top_layer_topk` (only
the top layer randomised: a map that barely moves there depends little on the classifier).
A constant map has no top-k set, ranks or structure: where the model's or the randomised
model's map is constant, every similarity is NaN (never 0, which would read as a perfect pass)
and `sanity/<explainer>/blank_random_map` is 1 (its mean is the share of such images at the end
of the cascade).
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from robust_train.evaluation.measures import Measure, part_key, register_measure
from robust_train.evaluation.parts.base import Curve, EvaluationPart, PartOutput, register_part
from robust_train.explain import bind_settings, explainer_name, importance_map
from robust_train.explain.similarity import spearman_correlation, topk_intersection
from robust_train.explain.ssim import ssim

__all__ = [
    "SanityPart",
    "compare_maps",
    "randomization_similarity",
    "randomized_copy",
    "randomized_states",
    "with_states",
]

MEASURE_NAMES = ("random_weights_topk", "random_weights_spearman", "input_topk", "input_spearman")
EXTRA_NAMES = (
    "random_weights_spearman_signed",
    "random_weights_ssim",
    "top_layer_topk",
    "blank_random_map",
)
CURVE_LINES = ("topk", "spearman", "spearman_signed", "ssim")

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
    Measure(
        "random_weights_spearman_signed",
        "Spearman with the random-weights map (signed)",
        False,
        meaning="rank correlation of the signed maps (channel sum, no absolute value) of the "
        "model and of its fully randomised copy (Adebayo et al. 2018 report both)",
    ),
    Measure(
        "random_weights_ssim",
        "SSIM with the random-weights map",
        False,
        meaning="structural similarity of the absolute maps (scaled to [0, 1]) of the model and "
        "of its fully randomised copy: low when the map depends on the learned weights",
    ),
    Measure(
        "top_layer_topk",
        "top-k ∩ with only the top layer random",
        False,
        meaning="share of the map's top-k pixels kept when only the output layer is "
        "re-initialised (the first step of the cascade): a map that keeps most of them depends "
        "little on the classifier",
    ),
    Measure(
        "blank_random_map",
        "blank maps in the sanity check",
        False,
        meaning="share of images whose map, or whose map on the fully randomised copy, is "
        "constant: no similarity is defined there (NaN, never counted as a pass)",
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


def randomized_states(model: nn.Module, *, seed: int) -> list[tuple[str, dict[str, Tensor]]]:
    """(module name, re-initialised state) of every module with `reset_parameters`, top-down,
    drawn as `randomized_copy` draws them (so all of them together are that copy).

    Examples:
        >>> net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        >>> [name for name, _ in randomized_states(net, seed=0)]
        ['2', '0']
    """
    twin = copy.deepcopy(model).cpu()
    order = [(n, m) for n, m in twin.named_modules() if _resettable(m)][::-1]
    if not order:
        randomized_copy(model, seed=seed)  # the same error
    states = []
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for name, module in order:
            module.reset_parameters()  # type: ignore[operator]
            states.append((name, {k: v.clone() for k, v in module.state_dict().items()}))
    return states


def with_states(model: nn.Module, states: list[tuple[str, dict[str, Tensor]]]) -> nn.Module:
    """A copy of `model` with the named modules' states replaced (`randomized_states`)."""
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    twin = copy.deepcopy(model)
    modules = dict(twin.named_modules())
    for name, state in states:
        modules[name].load_state_dict({k: v.to(device) for k, v in state.items()})
    return twin


def _constant(maps: Tensor) -> Tensor:
    flat = maps.flatten(1)
    return flat.amax(1) == flat.amin(1)


def compare_maps(explanation: Tensor, other: Tensor, k: int) -> dict[str, Tensor]:
    """Per image (B,): "topk", "spearman" (absolute maps), "spearman_signed" (signed channel
    sums) and "ssim" (absolute maps scaled to [0, 1]) of two explanations (B, C, H, W); NaN
    where either map is constant.

    Examples:
        >>> e = torch.rand(2, 1, 6, 6)
        >>> [round(float(v[0]), 3) for v in compare_maps(e, e, 5).values()]
        [1.0, 1.0, 1.0, 1.0]
        >>> compare_maps(e, torch.zeros_like(e), 5)["topk"].tolist()
        [nan, nan]
    """
    a, b = importance_map(explanation), importance_map(other)
    sa, sb = explanation.sum(1), other.sum(1)
    blank = _constant(a) | _constant(b)
    blank_signed = _constant(sa) | _constant(sb)
    scale_a = a / a.flatten(1).amax(1).clamp_min(1e-30).view(-1, 1, 1)
    scale_b = b / b.flatten(1).amax(1).clamp_min(1e-30).view(-1, 1, 1)
    values = {
        "topk": (topk_intersection(a, b, k), blank),
        "spearman": (spearman_correlation(a, b), blank),
        "spearman_signed": (spearman_correlation(sa, sb), blank_signed),
        "ssim": (ssim(scale_a, scale_b), blank),
    }
    nan = float("nan")
    return {name: value.float().masked_fill(mask, nan) for name, (value, mask) in values.items()}


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
    blank = _constant(maps) | _constant(random_maps)  # no top-k set or ranks: NaN, never 0
    nan = float("nan")
    return {
        "random_weights_topk": topk_intersection(maps, random_maps, k).masked_fill(blank, nan),
        "random_weights_spearman": spearman_correlation(maps, random_maps).masked_fill(blank, nan),
        "input_topk": topk_intersection(maps, image, k).masked_fill(_constant(maps), nan),
        "input_spearman": spearman_correlation(maps, image),
    }


@register_part("sanity")
class SanityPart(EvaluationPart):
    """The sanity checks of every explainer of the settings (see the module docstring)."""

    def keys(self) -> tuple[str, ...]:
        return self.explainer_keys(MEASURE_NAMES + EXTRA_NAMES)

    def run(
        self, model: nn.Module, inputs: Tensor, labels: Tensor, predictions: Tensor
    ) -> PartOutput:
        s = self.settings
        random_model = randomized_copy(model, seed=s.seed)
        states = randomized_states(model, seed=s.seed)
        out = PartOutput(notes={"sanity_layers": {"top_down": [name for name, _ in states]}})
        for explainer in s.explainers:
            explain = bind_settings(explainer, s)
            name = explainer_name(explainer)
            values = randomization_similarity(
                model, random_model, inputs, predictions, explain, s.measure_k
            )
            for measure, value in values.items():
                out.values[part_key("sanity", name, measure)] = value
            cascade, independent = _curves(model, states, inputs, predictions, explain, s.measure_k)
            out.curves[part_key("sanity", name, "cascade")] = cascade
            out.curves[part_key("sanity", name, "independent")] = independent
            extra = {
                "random_weights_spearman_signed": cascade.lines["spearman_signed"][:, -1],
                "random_weights_ssim": cascade.lines["ssim"][:, -1],
                "top_layer_topk": cascade.lines["topk"][:, 1],
                "blank_random_map": cascade.lines["topk"][:, -1].isnan().float(),
            }
            for measure, value in extra.items():
                out.values[part_key("sanity", name, measure)] = value
        return out


def _curves(
    model: nn.Module,
    states: list[tuple[str, dict[str, Tensor]]],
    inputs: Tensor,
    target: Tensor,
    explain: object,
    k: int,
) -> tuple[Curve, Curve]:
    """The cascading (0..L layers from the top) and independent (layer 1..L alone) curves."""

    def explanation(net: nn.Module) -> Tensor:
        return explain(net, inputs, target).detach()  # type: ignore[operator]

    clean = explanation(model)
    cascade = [compare_maps(clean, clean, k)]
    cascade += [
        compare_maps(clean, explanation(with_states(model, states[: i + 1])), k)
        for i in range(len(states))
    ]
    alone = [compare_maps(clean, explanation(with_states(model, [state])), k) for state in states]

    def stack(rows: list[dict[str, Tensor]]) -> dict[str, Tensor]:
        return {line: torch.stack([r[line] for r in rows], 1) for line in CURVE_LINES}

    n = len(states)
    return (
        Curve([float(i) for i in range(n + 1)], "layers randomised from the top", stack(cascade)),
        Curve([float(i) for i in range(1, n + 1)], "layer randomised alone (1: top)", stack(alone)),
    )
