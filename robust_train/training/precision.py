"""Penalties under mixed precision and torch.compile: what runs in float32, what is refused.

Two kinds of penalty behave differently at low precision:

- Finite differences (`Curvature`, both methods; `InputGradientNorm(method="finite_difference")`)
  subtract nearby outputs and divide by a small step. bfloat16 keeps about 3 significant digits,
  which a difference of nearby outputs divided by a small step does not survive (the value and
  its gradient lose their meaning, not just precision). These terms therefore run with autocast
  disabled, on their own float32 forward (`penalty_value`).
- Double backprop through an input gradient (`ExplanationSmoothness`, `LocalLipschitzPenalty`,
  `InputGradientNorm(method="double_backprop")`, `Curvature(method="gradient_difference")`).
  Under bf16 autocast they stay within a few percent of float32 and run at low precision. Under
  "16-mixed" the GradScaler scales only the outer loss, so the inner float16 input gradient is
  unscaled and can underflow; PyTorch's gradient-penalty recipe would scale every inner
  `autograd.grad` call, which the explainers do not do, so this combination is refused
  (`check_precision`) unless the term already runs in float32. torch.compile's AOTAutograd
  cannot differentiate a compiled graph twice ("does not currently support double backward"),
  so a compiled model with such a term is refused as well.

Each `PenaltyTerm` declares its kind (`double_backprop`, required; `full_precision`): these
checks read the declaration, never the term's class.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.regularizers.base import check_declared

HALF_TRUE = ("16-true", "bf16-true")


def needs_double_backprop(term: nn.Module) -> bool:
    """Whether the term differentiates through an input gradient (create_graph=True): what the
    term declares (`PenaltyTerm.double_backprop`, required).

    Examples:
        >>> from robust_train.regularizers import Curvature, InputGradientNorm
        >>> needs_double_backprop(InputGradientNorm()), needs_double_backprop(Curvature())
        (True, False)
    """
    check_declared(term)  # type: ignore[arg-type]
    return bool(term.double_backprop)


def needs_full_precision(term: nn.Module) -> bool:
    """Whether the term is a finite difference that must be computed in float32: what the term
    declares (`PenaltyTerm.full_precision`, default False).

    Examples:
        >>> from robust_train.regularizers import Curvature, ExplanationSmoothness
        >>> needs_full_precision(Curvature()), needs_full_precision(ExplanationSmoothness())
        (True, False)
    """
    return bool(getattr(term, "full_precision", False))


def penalty_value(
    term: nn.Module, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
) -> Tensor:
    """The term's per-sample penalty (B,) as float32.

    Under autocast a finite-difference term runs with autocast disabled and recomputes its clean
    forward in float32 (the shared low-precision `logits` would carry rounding errors larger than
    the differences it measures); every other term reuses `logits`.

    Examples:
        >>> from robust_train.regularizers import Curvature
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.Softplus(), nn.Linear(3, 2))
        >>> x, y = torch.rand(2, 1, 2, 2), torch.tensor([0, 1])
        >>> with torch.autocast("cpu", dtype=torch.bfloat16):
        ...     value = penalty_value(Curvature(seed=0), net, x, y, net(x))
        >>> value.dtype, torch.allclose(value, Curvature(seed=0)(net, x, y))
        (torch.float32, True)
    """
    device_type = inputs.device.type
    if needs_full_precision(term) and torch.is_autocast_enabled(device_type):
        with torch.autocast(device_type, enabled=False):
            return term(model, inputs, target, None).float()
    return term(model, inputs, target, logits).float()


def is_compiled(module: nn.Module) -> bool:
    """Whether `module` (a LightningModule passed to fit as torch.compile(module)) or any of its
    submodules is compiled with torch.compile."""
    if getattr(module, "_compiler_ctx", None) is not None:
        return True
    return any(hasattr(m, "_orig_mod") for m in module.modules())


def check_precision(trainer: Any, module: nn.Module, penalties: Iterable[nn.Module]) -> None:
    """Refuse, before training, combinations that would train on wrong penalty gradients.

    Raises ValueError for: a double-backprop term at low precision under "16-mixed" (or any
    precision plugin with a GradScaler); a finite-difference term under "16-true"/"bf16-true"
    (no float32 to fall back to); a double-backprop term with a compiled model. Terms of weight
    0 are never active and pass.
    """
    active = [t for t in penalties if float(getattr(t, "weight", 1.0)) > 0]
    precision = str(getattr(trainer, "precision", "32-true"))
    plugin = getattr(trainer, "precision_plugin", None)
    scaled = precision == "16-mixed" or getattr(plugin, "scaler", None) is not None
    refused = [_name(t) for t in active if needs_double_backprop(t) and not needs_full_precision(t)]
    if scaled and refused:
        raise ValueError(
            f"precision={precision!r} trains with a GradScaler, which does not scale the inner "
            f"input gradients that the penalties {refused} differentiate through (double "
            "backprop); float16 can underflow there. Use precision='bf16-mixed' (no scaler) or "
            "'32-true'; the zero-order curvature and finite-difference gradient norm run in "
            "float32 and are fine with 16-mixed."
        )
    refused = [_name(t) for t in active if needs_full_precision(t)]
    if precision in HALF_TRUE and refused:
        raise ValueError(
            f"precision={precision!r} holds the model in half precision, where the finite "
            f"differences of the penalties {refused} lose every significant digit; use "
            "precision='bf16-mixed' (they then run in float32) or '32-true'."
        )
    refused = [_name(t) for t in active if needs_double_backprop(t)]
    if refused and is_compiled(module):
        raise ValueError(
            f"the model is compiled with torch.compile, whose AOTAutograd does not support double "
            f"backward, which the penalties {refused} need; train without torch.compile, or use "
            "a first-order penalty (Curvature(method='zero_order'), "
            "InputGradientNorm(method='finite_difference'))."
        )


def _name(term: nn.Module) -> str:
    return str(getattr(term, "name", type(term).__name__))
