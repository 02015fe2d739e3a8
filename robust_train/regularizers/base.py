"""The penalty-term base class and the registry that configs and `get_penalty` read.

A penalty is ONE file that defines its pure per-sample function and its `PenaltyTerm`, and
registers the term by name with `@register_penalty("name")`. The term checks its arguments at
construction with the same check the function runs, so a bad setting fails before any work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor, nn

from robust_train._validation import check_choice, check_non_negative

__all__ = ["PENALTIES", "PenaltyTerm", "get_penalty", "register_penalty"]


class PenaltyTerm(nn.Module):
    """Base class: a weighted per-sample penalty on the explanations of `model` at `inputs`.

    Subclasses implement `penalty`, returning a tensor (B,). Class attributes tell the module
    what the term needs:

    - `needs_input_grad`: the module runs its clean forward on inputs that require grad, so the
      term can reuse it (double backprop from the shared graph).
    - `replaces_task_loss`: the value already holds the task loss (e.g. CE at an adversarial
      example); RobustClassifier then drops the natural cross-entropy from the optimised loss.
    - `double_backprop` (optional bool): whether the term differentiates through an input
      gradient (read by robust_train._precision; default: `needs_input_grad`).

    Args:
        weight: multiplier of the batch mean of the penalty in the loss (>= 0).
        name: logged as train/penalty/<name>; default the registered name.
        seed: seed of the term's own CPU generator (random starts, directions, samples).
    """

    needs_input_grad: bool = False
    default_name: str = "penalty"
    replaces_task_loss: bool = False

    def __init__(
        self, weight: float = 1.0, name: str | None = None, seed: int | None = None
    ) -> None:
        super().__init__()
        check_non_negative(weight, "weight")
        self.weight = float(weight)
        self.name = name or self.default_name
        self.generator = torch.Generator().manual_seed(seed) if seed is not None else None

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
        taken = PENALTIES.get(name)
        if taken is not None and _path(taken) != _path(cls):  # a re-import is not a clash
            raise ValueError(f"penalty name {name!r} is already registered by {PENALTIES[name]!r}")
        if "default_name" not in cls.__dict__:
            cls.default_name = name
        PENALTIES[name] = cls
        return cls

    return decorate


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
