"""The options of the evaluation engine, defined once (`EvaluationSettings`), and its presets.

`EvaluationSettings` holds the attack's options (`attack`, a `robust_train.attacks.AttackOptions`)
beside what the other parts need; it takes the attack's fields as keywords too
(`EvaluationSettings(epsilon=0.1, parts=...)`) and reads them through (`settings.epsilon`).
`robust-train evaluate`/`compare` derive their flags from its option fields (`option_fields`:
the attack's and its own, with their `help` metadata), the monitors their keyword arguments
(`RobustnessMonitor(epsilon=..., ...)`), and the literature protocols are presets of it
(`robust_train.evaluation.PROTOCOLS`).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from robust_train.attacks.ensemble import DEFAULT_BETAS
from robust_train.attacks.objectives.base import OBJECTIVES, get_objective
from robust_train.attacks.options import AttackOptions, check_linf_budget
from robust_train.core.options import option
from robust_train.core.validation import check_choice, check_non_negative, check_positive
from robust_train.explain.registry import is_differentiable, resolve_explainer
from robust_train.metrics.functional.fidelity import PERTURBATIONS

__all__ = ["ATTACK_FIELDS", "DEFAULT_ATTACKS", "MONITOR_DEFAULTS", "EvaluationSettings"]

DEFAULT_ATTACKS = ("random_sign", "topk", "mass_center", "targeted")
NORMALIZE = ("max", "none")


ATTACK_FIELDS = tuple(f.name for f in dataclasses.fields(AttackOptions))
T = TypeVar("T")


class AttackOption(Generic[T]):
    """A read-only attribute of `EvaluationSettings` that is the field of the same name of its
    composed `attack` (`settings.epsilon` is `settings.attack.epsilon`)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.__doc__ = f"`attack.{name}`."

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> AttackOption[T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        return self if obj is None else getattr(obj.attack, self.name)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class EvaluationSettings:
    """What the evaluation engine measures, on which images, with which settings.

    The attack's options are held in `attack` (an `AttackOptions`: epsilon, norm, step_size,
    n_steps, k, measure_k, n_restarts, noise_draws, direction, surrogate_beta,
    internal_batch_size); the constructor takes them as keywords too, over `attack` when both
    are given, and each reads through as an attribute (`settings.epsilon` is
    `settings.attack.epsilon`). None picks a default from the image size (`resolved`). Every
    attack runs all its candidate directions by default (`direction="all"`), each image keeping
    its worst result.

    Attributes:
        attack: the attack's options.
        parts: the evaluation parts to run, names in `robust_train.evaluation.PARTS`
            ("fragility", "lipschitz", "fidelity", ...).
        n_samples: held-out images evaluated (`robust-train evaluate` takes a seeded,
            class-stratified subset of the split of this size).
        explainers: the explainers every part measures: the attacks target each one's maps (an
            explainer that cannot be differentiated, such as meaningful perturbation, gets only
            the objectives that need no gradient, e.g. random signs), and the Lipschitz
            estimate, the fidelity curves and the certificates score each one. The default is
            the two of the gradient family that cost one backward each; integrated gradients
            multiplies every attack step by its `ig_steps` points, so it is opt-in (the "rar"
            protocol and `--explainers` name it).
        attacks: attack objectives (names in `robust_train.attacks.OBJECTIVES`); an objective
            that needs a region gets the top-left quarter of the image.
        correct_only: attack only the correctly classified images (the RAR/ART protocol); False
            attacks every image, with its predicted class as target.
        input_reference: where the fragility part runs, also attack the reference explanation
            "map = input" (`robust_train.explain.input_reference`, which knows nothing of the
            model) with every attack, on the same images, reported as
            `attack/input_reference/<objective>/<measure>` (the "input_reference" part, added
            to `parts` by `resolved`): every attack number can be read against it.
        ensemble: every gradient attack runs as the attack ensemble
            (`robust_train.attacks.ensemble_attack`: the attacked set equal to the scored set and
            twice it, the surrogate at each of `ensemble_betas`, the exact gradient where the map
            has one, at least one random start per member, then a random search of
            `search_queries` queries from the best point), each image keeping its worst result;
            the members and their cost are reported (`attack_cost`). False: one attack with the
            settings as given (the "fast" protocol; the monitors' default).
        ensemble_betas: softplus betas of the ensemble's surrogate members.
        search_queries: queries of the ensemble's gradient-free random search (0: none).
        lipschitz_radius: L_inf radius of the Lipschitz estimate; default epsilon.
        lipschitz_samples: explainer calls per image of the (random) Lipschitz search.
        lipschitz_search: "random" sampling in the ball or "gradient" ascent on the ratio.
        lipschitz_normalize: "max" divides each explanation by its largest |value| before the
            ratio (as Quantus does), so models whose gradients differ in scale compare by the
            shape of their explanations; "none" keeps raw explanations (Alvarez-Melis & Jaakkola).
        fidelity_steps: removal steps of each MIF/LIF curve.
        fidelity_perturbation: fill of removed pixels ("mean", "zero", "blur", "noise",
            "imputation"), in the fidelity curves and the faithfulness correlation.
        faithfulness_runs: random pixel subsets per image of the faithfulness correlation.
        faithfulness_subset: pixels per subset; None: one eighth of the image's pixels.
        ig_steps: integration points of integrated gradients (for every explainer whose spec
            ties an option to it: `ExplainerSpec.settings`).
        ig_baseline: value of the constant baseline image of integrated gradients (0.0: black).
        certify_sigma, certify_samples, certify_alpha, certify_radius, certify_attack_steps:
            the "certified" part (not run by default): noise, noisy copies per image, failure
            probability per image, L2 radius (None: sigma) and L2 attack steps (0: no attack).
        seed: all randomness (attacks, samples, stochastic explainers) is seeded from it.
        extra: free-form notes carried along (not used by the engine).
    """

    attack: AttackOptions = field(default_factory=AttackOptions, metadata={"cli": False})
    parts: tuple[str, ...] = option(("fragility", "lipschitz", "fidelity"), "evaluation parts run")
    n_samples: int = option(200, "held-out images evaluated")
    explainers: tuple[str, ...] = option(
        ("saliency", "input_x_gradient"),
        "explainers every part measures (attacked, Lipschitz, fidelity)",
    )
    attacks: tuple[str, ...] = option(DEFAULT_ATTACKS, "attack objectives")
    correct_only: bool = option(True, "attack only correctly classified images")
    input_reference: bool = option(
        True, "also attack the reference explanation 'map = input' with every attack"
    )
    ensemble: bool = option(
        True,
        "run every gradient attack as the attack ensemble (several attacked sets, "
        "surrogate betas, random starts, a random search), the worst per image kept",
    )
    ensemble_betas: tuple[float, ...] = option(
        DEFAULT_BETAS, "softplus betas of the ensemble's members"
    )
    search_queries: int = option(1000, "queries of the ensemble's random search (0: none)")
    lipschitz_radius: float | None = option(
        None, "L_inf radius of the Lipschitz estimate (default epsilon)"
    )
    lipschitz_samples: int = option(16, "explainer calls per image of the Lipschitz estimate")
    lipschitz_search: str = option("random", "Lipschitz search: random or gradient")
    lipschitz_normalize: str = option("max", "maps normalised before the ratio: max or none")
    fidelity_steps: int = option(20, "steps of each MIF/LIF curve")
    fidelity_perturbation: str = option("mean", "fill of removed pixels in the fidelity curves")
    faithfulness_runs: int = option(100, "random subsets per image of the faithfulness correlation")
    faithfulness_subset: int | None = option(
        None, "pixels per subset of the faithfulness correlation (default H*W/8)"
    )
    ig_steps: int = option(16, "integration points of integrated gradients")
    ig_baseline: float = option(0.0, "constant baseline image of integrated gradients")
    certify_sigma: float = option(0.25, "certified part: smoothing noise sigma")
    certify_samples: int = option(500, "certified part: noisy copies per image")
    certify_alpha: float = option(0.05, "certified part: failure probability per image")
    certify_radius: float | None = option(None, "certified part: L2 radius (default certify_sigma)")
    certify_attack_steps: int = option(20, "certified part: steps of the L2 attack (0: none)")
    seed: int = option(0, "seed of every random draw")
    extra: dict[str, Any] = field(default_factory=dict, metadata={"cli": False})

    if TYPE_CHECKING:  # the generated __init__, with the attack's fields as keywords too

        def __init__(self, *, attack: AttackOptions | None = None, **options: Any) -> None: ...

    def __post_init__(self) -> None:
        if not isinstance(self.attack, AttackOptions):
            raise TypeError(f"`attack` must be an AttackOptions, got {type(self.attack).__name__}")
        for name in ("n_samples", "lipschitz_samples", "fidelity_steps", "ig_steps"):
            check_positive(getattr(self, name), name, integer=True)
        self._check_certify()
        check_positive(self.faithfulness_runs, "faithfulness_runs", integer=True)
        check_non_negative(self.search_queries, "search_queries", integer=True)
        object.__setattr__(self, "ensemble_betas", _betas(self.ensemble_betas))
        if self.faithfulness_runs < 2:
            raise ValueError(f"`faithfulness_runs` must be >= 2, got {self.faithfulness_runs}")
        if self.faithfulness_subset is not None:
            check_positive(self.faithfulness_subset, "faithfulness_subset", integer=True)
        if self.lipschitz_radius is not None:
            check_linf_budget(self.lipschitz_radius, "lipschitz_radius")
        check_choice(self.lipschitz_normalize, "lipschitz_normalize", NORMALIZE)
        check_choice(self.lipschitz_search, "lipschitz_search", ("random", "gradient"))
        check_choice(self.fidelity_perturbation, "fidelity_perturbation", PERTURBATIONS)
        if isinstance(self.ig_baseline, bool) or not isinstance(self.ig_baseline, (int, float)):
            raise TypeError(f"`ig_baseline` must be a number, got {self.ig_baseline!r}")
        for name in ("parts", "explainers", "attacks"):
            object.__setattr__(self, name, _names(getattr(self, name), name))
        from robust_train.evaluation.parts.base import get_part

        for part in self.parts:
            get_part(part)
        for attack in self.attacks:
            OBJECTIVES.lookup(attack, "attacks")
        for explainer in self.explainers:
            resolve_explainer(explainer, differentiable=False, name="explainers")
        if "fragility" in self.parts:
            self._check_some_attack_runs()

    def _check_some_attack_runs(self) -> None:
        """An objective that follows a gradient needs a differentiable explainer: refuse
        settings under which the fragility part would attack nothing."""
        if any(not get_objective(a).needs_gradient for a in self.attacks):
            return
        if not any(is_differentiable(e) for e in self.explainers):
            names = [getattr(e, "__name__", e) for e in self.explainers]
            raise ValueError(
                f"`explainers` {names} cannot be differentiated, and every one of `attacks` "
                f"{list(self.attacks)} follows a gradient: no attack can run; add a gradient "
                "explainer (e.g. 'saliency') or the 'random_sign' attack"
            )

    def _check_certify(self) -> None:
        from robust_train.certify import check_alpha, check_sigma

        check_sigma(self.certify_sigma, "certify_sigma")
        check_alpha(self.certify_alpha, "certify_alpha")
        check_positive(self.certify_samples, "certify_samples", integer=True)
        check_non_negative(self.certify_attack_steps, "certify_attack_steps", integer=True)
        if self.certify_radius is not None:
            check_positive(self.certify_radius, "certify_radius")

    def resolved(self, height: int, width: int) -> EvaluationSettings:
        """A copy with every None replaced by its size-dependent default, checked on the size;
        settings already resolved for this size are returned as they are, so a resolution is
        done once and passed down (to the parts, and their `attack` to the attacks).

        Examples:
            >>> s = EvaluationSettings().resolved(28, 28)
            >>> s.epsilon, s.k, s.lipschitz_radius
            (0.1, 98, 0.1)
            >>> s.resolved(28, 28) is s
            True
        """
        if getattr(self, "_resolved_for", None) == (height, width):
            return self
        attack = self.attack.resolved(height, width)
        subset = self.faithfulness_subset
        if "faithfulness" in self.parts and subset is not None and subset >= height * width:
            raise ValueError(
                f"`faithfulness_subset` must be smaller than the {height * width} pixels of a "
                f"{height}x{width} image, got {subset}"
            )
        radius = self.lipschitz_radius if self.lipschitz_radius is not None else attack.epsilon
        parts = self.parts
        if self.input_reference and "fragility" in parts and "input_reference" not in parts:
            at = parts.index("fragility") + 1
            parts = (*parts[:at], "input_reference", *parts[at:])
        out = dataclasses.replace(self, attack=attack, lipschitz_radius=radius, parts=parts)
        object.__setattr__(out, "_resolved_for", (height, width))
        return out

    def attack_options(self) -> AttackOptions:
        """The attack's options (`attack`), for `robust_train.attacks.fragility_attack`."""
        return self.attack

    @classmethod
    def option_fields(cls) -> tuple[dataclasses.Field[Any], ...]:
        """The fields its constructor takes as options: the attack's, then its own (not
        `attack` itself), in the order the flags and the results list them."""
        own = tuple(f for f in dataclasses.fields(cls) if f.name != "attack")
        return (*dataclasses.fields(AttackOptions), *own)

    def as_dict(self) -> dict[str, Any]:
        """Every option by name, the attack's included (flat, as results.json records them).

        Examples:
            >>> d = EvaluationSettings(epsilon=0.2).as_dict()
            >>> d["epsilon"], d["n_samples"], "attack" in d
            (0.2, 200, False)
        """
        return {f.name: getattr(self, f.name) for f in self.option_fields()}

    epsilon = AttackOption[float | None]()
    norm = AttackOption[str]()
    step_size = AttackOption[float | None]()
    n_steps = AttackOption[int]()
    k = AttackOption[int | None]()
    measure_k = AttackOption[int | None]()
    n_restarts = AttackOption[int]()
    noise_draws = AttackOption[int]()
    direction = AttackOption[str]()
    surrogate_beta = AttackOption[float | None]()
    internal_batch_size = AttackOption[int | None]()


def _taking_attack_keywords(generated: Callable[..., None]) -> Callable[..., None]:
    """The dataclass's `__init__`, taking the attack's fields as keywords too: they are applied
    over `attack` (`AttackOptions` checks them, naming the field) before its own fields."""

    def __init__(self: Any, *args: Any, attack: AttackOptions | None = None, **kwargs: Any) -> None:
        given = {name: kwargs.pop(name) for name in ATTACK_FIELDS if name in kwargs}
        base = AttackOptions() if attack is None else attack
        if given and isinstance(base, AttackOptions):
            base = dataclasses.replace(base, **given)
        generated(self, *args, attack=base, **kwargs)

    own = inspect.signature(generated).parameters
    attack_params = [
        inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type
        )
        for f in dataclasses.fields(AttackOptions)
    ]
    kept = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own.values()]
    __init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [kept[0].replace(kind=inspect.Parameter.POSITIONAL_ONLY), *attack_params, *kept[1:]]
    )
    __init__.__qualname__ = generated.__qualname__
    __init__.__doc__ = generated.__doc__
    return __init__


EvaluationSettings.__init__ = _taking_attack_keywords(EvaluationSettings.__init__)  # type: ignore[method-assign]


def _betas(value: object) -> tuple[float, ...]:
    """A non-empty tuple of distinct positive (finite) betas (one number alone is accepted)."""
    items = (value,) if isinstance(value, (int, float)) else value
    if isinstance(items, (str, bytes)) or not isinstance(items, (tuple, list)) or not items:
        raise ValueError(f"`ensemble_betas` must be positive numbers, got {value!r}")
    for beta in items:
        check_positive(beta, "ensemble_betas")
    if len(set(items)) != len(items):
        raise ValueError(f"`ensemble_betas` has duplicates: {list(items)}")
    return tuple(float(b) for b in items)


def _names(value: object, name: str) -> tuple[Any, ...]:
    """A non-empty tuple of distinct names (or callables); one name alone is accepted."""
    items = (value,) if isinstance(value, str) or callable(value) else value
    if not isinstance(items, (tuple, list)):
        raise TypeError(f"`{name}` must be a name or a sequence of names, got {value!r}")
    if not items:
        raise ValueError(f"`{name}` is empty: give at least one")
    seen = [getattr(i, "__name__", i) for i in items]
    if len(set(map(str, seen))) != len(seen):
        raise ValueError(f"`{name}` has duplicates: {list(seen)}")
    return tuple(items)


# The monitors' preset: few, large steps and few images, to stay cheap during training (3 steps
# of 2 * epsilon / 3; the design notes compare it with a long attack); the noise baseline draws
# 3 times (3 maps, as many as the attack's steps).
MONITOR_DEFAULTS: dict[str, Any] = {
    "ensemble": False,  # one attack: the monitors' numbers track training, cheaply
    "n_samples": 16,
    "n_steps": 3,
    "noise_draws": 3,
    "attacks": ("random_sign", "topk", "mass_center"),
    "explainers": ("saliency",),
    # The reference is read in `robust-train evaluate`; a monitor that wants it lists the part:
    # RobustnessMonitor(parts=["fragility", "input_reference"]).
    "input_reference": False,
    "lipschitz_samples": 8,
    "fidelity_steps": 10,
}
