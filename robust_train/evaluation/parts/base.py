"""The base class of evaluation parts and the registry every caller reads.

A part measures one thing on a batch of held-out images (the fragility attacks, the Lipschitz
estimate, the fidelity curves, ...) and returns PER-IMAGE values under the project's key scheme
(`robust_train.evaluation.measures`). The evaluation engine runs the parts that the settings
name and reduces their values; `robust-train evaluate`/`compare`, the monitors (callbacks), the
demo and the leaderboard all measure through it, so a new part is ONE file: a subclass of
`EvaluationPart` registered with `@register_part("name")` (plus `register_measure` for any new
measure it reports). `EvaluationSettings(parts=(..., "name"))` and
`RobustnessMonitor(parts=[..., "name"])` then run it, and every report shows its keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from torch import Tensor, nn

from robust_train.core.registry import Registry
from robust_train.evaluation.cost import unit_costs
from robust_train.evaluation.measures import part_key
from robust_train.explain import bind_settings, explainer_name

__all__ = [
    "PARTS",
    "AttackExamples",
    "Curve",
    "EvaluationPart",
    "ExplainerMap",
    "MapPart",
    "PartOutput",
    "get_part",
    "register_part",
]


@dataclass
class AttackExamples:
    """A few attacked images: rows of (input, clean map, attacked input, attacked map)."""

    title: str
    inputs: Tensor
    clean_maps: Tensor
    adversarial: Tensor
    attacked_maps: Tensor
    scores: Tensor  # per row: top-k intersection, listed in the caption

    @property
    def caption(self) -> str:
        """The title, the column order and each row's top-k intersection."""
        scores = ", ".join(f"{float(v):.2f}" for v in self.scores)
        return (
            f"{self.title}; columns: input | clean map | attacked input | attacked map; "
            f"top-k intersection per row: {scores}"
        )


@dataclass
class Curve:
    """Per-image curves over a shared x axis (e.g. MIF/LIF fidelity curves).

    Attributes:
        xs: the x values (S,).
        xname: what x is.
        lines: line name -> per-image values (B, S); the engine and the monitors average them.
    """

    xs: list[float]
    xname: str
    lines: dict[str, Tensor]


@dataclass
class PartOutput:
    """What one part measured on a batch: per-image values (B,) by key (NaN: not measured for
    that image), curves, a few examples for figures (`robust_train.callbacks.figures`), and
    JSON-ready notes by topic (e.g. "attack_cost": what each attack ran and what it cost)."""

    values: dict[str, Tensor] = field(default_factory=dict)
    curves: dict[str, Curve] = field(default_factory=dict)
    examples: dict[str, AttackExamples] = field(default_factory=dict)
    notes: dict[str, dict[str, Any]] = field(default_factory=dict)


class EvaluationPart:
    """One measured thing, bound to resolved settings (`EvaluationSettings.resolved`).

    Subclasses set `name` (by `register_part`), and implement `keys` (every key `run` reports,
    known before any work: the monitors check at fit start that no two of them log one key) and
    `run`. Parts run with the model in eval mode and gradients enabled.

    Args:
        settings: resolved evaluation settings (size-dependent defaults filled in).
    """

    name: ClassVar[str] = ""

    def __init__(self, settings: Any) -> None:
        self.settings = settings  # an EvaluationSettings (which imports this module)
        self.progress = False  # set by the engine: show progress inside long steps
        # set by the engine: `advance(units)` reports work done (units per image, as `work`)
        self.advance: Callable[[float], None] = _ignore
        # set by the engine: ground-truth masks (B, H, W) of the evidence, when the data has them
        # (the attack parts then score their maps' localisation: `parts.ground_truth`)
        self.masks: Tensor | None = None

    def work(self) -> float:
        """Estimated work per image, in attack steps of a one-pass map (each kind of work
        weighed by its passes: `robust_train.evaluation.cost`), known before any work: the
        engine's overall progress and time left weigh the parts by it. The default is one map
        per explainer; a part whose cost grows with a setting (steps, samples) says so. A part
        may call `self.advance(units)` as it goes; whatever it has not reported is counted when
        it returns."""
        return float(sum(unit_costs(e, self.settings).map for e in self.settings.explainers))

    def keys(self) -> tuple[str, ...]:
        """The measure keys this part reports."""
        raise NotImplementedError

    def explainer_keys(
        self, measures: tuple[str, ...], explainers: tuple[Any, ...] | None = None
    ) -> tuple[str, ...]:
        """`<part>/<explainer>/<measure>` for every explainer (default: the settings'
        `explainers`) and measure, explainer by explainer."""
        chosen = self.settings.explainers if explainers is None else explainers
        return tuple(part_key(self.name, explainer_name(e), m) for e in chosen for m in measures)

    def explanations(
        self, model: nn.Module, inputs: Tensor, predictions: Tensor
    ) -> Iterator[tuple[str, Tensor]]:
        """(name, detached explanation of the predicted class) of every explainer of the
        settings, bound to the settings (`robust_train.explain.bind_settings`)."""
        for explainer in self.settings.explainers:
            explain = bind_settings(explainer, self.settings)
            yield explainer_name(explainer), explain(model, inputs, predictions).detach()

    def curve_keys(self) -> dict[str, tuple[int, tuple[str, ...]]]:
        """Curve key -> (number of points, line names) of the curves it reports (default none)."""
        return {}

    def run(
        self, model: nn.Module, inputs: Tensor, labels: Tensor, predictions: Tensor
    ) -> PartOutput:
        """Measure on `inputs` (B, C, H, W) with their labels and the model's predictions."""
        raise NotImplementedError


@dataclass
class ExplainerMap:
    """One explainer's detached map of the predicted class, and what it was computed on."""

    explainer: str
    explanation: Tensor
    model: nn.Module
    inputs: Tensor
    predictions: Tensor


class MapPart(EvaluationPart):
    """A part that measures each explainer's clean map of the predicted class on its own.

    The loop over the settings' explainers is here; a subclass names its measures
    (`map_measures`, reported as `<part>/<explainer>/<measure>`) and fills in one explainer's
    values in `measure`.
    """

    map_measures: ClassVar[tuple[str, ...]] = ()

    def keys(self) -> tuple[str, ...]:
        return self.explainer_keys(self.map_measures)

    def run(
        self, model: nn.Module, inputs: Tensor, labels: Tensor, predictions: Tensor
    ) -> PartOutput:
        out = PartOutput()
        for name, explanation in self.explanations(model, inputs, predictions):
            self.measure(ExplainerMap(name, explanation, model, inputs, predictions), out)
        return out

    def measure(self, item: ExplainerMap, out: PartOutput) -> None:
        """Put the values (and curves) of one explainer's map into `out`."""
        raise NotImplementedError


def _ignore(units: float) -> None:
    """The default `advance`: no progress is shown."""


PARTS: Registry[type[EvaluationPart]] = Registry("PARTS", "part")

P = TypeVar("P", bound=type[EvaluationPart])


def register_part(name: str) -> Callable[[P], P]:
    """Class decorator: register an `EvaluationPart` subclass under `name`.

    Examples:
        >>> @register_part("doc_part")
        ... class DocPart(EvaluationPart):
        ...     def keys(self):
        ...         return ("doc_part/saliency/accuracy",)
        >>> get_part("doc_part").name
        'doc_part'
        >>> _ = PARTS.pop("doc_part")
    """
    return PARTS.class_decorator(name, EvaluationPart)


def get_part(name: object) -> type[EvaluationPart]:
    """The part class registered as `name`; the error lists the registered names.

    Examples:
        >>> get_part("lipschitz").name
        'lipschitz'
    """
    return PARTS.lookup(name, "parts")
