"""The penalty-term base class and the registry that configs and `get_penalty` read.

A penalty is ONE file that defines its pure per-sample function and its `PenaltyTerm`, and
registers the term by name with `@register_penalty("name")`. The term checks its arguments at
construction with the same check the function runs, so a bad setting fails before any work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import torch
from torch import Tensor, nn

from robust_train._options import build_options
from robust_train._validation import check_choice, check_non_negative

__all__ = ["PENALTIES", "PenaltyTerm", "check_declared", "get_penalty", "register_penalty"]


class PenaltyTerm(nn.Module):
    """Base class: a weighted per-sample penalty on the explanations of `model` at `inputs`.

    Subclasses implement `penalty`, returning a tensor (B,). What a term can do is declared on
    it (class attributes, or properties where it follows an option), and every caller reads it
    there:

    - `double_backprop` (REQUIRED bool): whether the term differentiates through an input
      gradient (create_graph=True); robust_train._precision refuses such terms under 16-mixed
      and torch.compile. `register_penalty` and `RobustClassifier` refuse a term that does
      not say.
    - `full_precision`: a finite difference that must run in float32 under autocast.
    - `needs_input_grad`: the module runs its clean forward on inputs that require grad, so the
      term can reuse it (double backprop from the shared graph).
    - `replaces_task_loss`: the value already holds the task loss (e.g. CE at an adversarial
      example); RobustClassifier then drops the natural cross-entropy from the optimised loss.
    - `options_class` (optional): the dataclass of the term's options (defined once, shared with
      its function); `**options` given to the constructor are checked into `self.options`, over
      the class's `preset` defaults.
    - `test_options`: cheap arguments for the shared tests and benchmarks (few steps), for a
      term whose defaults are expensive; the tests read them here, no table elsewhere.

    Args:
        weight: multiplier of the batch mean of the penalty in the loss (>= 0).
        name: logged as train/penalty/<name>; default the registered name.
        seed: seed of the term's own CPU generator (random starts, directions, samples).
        **options: the fields of `options_class`, for a term that has one.
    """

    needs_input_grad: bool = False
    default_name: str = "penalty"
    replaces_task_loss: bool = False
    double_backprop: bool | None = None
    full_precision: bool = False
    options_class: ClassVar[type | None] = None
    preset: ClassVar[dict[str, Any]] = {}
    test_options: ClassVar[dict[str, Any]] = {}

    def __init__(
        self, weight: float = 1.0, name: str | None = None, seed: int | None = None, **options: Any
    ) -> None:
        super().__init__()
        check_non_negative(weight, "weight")
        self.weight = float(weight)
        self.name = name or self.default_name
        self.generator = torch.Generator().manual_seed(seed) if seed is not None else None
        if self.options_class is not None:
            self.options: Any = build_options(
                self.options_class, options, where=type(self).__name__, defaults=self.preset
            )
        elif options:
            raise TypeError(f"{type(self).__name__} got unknown arguments {sorted(options)}")

    def forward(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None = None
    ) -> Tensor:
        return self.penalty(model, inputs, target, logits)

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"name={self.name!r}, weight={self.weight}"


PENALTIES: dict[str, type[PenaltyTerm]] = {}

T = TypeVar("T", bound=type[PenaltyTerm])


def register_penalty(name: str) -> Callable[[T], T]:
    """Class decorator: register a `PenaltyTerm` subclass under `name` (its default log name).

    Example:
        >>> @register_penalty("zero_doc")
        ... class Zero(PenaltyTerm):
        ...     double_backprop = False
        ...
        ...     def penalty(self, model, inputs, target, logits):
        ...         return inputs.new_zeros(inputs.shape[0])
        >>> get_penalty("zero_doc").name
        'zero_doc'
        >>> _ = PENALTIES.pop("zero_doc")
    """

    def decorate(cls: T) -> T:
        if not (isinstance(cls, type) and issubclass(cls, PenaltyTerm)):
            raise TypeError(
                f"register_penalty({name!r}) decorates PenaltyTerm subclasses, got {cls!r}"
            )
        check_declared(cls)
        taken = PENALTIES.get(name)
        if taken is not None and _path(taken) != _path(cls):  # a re-import is not a clash
            raise ValueError(f"penalty name {name!r} is already registered by {PENALTIES[name]!r}")
        if "default_name" not in cls.__dict__:
            cls.default_name = name
        PENALTIES[name] = cls
        return cls

    return decorate


def check_declared(term: type[PenaltyTerm] | PenaltyTerm) -> None:
    """Refuse a term that does not declare `double_backprop` (what the precision checks read).

    Example:
        >>> class Silent(PenaltyTerm):
        ...     def penalty(self, model, inputs, target, logits):
        ...         return inputs.new_zeros(len(inputs))
        >>> check_declared(Silent)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: penalty Silent must declare `double_backprop = True` or `False` ...
    """
    cls = term if isinstance(term, type) else type(term)
    value = getattr(term, "double_backprop", None)
    if isinstance(value, property):  # a property on the class: decided per instance
        return
    if not isinstance(value, bool):
        raise TypeError(
            f"penalty {cls.__name__} must declare `double_backprop = True` or `False` (does it "
            "differentiate through an input gradient, i.e. take a gradient with "
            "create_graph=True?); robust_train._precision reads it to refuse 16-mixed precision "
            "and torch.compile, which would train such a term on wrong gradients"
        )


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def get_penalty(name: str, **kwargs: object) -> PenaltyTerm:
    """Build a registered penalty term by name (see `PENALTIES`), passing `kwargs`.

    Example:
        >>> get_penalty("curvature", weight=0.5)
        Curvature(name='curvature', weight=0.5)
    """
    check_choice(name, "penalty", PENALTIES)
    return PENALTIES[name](**kwargs)  # type: ignore[arg-type]
