"""One penalty over several maps: the smoothness of every map a user looks at, with shared work.

penalty(x) = sum_e w_e * d(E_e(x), E_e(x')), summed over a tuple of differentiable explainers E_e
with weights w_e, all at the SAME perturbed point x' (uniform in B_inf(x, radius), or moved by a
few projected sign-ascent steps on the weighted sum itself; with `start="corner"` the ascent
starts at a random vertex of the ball, x + radius * random signs, where a gradient-free random
search of the ball puts its points), d the map distance of
`ExplanationSmoothness` (1 - cosine by default) between importance maps (each raised to its
`map_powers` exponent, 1 by default), or the top-k attack's own objective ("topk_mass": the
share of the perturbed map's mass outside the clean map's top-k set; "topk_lost": the share of
the clean map's own top-k mass that the perturbed map lost; "l1_topk_mass", "l1_topk_lost":
either plus the L1 distance). It is the explanation
smoothness penalty of SENN / IGR / FAR (`robust_train.regularizers.smoothness`) over several maps
at once: a model fine-tuned on one map protects that map, not the map its user acts on.

Shared work: saliency, input x gradient and Grad-CAM are all read off the gradient of the target
logit, with respect to the input and to Grad-CAM's layer. `gradient_family_maps` computes every
one of them that is asked for from ONE forward and ONE backward (create_graph) at x, and again at
x' (and at each ascent point), where separate terms would run one forward and backward per map.
The other explainers (LRP, DeepLIFT, integrated gradients) have backward passes of their own and
run once each per point. One x' serves every map, so one random draw and one ascent replace one
per term.

The ascent direction of the weighted sum is taken inside `direction_surrogates`: every ReLU of
the model computes softplus_ascent_beta when one of the maps is piecewise constant on ReLU
networks (saliency, input x gradient), and Grad-CAM's final ReLU its scale-free softplus
surrogate; the penalty itself is computed on the model and the exact maps.

Where x' starts (`n_starts`): by default one draw; with more, each sample's ascent starts from
the draw where the weighted distance of the exact maps is largest. What input x gradient's map
at x' is held to (`gradient_factor`): by default the clean map x * g(x); with it, x' * g(x), so
that only the gradient factor's change counts, not the input's own move.

Modes (`model_mode`): "unchanged" (the default) runs the penalty's forwards in the model's own
modes, so in training each BatchNorm normalises with the statistics of the penalised images
(clean, then perturbed) and updates its running statistics with them. "frozen" keeps the same
modes and normalisation but leaves the running statistics as they were
(`robust_train.core.runtime.running_statistics_kept`): the statistics the model is evaluated with
then come from the training forwards of clean images only. "eval" runs the penalty in eval mode
(running statistics, Dropout off; every submodule's flag restored): the penalty then constrains
the eval-mode maps while the task loss trains the batch-statistics network, and training can
exploit the difference (eval-mode accuracy can collapse while training accuracy stays high).

Anchor (`teacher`): by default x' is compared with the model's own clean maps, so the model can
lower the penalty by making every map say less (a flat map is perfectly stable). With `teacher`,
the path of a frozen checkpoint of the same architecture (typically the natural model a fine-tune
starts from), x''s maps are compared with the TEACHER's clean maps instead (in eval mode, no
gradient): the model can only lower the penalty by keeping, under perturbation, the maps the
teacher read off the evidence. The ascent then moves x' away from the teacher's maps too, and the
model's own clean maps are not computed. `teacher_powers` raises the teacher's maps to a power
before the distance: the model is then held to a sharper copy of the teacher's map, not to the map
itself.
"""

from __future__ import annotations

import copy
import os
import weakref
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.core.balls import project_offset, step_direction
from robust_train.core.options import takes_options
from robust_train.core.resources import resolve_file
from robust_train.core.runtime import eval_mode, require_grad_mode, running_statistics_kept
from robust_train.core.validation import check_choice, check_non_negative, check_positive
from robust_train.explain.autograd import prepare_inputs, target_scores
from robust_train.explain.clamp import clamp_positive, direction_surrogates
from robust_train.explain.grad_cam import one_activation
from robust_train.explain.layers import capture_output, find_layer
from robust_train.explain.maps import importance_map, normalize_map
from robust_train.explain.registry import explainer_spec, resolve_explainer
from robust_train.explain.similarity import topk_support
from robust_train.models import load_classifier
from robust_train.regularizers._penalty_parts import DISTANCES, map_distance, sample_in_ball
from robust_train.regularizers.base import PenaltyTerm, register_penalty
from robust_train.regularizers.options import AscentOptions, PenaltyCall, penalty_function

__all__ = [
    "GRADIENT_FAMILY",
    "MODEL_MODES",
    "MULTI_MAP_DISTANCES",
    "STARTS",
    "TOPK_DISTANCES",
    "MultiMapOptions",
    "MultiMapSmoothness",
    "check_teacher",
    "gradient_family_maps",
    "multi_map_smoothness",
    "teacher_model",
    "topk_mass_distance",
]

# The maps read off one gradient of the target logit (input and Grad-CAM's layer).
GRADIENT_FAMILY = ("saliency", "input_x_gradient", "grad_cam")
# Where the perturbed point starts: a uniform point of the ball, or one of its vertices.
STARTS = ("uniform", "corner")
# The modes the penalty's forwards run in (`MultiMapOptions.model_mode`).
MODEL_MODES = ("unchanged", "frozen", "eval")
# The map distances: the smoothness penalty's, the top-k attack's objective, and the sum of both.
TOPK_DISTANCES = ("topk_mass", "topk_lost", "l1_topk_mass", "l1_topk_lost")
MULTI_MAP_DISTANCES = (*DISTANCES, *TOPK_DISTANCES)


@dataclass(frozen=True)
class MultiMapOptions(AscentOptions):
    """The options of the multi-map penalty (the function and the term take them): the
    ascent's (`AscentOptions`: an L_inf ball of radius 0.3 here) and these. The explainers are
    resolved once, when the set is built.

    Attributes:
        explainers: registered names of differentiable explainers, each at most once; those
            in `GRADIENT_FAMILY` share one forward and backward, the others run at their
            defaults (Grad-CAM's layer: `layer`).
        map_weights: one non-negative weight per explainer (default 1 each), not all zero.
        distance: "cosine" (1 - cosine), "l1" (sum-normalised maps), "l2" (max-normalised),
            "topk_mass" (`topk_mass_distance`: the share of the perturbed map's mass outside
            the clean map's top-`k` set, the top-k attack's objective; the ascent maximises
            it too), "topk_lost" (`topk_mass_distance(relative=True)`: the share of the clean
            map's own mass on that set that the perturbed map lost: 0 for identical maps),
            "l1_topk_mass" or "l1_topk_lost" (the sum of "l1" and either).
        layer: Grad-CAM's layer (a dotted module name); None: Grad-CAM's own default.
        start: where x' starts before the ascent: "uniform" (a uniform point of the ball) or
            "corner" (a uniform random vertex of the ball: x + radius * random signs, each
            pixel's sign drawn from the same uniform draw).
        model_mode: the modes of the penalty's forwards: "unchanged" (the model's own: in
            training, BatchNorm normalises with the penalised images' statistics and updates
            its running statistics with them and with the perturbed points), "frozen" (the
            same, the running statistics left as they were) or "eval" (eval mode: BatchNorm
            with its running statistics, Dropout off; every submodule's flag restored).
        teacher: None (compare x''s maps with the model's own clean maps) or a checkpoint of
            the same architecture (a `.ckpt` written by `robust-train fit`, a saved state dict,
            or a shipped checkpoint's name such as "mnist5k_baseline") whose clean maps, in eval
            mode and without gradient, x''s maps are compared with. Loaded into a copy of the
            penalised model at its first use.
        map_powers: one exponent >= 1 per explainer (default 1 each): each importance map is
            raised to its power before the distance, which puts the distance's weight on the
            map's largest values, the top-k set the attacks score (a coarse map such as
            Grad-CAM at a 7 x 7 layer spreads its mass over every cell, and a distance of the
            whole maps hardly sees its few top cells change places).
        teacher_powers: with `teacher`, one exponent >= 1 per explainer (default 1 each): the
            teacher's clean map is raised to it before the distance (and before `map_powers`),
            so the model's map at x' is pulled towards a sharper copy of the teacher's, its
            mass moved onto the teacher's largest values (where a natural model's coarse
            Grad-CAM peaks on the evidence, its squared map holds more of its mass there).
            Without `teacher` it must be None.
        k: the size of the clean top-k set of the "topk_mass" distances (the attack's k: the
            number of pixels of the importance map it scores; Grad-CAM's map is compared at the
            input's size, as the attack scores it).
        gradient_factor: compare input x gradient's map at x' with |x' * g(x)| (the moved input
            times the clean gradient: the teacher's with `teacher`) instead of the clean map
            |x * g(x)|. The map is the product of the input and the gradient; the input's own
            move is not the model's to undo, so the distance then measures what the model can
            keep, the change of the gradient factor where the moved input weighs it. Needs
            "input_x_gradient" among `explainers`.
        n_starts: how many starts (uniform points or vertices, as `start` says) are drawn; each
            sample's ascent starts from the one where the weighted distance of the exact maps is
            largest (a random search of the ball's kind, without a graph: one forward and one
            backward per start).
    """

    radius: float = 0.3
    explainers: tuple[str, ...] = ("input_x_gradient", "grad_cam")
    map_weights: tuple[float, ...] | None = None
    distance: str = "cosine"
    layer: str | None = None
    start: str = "uniform"
    model_mode: str = "unchanged"
    teacher: str | None = None
    map_powers: tuple[float, ...] | None = None
    teacher_powers: tuple[float, ...] | None = None
    k: int = 100
    gradient_factor: bool = False
    n_starts: int = 1
    others: dict[str, Any] = field(init=False, repr=False, compare=False)
    piecewise: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = _as_tuple(self.explainers, "explainers")
        object.__setattr__(self, "explainers", names)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"`explainers` must name distinct explainers, got {list(names)}")
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"`explainers` takes registered names, got {name!r}")
        resolved = {
            n: resolve_explainer(n, differentiable=True, name="explainers")[0] for n in names
        }
        others = {n: f for n, f in resolved.items() if n not in GRADIENT_FAMILY}
        object.__setattr__(self, "others", others)
        piecewise = any(explainer_spec(f).piecewise_constant for f in resolved.values())
        object.__setattr__(self, "piecewise", piecewise)
        if self.map_weights is not None:
            weights = tuple(float(w) for w in _as_tuple(self.map_weights, "map_weights"))
            object.__setattr__(self, "map_weights", weights)
            if len(weights) != len(names):
                raise ValueError(
                    f"`map_weights` must have one weight per explainer ({len(names)}), got "
                    f"{list(weights)}"
                )
            for w in weights:
                check_non_negative(w, "map_weights")
            if not any(weights):
                raise ValueError(f"`map_weights` must not be all zero, got {list(weights)}")
        for name in ("map_powers", "teacher_powers"):
            if getattr(self, name) is not None:
                powers = tuple(float(p) for p in _as_tuple(getattr(self, name), name))
                object.__setattr__(self, name, powers)
                if len(powers) != len(names) or any(not p >= 1 for p in powers):
                    raise ValueError(
                        f"`{name}` must have one exponent >= 1 per explainer ({len(names)}), "
                        f"got {list(powers)}"
                    )
        if self.teacher_powers is not None and self.teacher is None:
            raise ValueError(
                f"`teacher_powers` sharpens the teacher's maps and needs `teacher`, got "
                f"teacher=None with teacher_powers={list(self.teacher_powers)}"
            )
        super().__post_init__()
        check_choice(self.distance, "distance", MULTI_MAP_DISTANCES)
        check_positive(self.k, "k", integer=True)
        check_choice(self.start, "start", STARTS)
        check_choice(self.model_mode, "model_mode", MODEL_MODES)
        if self.layer is not None and not isinstance(self.layer, str):
            raise TypeError(f"`layer` must be a module name or None, got {self.layer!r}")
        check_teacher(self.teacher)
        check_positive(self.n_starts, "n_starts", integer=True)
        if not isinstance(self.gradient_factor, bool):
            raise TypeError(f"`gradient_factor` must be a bool, got {self.gradient_factor!r}")
        if self.gradient_factor and "input_x_gradient" not in names:
            raise ValueError(
                f"`gradient_factor` acts on input x gradient's map and needs "
                f"'input_x_gradient' among `explainers`, got {list(names)}"
            )

    @property
    def weights(self) -> tuple[float, ...]:
        """One weight per explainer (1 each when `map_weights` is None)."""
        return self.map_weights or (1.0,) * len(self.explainers)

    @property
    def powers(self) -> tuple[float, ...]:
        """One exponent per explainer (1 each when `map_powers` is None)."""
        return self.map_powers or (1.0,) * len(self.explainers)


def check_teacher(teacher: object) -> None:
    """`teacher` is None, the path of an existing file or a shipped checkpoint's name (as
    `load_classifier` reads it)."""
    if teacher is None:
        return
    if not isinstance(teacher, str):
        raise TypeError(f"`teacher` must be a checkpoint path or None, got {teacher!r}")
    if not os.path.isfile(resolve_file(teacher, "checkpoints", announce=None)):
        raise FileNotFoundError(f"`teacher` must be an existing checkpoint file, got {teacher!r}")


# Penalised model -> (teacher path, the teacher loaded into a copy of it), one load per pair.
_TEACHERS: weakref.WeakKeyDictionary[nn.Module, tuple[str, nn.Module]] = weakref.WeakKeyDictionary()


def teacher_model(model: nn.Module, path: str) -> nn.Module:
    """The frozen teacher of `model`: `path`'s weights loaded into a copy of `model`, in eval
    mode, its parameters not requiring grad; loaded once per model and path.

    Args:
        model: the penalised model (its architecture is copied, its weights are not used).
        path: a checkpoint of that architecture (see `MultiMapOptions.teacher`).

    Returns:
        The teacher, on the device of `model`'s first parameter.

    Raises:
        CheckpointError: (a RuntimeError) `path` does not fit `model`'s architecture.

    Example:
        >>> import os, tempfile
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
        >>> file = os.path.join(tempfile.mkdtemp(), "teacher.pt")
        >>> torch.save(net.state_dict(), file)
        >>> teacher = teacher_model(net, file)
        >>> teacher is not net, teacher.training, teacher is teacher_model(net, file)
        (True, False, True)
    """
    known = _TEACHERS.get(model)
    if known is not None and known[0] == path:
        return known[1]
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    teacher = load_classifier(path, model=copy.deepcopy(model), map_location=device)
    teacher.requires_grad_(False)
    _TEACHERS[model] = (path, teacher)
    return teacher


def _as_tuple(value: Any, name: str) -> tuple[Any, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise TypeError(f"`{name}` must be a list or tuple, got {value!r}")
    return tuple(value)


def gradient_family_maps(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    names: tuple[str, ...] | list[str],
    *,
    layer: str | None = None,
    create_graph: bool = False,
) -> dict[str, Tensor]:
    """Importance maps (B, H, W) of saliency, input x gradient and Grad-CAM (those in `names`)
    from one forward and one backward of the target logit.

    Equal to `importance_map` of `saliency`, `input_x_gradient` and `grad_cam(layer=layer)`
    computed one by one, at the cost of one of them.

    Args:
        model: classifier returning logits (B, num_classes); its modes are left as they are.
        inputs: images (B, C, H, W).
        target: class indices (B,).
        names: a subset of `GRADIENT_FAMILY`.
        layer: Grad-CAM's layer (None: the last `nn.Conv2d`, as `grad_cam`).
        create_graph: keep the graph (penalties, ascents).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from robust_train.explain import importance_map, input_x_gradient
        >>> net = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.Flatten(), nn.Linear(32, 3))
        >>> x, y = torch.rand(2, 1, 4, 4), torch.tensor([0, 1])
        >>> maps = gradient_family_maps(net, x, y, ["input_x_gradient", "grad_cam"])
        >>> torch.allclose(maps["input_x_gradient"], importance_map(input_x_gradient(net, x, y)))
        True
    """
    unknown = sorted(set(names) - set(GRADIENT_FAMILY))
    if unknown:
        raise ValueError(f"`names` must be some of {list(GRADIENT_FAMILY)}, got {unknown}")
    require_grad_mode("gradient_family_maps")
    return _family(model, inputs, target, names, layer, create_graph)[0]


def _family(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    names: tuple[str, ...] | list[str],
    layer: str | None,
    create_graph: bool,
) -> tuple[dict[str, Tensor], Tensor]:
    """`gradient_family_maps` and the target logit's gradient with respect to the input."""
    cam = "grad_cam" in names
    with torch.enable_grad():
        x, target = prepare_inputs(inputs, target)
        if not create_graph:
            x = x.detach().requires_grad_(True)
        if cam:
            layer_name, module = find_layer(model, layer, caller="gradient_family_maps")
            with capture_output(module, layer_name, caller="gradient_family_maps") as seen:
                logits = model(x)
            activation = one_activation(seen.outputs, layer_name, module, x.shape[0])
        else:
            logits = model(x)
        wrt = (x, activation) if cam else (x,)
        grads = torch.autograd.grad(
            target_scores(logits, target).sum(), wrt, create_graph=create_graph
        )
        out = {}
        if "saliency" in names:
            out["saliency"] = importance_map(grads[0])
        if "input_x_gradient" in names:
            out["input_x_gradient"] = importance_map(x * grads[0])
        if cam:
            weights = grads[1].mean(dim=(2, 3), keepdim=True)
            heat = clamp_positive((weights * activation).sum(dim=1, keepdim=True))
            heat = F.interpolate(heat, size=x.shape[-2:], mode="bilinear", align_corners=False)
            out["grad_cam"] = importance_map(heat)
    if create_graph:
        return out, grads[0]
    return {k: v.detach() for k, v in out.items()}, grads[0].detach()


def _maps(
    model: nn.Module, x: Tensor, target: Tensor, o: MultiMapOptions, create_graph: bool
) -> dict[str, Tensor]:
    """Every explainer's importance map at `x`, the gradient family from one backward."""
    return _maps_and_gradient(model, x, target, o, create_graph)[0]


def _maps_and_gradient(
    model: nn.Module, x: Tensor, target: Tensor, o: MultiMapOptions, create_graph: bool
) -> tuple[dict[str, Tensor], Tensor | None]:
    """`_maps` and the target logit's input gradient (None without a gradient-family map)."""
    family = [e for e in o.explainers if e in GRADIENT_FAMILY]
    out, grad = _family(model, x, target, family, o.layer, create_graph) if family else ({}, None)
    for name, explain in o.others.items():
        out[name] = importance_map(explain(model, x, target, create_graph=create_graph))
    return out, grad


def _weighted_distance(
    clean: dict[str, Tensor], pert: dict[str, Tensor], o: MultiMapOptions
) -> Tensor:
    """sum_e w_e d(clean_e, pert_e), per sample (B,)."""
    parts = [
        w * _distance(_power(clean[name], p), _power(pert[name], p), o)
        for name, w, p in zip(o.explainers, o.weights, o.powers, strict=True)
        if w
    ]
    return torch.stack(parts).sum(0)


def _distance(clean: Tensor, pert: Tensor, o: MultiMapOptions) -> Tensor:
    """The distance `o.distance` between clean and perturbed maps (B, H, W), per sample (B,)."""
    if o.distance not in TOPK_DISTANCES:
        return map_distance(clean, pert, o.distance)
    mass = topk_mass_distance(clean, pert, o.k, relative=o.distance.endswith("lost"))
    return mass + map_distance(clean, pert, "l1") if o.distance.startswith("l1") else mass


def topk_mass_distance(clean: Tensor, pert: Tensor, k: int, *, relative: bool = False) -> Tensor:
    """1 - the share of `pert`'s mass on the clean map's top-k set, per sample (B,); with
    `relative`, the share of the clean map's own mass on that set that `pert` lost.

    The set is the k largest positive pixels of `clean` (`topk_support`), a constant, as is the
    clean map's share: the value has a gradient through `pert` only. Without `relative` it is
    the top-k fragility attack's objective: 0 when every bit of the perturbed map's mass lies on
    the clean top-k set, 1 when none does, and a map is pushed to put all its mass on k pixels.
    With `relative` it is max(0, 1 - share(pert) / share(clean)): 0 for identical maps (and for
    a perturbed map more concentrated on the set than the clean one), 1 when none of the mass
    stays. An all-zero clean map defines no set; its value is 0.

    Args:
        clean: importance maps (B, H, W) at x (non-negative).
        pert: importance maps (B, H, W) at x' (non-negative).
        k: the size of the top-k set, an int >= 1.
        relative: measure the loss against the clean map's own share on the set.

    Returns:
        Values in [0, 1], shape (B,).

    Example:
        >>> clean = torch.tensor([[[3.0, 1.0], [0.0, 0.0]]])
        >>> moved = torch.tensor([[[1.0, 0.0], [1.0, 0.0]]])
        >>> [topk_mass_distance(clean, m, 2).item() for m in (clean, moved, clean.flip(1))]
        [0.0, 0.5, 1.0]
        >>> spread = torch.tensor([[[2.0, 1.0], [1.0, 0.0]]])
        >>> topk_mass_distance(spread, spread, 1).item(), topk_mass_distance(
        ...     spread, spread, 1, relative=True).item()
        (0.5, 0.0)
    """
    support = topk_support(clean.detach(), k)
    informative = support.flatten(1).any(1).to(pert.dtype)
    inside = (normalize_map(pert, "sum") * support).flatten(1).sum(1)
    if relative:
        kept = (normalize_map(clean.detach(), "sum") * support).flatten(1).sum(1)
        return (1 - inside / kept.clamp_min(1e-12)).clamp_min(0) * informative
    return (1 - inside) * informative


def _power(maps: Tensor, power: float) -> Tensor:
    """Importance maps (non-negative) raised to `power`; the maps themselves at power 1."""
    return maps if power == 1 else maps.clamp_min(0) ** power


@penalty_function(MultiMapOptions)
def multi_map_smoothness(call: PenaltyCall[MultiMapOptions]) -> Tensor:
    """Per-sample weighted sum of map distances between x and one x' for several explainers (B,).

    The uniform start x' is drawn with `generator`.
    """
    return _multi_map(call)[0]


def _multi_map(call: PenaltyCall[MultiMapOptions]) -> tuple[Tensor, bool]:
    """The penalty (B,) and whether the first ascent step had a zero direction everywhere, in
    the mode `model_mode` asks for."""
    mode, path = call.options.model_mode, call.options.teacher
    teacher = None if path is None else teacher_model(call.model, path)  # before any mode change
    modes = {"eval": eval_mode, "frozen": running_statistics_kept}.get(mode, nullcontext)
    with modes(call.model):
        return _multi_map_in_mode(call, teacher)


def _multi_map_in_mode(
    call: PenaltyCall[MultiMapOptions], teacher: nn.Module | None
) -> tuple[Tensor, bool]:
    model, target, o, x0 = call.model, call.target, call.options, call.inputs.detach()
    if teacher is None:
        clean, grad = _maps_and_gradient(model, x0, target, o, create_graph=True)
    else:  # the frozen teacher's clean maps: a constant the model's perturbed maps must keep
        clean, grad = _maps_and_gradient(teacher, x0, target, o, create_graph=False)
    powers = dict(zip(o.explainers, o.teacher_powers or (1.0,) * len(o.explainers), strict=True))

    def reference(x: Tensor, keep_graph: bool) -> dict[str, Tensor]:
        """The maps x''s maps are compared with: the clean ones (the teacher's sharpened), and
        with `gradient_factor` input x gradient's read at the moved input `x`."""
        out = {k: _power(v, powers[k]) for k, v in clean.items()}
        if o.gradient_factor and grad is not None:  # the family's gradient: always there then
            out["input_x_gradient"] = _power(importance_map(x * grad), powers["input_x_gradient"])
        return out if keep_graph and teacher is None else {k: v.detach() for k, v in out.items()}

    delta = _start(model, x0, target, o, call.generator, reference)
    flat = False
    for i in range(o.n_ascent_steps):
        delta = delta.detach().requires_grad_(True)
        with torch.enable_grad(), direction_surrogates(o.ascent_beta, o.piecewise):
            moved = (x0 + delta).clamp(0, 1)
            pert = _maps(model, moved, target, o, create_graph=True)
            (g,) = torch.autograd.grad(
                _weighted_distance(reference(moved, False), pert, o).sum(), delta
            )
        flat = flat or (i == 0 and not bool(g.any()))
        delta = project_offset(delta + o.step * step_direction(g, "linf"), o.radius, "linf")
        delta = delta.detach()
    moved = (x0 + delta).clamp(0, 1)
    pert = _maps(model, moved, target, o, create_graph=True)
    return _weighted_distance(reference(moved, True), pert, o), flat


def _start(
    model: nn.Module,
    x0: Tensor,
    target: Tensor,
    o: MultiMapOptions,
    generator: torch.Generator | None,
    reference: Callable[[Tensor, bool], dict[str, Tensor]],
) -> Tensor:
    """The ascent's start offset: one draw (a uniform point of the ball, or the vertex its
    signs give), or with `n_starts` > 1 per sample the draw where the weighted distance of the
    exact maps (no graph; normalisation statistics kept) is largest."""
    draws = []
    for _ in range(o.n_starts):
        delta = sample_in_ball(x0, o.radius, 1, "linf", generator)
        if o.start == "corner":
            delta = torch.where(delta >= 0, o.radius, -o.radius).to(delta)
        draws.append(delta)
    if len(draws) == 1:
        return draws[0]
    scores = []
    with running_statistics_kept(model):
        for delta in draws:
            moved = (x0 + delta).clamp(0, 1)
            pert = _maps(model, moved, target, o, create_graph=False)
            scores.append(_weighted_distance(reference(moved, False), pert, o).detach())
    best = torch.stack(scores).argmax(0)
    stacked = torch.stack(draws)
    return stacked[best, torch.arange(x0.shape[0], device=best.device)]


@register_penalty("multi_map")
@takes_options(MultiMapOptions)
class MultiMapSmoothness(PenaltyTerm):
    """Distance between the maps of several explainers at x and at one x' (see
    `multi_map_smoothness`): one term for every map a user looks at.

    Args:
        weight, name, seed: as every `PenaltyTerm` (and its cost options, `batch_fraction`
            and `every_n_steps`).
        **options: the fields of `MultiMapOptions`.

    Example:
        >>> term = MultiMapSmoothness(weight=20.0, explainers=["input_x_gradient", "grad_cam"],
        ...                           map_weights=[1.0, 0.5], batch_fraction=0.25)
        >>> term.options.weights, term
        ((1.0, 0.5), MultiMapSmoothness(name='multi_map', weight=20.0, batch_fraction=0.25))
    """

    double_backprop = True  # every map is taken with create_graph=True
    options_class = MultiMapOptions

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        call = PenaltyCall(model, inputs, target, self.options, self.generator)
        value, flat = _multi_map(call)
        if flat:
            self.warn_once(
                "the ascent direction is zero for the whole batch, so x' stays at its uniform "
                "start; set `ascent_beta` (the softplus surrogate) or n_ascent_steps=0"
            )
        return value
