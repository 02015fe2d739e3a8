"""What the penalties share, defined once: the options of an inner ascent and the public
per-sample function built from a penalty's checked implementation.

`AscentOptions` holds the settings of every penalty that looks for its perturbed point x' by a
few projected sign-ascent steps in a ball around x (radius, steps, step size, softplus surrogate
of the ascent); a penalty's own option set extends it with its own fields and, where they differ,
its own defaults. The resolved explainer is kept on the option set (`ExplainerOptions`), so a
term resolves it once, when it is built, and never again per step.

`penalty_function` turns a penalty's implementation, which takes its option set already checked,
into the public function that takes the options as keywords: one signature, one argument check
and one description of the common arguments for every penalty.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

import torch
from torch import Tensor, nn

from robust_train.attacks.options import check_linf_budget
from robust_train.core.options import build_options, takes_options
from robust_train.core.validation import check_non_negative, check_positive
from robust_train.explain.registry import ExplainerSpec, explainer_spec, resolve_explainer

__all__ = [
    "AscentOptions",
    "ExplainerOptions",
    "PenaltyCall",
    "PenaltyFunction",
    "penalty_function",
]

Explainer = Callable[..., Tensor]

OptionsT = TypeVar("OptionsT", covariant=True)


@dataclass(frozen=True)
class PenaltyCall(Generic[OptionsT]):
    """One computation of a penalty: what its implementation (`penalty_function`) is given.

    Attributes:
        model: the classifier being trained.
        inputs: images (B, C, H, W) in [0, 1].
        target: class indices (B,).
        options: the penalty's option set, checked.
        generator: CPU generator of the penalty's random draws (None: the global one).
        logits: the caller's clean forward model(inputs), or None.
    """

    model: nn.Module
    inputs: Tensor
    target: Tensor
    options: OptionsT
    generator: torch.Generator | None = None
    logits: Tensor | None = None


Implementation = Callable[[PenaltyCall[Any]], Tensor]


@dataclass(frozen=True)
class AscentOptions:
    """The inner ascent of a penalty, defined once: x' starts in a ball around x and moves by
    projected sign-ascent steps on the penalty's own value.

    Attributes:
        radius: radius of the ball of x' around x (pixel units of [0, 1] images; in L_inf, < 1).
        n_ascent_steps: sign-ascent steps before the final evaluation (0: x' is the start point).
            x' is detached.
        ascent_step_size: step of the ascent (None: `step`, radius / 2 unless a penalty says
            otherwise).
        ascent_beta: during the ascent only, the softplus beta of the surrogates that give a
            piecewise-constant map a direction (`robust_train.explain.clamp.
            direction_surrogates`); None: the model itself and the exact maps.
    """

    radius: float = 0.1
    n_ascent_steps: int = 0
    ascent_step_size: float | None = None
    ascent_beta: float | None = 10.0

    def __post_init__(self) -> None:
        self.check_radius()
        check_non_negative(self.n_ascent_steps, "n_ascent_steps", integer=True)
        check_positive(self.step, "ascent_step_size")
        if self.ascent_beta is not None:
            check_positive(self.ascent_beta, "ascent_beta")
            if not math.isfinite(self.ascent_beta):
                raise ValueError(
                    f"`ascent_beta` must be finite (or None), got {self.ascent_beta!r}"
                )

    def check_radius(self) -> None:
        """The check of `radius` (an L_inf budget below 1; a set with another ball overrides)."""
        check_linf_budget(self.radius, "radius")

    @property
    def step(self) -> float:
        """The ascent step: `ascent_step_size`, else radius / 2."""
        return self.radius / 2 if self.ascent_step_size is None else self.ascent_step_size


@dataclass(frozen=True)
class ExplainerOptions(AscentOptions):
    """An ascent on the map of one differentiable explainer, resolved once when the set is built.

    Attributes:
        explainer: any differentiable explainer or its registered name (saliency, grad_cam, ...).
    """

    explainer: str | Explainer = "saliency"
    explain: Explainer = field(init=False, repr=False, compare=False)
    spec: ExplainerSpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        explain = resolve_explainer(self.explainer, differentiable=True)[0]
        object.__setattr__(self, "explain", explain)
        object.__setattr__(self, "spec", explainer_spec(explain))


class PenaltyFunction(Protocol):
    """A penalty's public per-sample function (`penalty_function`); `checked` is its
    implementation, which takes the option set already checked (what the terms call)."""

    checked: Implementation
    options_class: type

    def __call__(
        self, model: nn.Module, inputs: Tensor, target: Tensor, **kwargs: Any
    ) -> Tensor: ...


ARGS = """Args:
    model: the classifier being trained.
    inputs: images (B, C, H, W) in [0, 1].
    target: class indices whose explanation or loss is penalised (the labels, in training).
{logits}    generator: CPU generator of the penalty's random draws (start point, samples).
    **options: the fields of `{options}`, checked before any work.

"""
LOGITS = """    logits: the clean forward model(inputs), when the caller already ran it; reused
        where the penalty can (the inputs must then require grad).
"""
SECTIONS = ("Returns:", "Raises:", "Examples:", "Example:")


def _document(doc: str | None, options_cls: type, uses_logits: bool) -> str:
    """`doc` (cleaned) with the common `Args` section inserted before its first other section."""
    text = inspect.cleandoc(doc or "")
    args = ARGS.format(logits=LOGITS if uses_logits else "", options=options_cls.__name__)
    lines = text.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if line.strip() in SECTIONS), len(lines))
    head = "".join(lines[:at]).rstrip("\n") + "\n\n"
    return head + args + "".join(lines[at:])


def penalty_function(
    options_cls: type, *, logits: bool = False
) -> Callable[[Implementation], PenaltyFunction]:
    """Decorator: the public per-sample function of a penalty from its implementation.

    The implementation takes a `PenaltyCall` whose `options` are an `options_cls` already
    checked; the function returned takes
    `(model, inputs, target, *, [logits=None,] generator=None, **options)`, lists the options in
    its signature (`takes_options`), builds and checks them (an unknown or bad option fails
    before any work, naming the function) and calls the implementation. It keeps the
    implementation's name, module and docstring, with the common `Args` inserted, and exposes the
    implementation as `.checked` for the terms, which build their options once.

    Args:
        options_cls: the dataclass of the penalty's options.
        logits: the function takes the caller's clean forward (`logits`).

    Returns:
        The decorator.

    Examples:
        >>> @dataclass(frozen=True)
        ... class Scale:
        ...     factor: float = 2.0
        >>> @penalty_function(Scale)
        ... def scaled(call):
        ...     '''factor * the sum of each image.'''
        ...     return call.options.factor * call.inputs.flatten(1).sum(1)
        >>> net = nn.Identity()
        >>> scaled(net, torch.ones(2, 1, 2, 2), torch.zeros(2), factor=0.5)
        tensor([2., 2.])
        >>> scaled.checked(PenaltyCall(net, torch.ones(1, 1, 1, 1), torch.zeros(1), Scale(3.0)))
        tensor([3.])
    """

    def decorate(impl: Implementation) -> PenaltyFunction:
        where = impl.__name__

        def with_logits(
            model: nn.Module,
            inputs: Tensor,
            target: Tensor,
            *,
            logits: Tensor | None = None,
            generator: torch.Generator | None = None,
            **options: Any,
        ) -> Tensor:
            o: Any = build_options(options_cls, options, where=where)
            return impl(PenaltyCall(model, inputs, target, o, generator, logits))

        def without_logits(
            model: nn.Module,
            inputs: Tensor,
            target: Tensor,
            *,
            generator: torch.Generator | None = None,
            **options: Any,
        ) -> Tensor:
            o: Any = build_options(options_cls, options, where=where)
            return impl(PenaltyCall(model, inputs, target, o, generator))

        public: Any = with_logits if logits else without_logits
        public.__name__, public.__qualname__ = impl.__name__, impl.__qualname__
        public.__module__ = impl.__module__
        public.__doc__ = _document(impl.__doc__, options_cls, logits)
        public.checked, public.options_class = impl, options_cls
        return cast(PenaltyFunction, takes_options(options_cls)(public))

    return decorate
