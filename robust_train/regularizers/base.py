"""The penalty-term base class and the registry that configs and `get_penalty` read.

A penalty is ONE file that defines its pure per-sample function and its `PenaltyTerm`, and
registers the term by name with `@register_penalty("name")`. The term checks its arguments at
construction with the same check the function runs, so a bad setting fails before any work.
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from robust_train.core.options import build_options
from robust_train.core.registry import Registry
from robust_train.core.validation import check_non_negative, check_positive
from robust_train.regularizers.options import PenaltyCall

__all__ = [
    "COST_OPTIONS",
    "PENALTIES",
    "PenaltyTerm",
    "check_cost_options",
    "check_declared",
    "get_penalty",
    "register_penalty",
]

# The options every term takes to cost less (`PenaltyTerm`'s "Cheaper" section).
COST_OPTIONS = ("every_n_steps", "batch_fraction")


class PenaltyTerm(nn.Module):
    """Base class: a weighted per-sample penalty on the explanations of `model` at `inputs`.

    Subclasses implement `penalty`, returning a tensor (B,). What a term can do is declared on
    it (class attributes, or properties where it follows an option), and every caller reads it
    there:

    - `double_backprop` (REQUIRED bool): whether the term differentiates through an input
      gradient (create_graph=True); robust_train.training.precision refuses such terms under
      16-mixed and torch.compile. `register_penalty` and `RobustClassifier` refuse a term that does
      not say.
    - `full_precision`: a finite difference that must run in float32 under autocast.
    - `needs_input_grad`: the module runs its clean forward on inputs that require grad, so the
      term can reuse it (double backprop from the shared graph).
    - `replaces_task_loss`: the value already holds the task loss (e.g. CE at an adversarial
      example); RobustClassifier then drops the natural cross-entropy from the optimised loss.
    - `options_class` (optional): the dataclass of the term's options (defined once, shared with
      its function); `**options` given to the constructor are checked into `self.options`, over
      the class's `preset` defaults.
    - `function` (optional): the term's public function (`robust_train.regularizers.options.
      penalty_function`); a term that has one and no `penalty` of its own computes it at
      `self.options` with `self.generator` (`compute`).

    Cheaper: every term (every subclass, whatever its own signature) also takes two keyword
    arguments, checked before the subclass's own construction:

    - `every_n_steps` (int >= 1, default 1): the penalty runs on every k-th call of the term
      (calls 0, k, 2k, ...; RobustClassifier calls each term once per training step) and returns
      zeros (B,) without any work on the others. It is SCALED: on the calls it runs, its value
      is multiplied by k, so its mean over steps, and its expected gradient, equal the full
      penalty's at the same `weight`. The call count is not saved in checkpoints: a resumed run
      starts its cycle again at 0.
    - `batch_fraction` (in (0, 1], default 1): the penalty runs on the first
      ceil(batch_fraction * B) images of each batch only (the training loader shuffles, so each
      step takes a different random subset) and returns one value per penalised image (m,),
      whose mean is the batch penalty (unscaled: the mean over fewer images estimates the same
      quantity). The subset gets its own forward (the caller's `logits` are not reused).

    A term that replaces the task loss (`replaces_task_loss`) refuses both: the natural
    cross-entropy is not optimised, so skipped steps or images would not train at all.

    Args:
        weight: multiplier of the batch mean of the penalty in the loss (>= 0).
        name: logged as train/penalty/<name>; default the registered name.
        seed: seed of the term's own CPU generator (random starts, directions, samples).
        **options: the fields of `options_class`, for a term that has one.

    Examples:
        >>> from robust_train.regularizers import get_penalty
        >>> term = get_penalty("gradnorm", every_n_steps=2, batch_fraction=0.5)
        >>> term
        InputGradientNorm(name='gradnorm', weight=1.0, every_n_steps=2, batch_fraction=0.5)
        >>> get_penalty("gradnorm", every_n_steps=0)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `every_n_steps` must be > 0, got 0
    """

    needs_input_grad: bool = False
    default_name: str = "penalty"
    replaces_task_loss: bool = False
    double_backprop: bool | None = None
    full_precision: bool = False
    options_class: ClassVar[type | None] = None
    preset: ClassVar[dict[str, Any]] = {}
    function: ClassVar[Any] = None

    def __init__(
        self, weight: float = 1.0, name: str | None = None, seed: int | None = None, **options: Any
    ) -> None:
        super().__init__()
        check_non_negative(weight, "weight")
        self.weight = float(weight)
        self.every_n_steps, self.batch_fraction = 1, 1.0
        self.calls = 0  # calls of forward so far (the `every_n_steps` cycle)
        self.computed = 0  # penalties computed so far (calls that did the work)
        self.warned: set[str] = set()  # the messages `warn_once` gave
        self.name = name or self.default_name
        self.generator = torch.Generator().manual_seed(seed) if seed is not None else None
        if self.options_class is not None:
            self.options: Any = build_options(
                self.options_class, options, where=type(self).__name__, defaults=self.preset
            )
        elif options:
            raise TypeError(f"{type(self).__name__} got unknown arguments {sorted(options)}")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give every subclass's `__init__` the cost options (`COST_OPTIONS`), in its signature
        too (what configs and `inspect.signature` read)."""
        super().__init_subclass__(**kwargs)
        own = "__init__" in cls.__dict__
        init = cls.__init__
        if not getattr(init, "takes_cost_options", False):
            cls.__init__ = _with_cost_options(init)  # type: ignore[method-assign]
        elif not own:  # its own copy, so that a decorator editing its signature edits its only
            cls.__init__ = _own_copy(init)  # type: ignore[method-assign]

    @property
    def reuses_clean_forward(self) -> bool:
        """Whether the module's clean forward must run on inputs that require grad for this
        term: `needs_input_grad` on the whole batch. With `batch_fraction` < 1 the term explains
        its own subset (a new leaf that requires grad), so the full batch's backward need not
        compute an input gradient nobody reads.

        Examples:
            >>> from robust_train.regularizers import ExplanationSmoothness
            >>> ExplanationSmoothness().reuses_clean_forward
            True
            >>> ExplanationSmoothness(batch_fraction=0.25).reuses_clean_forward
            False
        """
        return bool(self.needs_input_grad) and self.batch_fraction >= 1

    def forward(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None = None
    ) -> Tensor:
        k = self.every_n_steps
        if k > 1:
            call, self.calls = self.calls, self.calls + 1
            if call % k:
                return inputs.new_zeros(inputs.shape[0])
        if self.batch_fraction < 1:
            m = max(1, math.ceil(self.batch_fraction * inputs.shape[0]))
            grad = inputs.requires_grad or bool(self.needs_input_grad)
            inputs, target, logits = _first_rows(inputs, m, grad), target[:m], None
        value = self.penalty(model, inputs, target, logits)
        self.computed += 1
        return value * k if k > 1 else value

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        """The per-sample penalty (B,) of `inputs` (the work of one call of the term)."""
        return self.compute(model, inputs, target, logits, self.options)

    def compute(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None, options: Any
    ) -> Tensor:
        """The term's `function` at the checked `options` and the term's generator."""
        if self.function is None:
            raise NotImplementedError(f"{type(self).__name__} defines neither penalty nor function")
        call = PenaltyCall(model, inputs, target, options, self.generator, logits)
        return self.function.checked(call)

    def warn_once(self, message: str) -> None:
        """A RuntimeWarning naming the term, given once per term and message."""
        if message not in self.warned:
            self.warned.add(message)
            warnings.warn(f"penalty {self.name!r}: {message}", RuntimeWarning, stacklevel=3)

    def extra_repr(self) -> str:
        text = f"name={self.name!r}, weight={self.weight}"
        if self.every_n_steps != 1:
            text += f", every_n_steps={self.every_n_steps}"
        if self.batch_fraction != 1:
            text += f", batch_fraction={self.batch_fraction}"
        return text


def _first_rows(inputs: Tensor, m: int, requires_grad: bool) -> Tensor:
    """The first `m` images as a new leaf (requiring grad when asked)."""
    return inputs[:m].detach().requires_grad_(requires_grad)


def check_cost_options(
    term: type[PenaltyTerm], every_n_steps: object, batch_fraction: object
) -> None:
    """The one check of `every_n_steps` and `batch_fraction` (None: not given).

    Examples:
        >>> from robust_train.regularizers import AdversarialTraining
        >>> check_cost_options(AdversarialTraining, None, 0.5)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `batch_fraction` 0.5 is not available for AdversarialTraining: ...
    """
    if every_n_steps is not None:
        check_positive(every_n_steps, "every_n_steps", integer=True)
    if batch_fraction is not None:
        check_positive(batch_fraction, "batch_fraction")
        if not float(batch_fraction) <= 1.0:  # type: ignore[arg-type]
            raise ValueError(f"`batch_fraction` must lie in (0, 1], got {batch_fraction!r}")
    replaces = getattr(term, "replaces_task_loss", False)
    for name, value, default in (
        ("every_n_steps", every_n_steps, 1),
        ("batch_fraction", batch_fraction, 1),
    ):
        if value is not None and value != default and replaces is True:
            raise ValueError(
                f"`{name}` {value!r} is not available for {term.__name__}: it replaces the task "
                "loss (the natural cross-entropy is not optimised), so the skipped steps or "
                "images would not train at all"
            )


def _own_copy(init: Callable[..., None]) -> Callable[..., None]:
    """A pass-through of an inherited `__init__` with its own (copied) signature."""

    @functools.wraps(init)
    def copied(self: PenaltyTerm, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)

    copied.__signature__ = inspect.signature(init)  # type: ignore[attr-defined]
    copied.takes_cost_options = True  # type: ignore[attr-defined]
    return copied


def _with_cost_options(init: Callable[..., None]) -> Callable[..., None]:
    """`init` taking `every_n_steps` and `batch_fraction` too (checked before it runs)."""

    @functools.wraps(init)
    def wrapped(
        self: PenaltyTerm,
        *args: Any,
        every_n_steps: int | None = None,
        batch_fraction: float | None = None,
        **kwargs: Any,
    ) -> None:
        check_cost_options(type(self), every_n_steps, batch_fraction)
        init(self, *args, **kwargs)
        if every_n_steps is not None:
            self.every_n_steps = int(every_n_steps)
        if batch_fraction is not None:
            self.batch_fraction = float(batch_fraction)

    signature = inspect.signature(init)
    params = list(signature.parameters.values())
    position = next((i for i, p in enumerate(params) if p.kind is p.VAR_KEYWORD), len(params))
    added = [
        inspect.Parameter(
            "every_n_steps", inspect.Parameter.KEYWORD_ONLY, default=1, annotation="int"
        ),
        inspect.Parameter(
            "batch_fraction", inspect.Parameter.KEYWORD_ONLY, default=1.0, annotation="float"
        ),
    ]
    added = [p for p in added if p.name not in signature.parameters]
    wrapped.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=params[:position] + added + params[position:]
    )
    wrapped.takes_cost_options = True  # type: ignore[attr-defined]
    return wrapped


PENALTIES: Registry[type[PenaltyTerm]] = Registry("PENALTIES", "penalty")


def check_declared(term: type[PenaltyTerm] | PenaltyTerm) -> None:
    """Refuse a term that does not declare `double_backprop` (what the precision checks read).

    Examples:
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
            "create_graph=True?); robust_train.training.precision reads it to refuse 16-mixed "
            "precision and torch.compile, which would train such a term on wrong gradients"
        )


# The registered name is the term's default log name, unless the class sets its own.
register_penalty = PENALTIES.registrar(
    PenaltyTerm, attribute="default_name", keep_own=True, check=check_declared
)


def get_penalty(name: str, **kwargs: object) -> PenaltyTerm:
    """Build a registered penalty term by name (see `PENALTIES`), passing `kwargs`.

    Examples:
        >>> get_penalty("curvature", weight=0.5)
        Curvature(name='curvature', weight=0.5)
    """
    return PENALTIES.lookup(name, "penalty")(**kwargs)  # type: ignore[arg-type]
