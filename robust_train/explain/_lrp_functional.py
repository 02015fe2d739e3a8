"""LRP rules for operations a model's own `forward` writes as calls, not modules.

Zennit assigns rules to MODULES: a residual written `out + x`, an activation written
`F.softplus(h)` or a pooling written `h.mean((2, 3))` has no module, so the relevance would run
through it as the plain gradient, and the map would differ, without a word, from the map of the
same network written with `zennit.layer.Sum`, `nn.Softplus` or `nn.AdaptiveAvgPool2d`. Here a
`torch.overrides.TorchFunctionMode` sees every call of the forward (as DeepLIFT's does,
robust_train/explain/_rescale.py) and gives such a call the rule its module twin gets, by
running it AS that twin: a small module with the composite's rule registered on it, made for the
one call (so a call made twice gets two rules, as two modules would).

Outside any module that has a rule of its own (inside one, e.g. `nn.Softplus` calling
`F.softplus`, the module's rule governs and nothing is intercepted), calls on an ACTIVATION (a
tensor computed from the input; parameters and constants are not) become:

- an addition of two activations (`a + b`, `a += b`, `torch.add`, `Tensor.add_`; broadcast, then
  stacked): a `zennit.layer.Sum` with the sum rule (relevance split in proportion to the
  summands), as Zennit's canonizers do for torchvision's residual blocks;
- an elementwise activation (`F.relu`, `F.softplus`, `torch.sigmoid`, `x.tanh()`, `clamp`,
  in-place forms, ...), and a product or quotient of an activation by a constant or parameter of
  the same result shape (`h * 0.5`, `(x - mean) / std`): the pass rule (relevance unchanged), as
  activation modules and `Normalize` get; the epsilon rule of such a diagonal layer without bias
  is the pass rule;
- an average pool (`F.avg_pool2d`, `F.adaptive_avg_pool2d`, ...) and a sum or mean over
  non-batch dimensions (`h.mean((2, 3))`, `h.sum(1)`): the sum rule, as `AvgPool` modules get.

A functional linear layer (`F.linear`, `F.conv2d`, `F.conv_transpose2d`, `F.bilinear`,
`matmul` of an activation by a weight) or `F.batch_norm` on an activation has no rule that a call
can take (the composite's rule of a linear layer depends on its place in the network, a
BatchNorm is merged into the layer before it), so it is refused with an error that names the call
and the module to use. Everything else (a product of two activations such as a gate, a
subtraction, an addition of a bias, max pooling, indexing, concatenation, reshaping) keeps the
gradient, as in Zennit. In-place forms write their result into the tensor they were called on.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from zennit.core import Hook
from zennit.layer import Sum

__all__ = ["FunctionalRules"]

_Func = Callable[..., Any]
_KEEP = object()  # a call that keeps its gradient


def _existing(*names: str, module: Any = F) -> list[Any]:
    return [getattr(module, name) for name in names if hasattr(module, name)]


# Elementwise activations: the call the mode sees -> (out-of-place function, in place?).
_ACTIVATIONS: dict[Any, tuple[Any, bool]] = {}
for _f in _existing(
    "relu", "relu6", "hardtanh", "leaky_relu", "elu", "selu", "celu", "gelu", "silu", "mish",
    "softplus", "hardswish", "hardsigmoid", "logsigmoid", "softsign", "softshrink", "hardshrink",
    "tanhshrink", "threshold", "prelu", "rrelu", "sigmoid", "tanh",
):  # fmt: skip
    _ACTIVATIONS[_f] = (_f, False)
for _name in ("relu", "sigmoid", "tanh", "clamp", "clip", "hardtanh", "prelu", "rrelu"):
    for _owner in (torch, Tensor):
        if hasattr(_owner, _name):
            _ACTIVATIONS[getattr(_owner, _name)] = (getattr(torch, _name), False)
        if hasattr(_owner, _name + "_") and hasattr(torch, _name):
            _ACTIVATIONS[getattr(_owner, _name + "_")] = (getattr(torch, _name), True)
for _name in ("relu", "elu", "celu", "selu", "leaky_relu", "hardtanh", "rrelu", "threshold"):
    for _owner in (F, torch, torch._C._nn):
        if hasattr(_owner, _name + "_"):
            _ACTIVATIONS[getattr(_owner, _name + "_")] = (getattr(F, _name), True)

_ADDS = {torch.add: False, Tensor.add: False, Tensor.add_: True}
_MULS = {torch.mul: False, Tensor.mul: False, Tensor.mul_: True}
_DIVS = {torch.div: False, Tensor.div: False, Tensor.div_: True}
_POOLS = frozenset(
    _existing("avg_pool1d", "avg_pool2d", "avg_pool3d")
    + _existing("adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d")
)
_REDUCTIONS = frozenset((torch.sum, Tensor.sum, torch.mean, Tensor.mean))
_REFUSED: dict[Any, str] = {F.linear: "nn.Linear", F.batch_norm: "nn.BatchNorm2d"}
_REFUSED.update({f: "nn.Bilinear" for f in _existing("bilinear")})
for _d in (1, 2, 3):
    _REFUSED[getattr(F, f"conv{_d}d")] = f"nn.Conv{_d}d"
    _REFUSED[getattr(F, f"conv_transpose{_d}d")] = f"nn.ConvTranspose{_d}d"
_MATMULS = frozenset((torch.matmul, Tensor.matmul, torch.mm, Tensor.mm, torch.bmm, Tensor.bmm))
_MATMULS |= frozenset(_existing("__matmul__", "__rmatmul__", module=Tensor))


def _tensors(obj: Any) -> Iterator[Tensor]:
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


def _call_name(func: Any) -> str:
    name = getattr(func, "__name__", repr(func))
    owner = "Tensor." if isinstance(func, type(Tensor.add)) else "torch."
    return f"torch.nn.functional.{name}" if getattr(F, name, None) is func else owner + name


class _Call(nn.Module):
    """One functional call on activation `h` as a module: `func(*before, h, *after, **kwargs)`."""

    def __init__(self, func: _Func, before: tuple, after: tuple, kwargs: dict[str, Any]) -> None:
        super().__init__()
        self.func, self.before, self.after, self.kwargs = func, before, after, kwargs

    def forward(self, h: Tensor) -> Tensor:
        return self.func(*self.before, h, *self.after, **self.kwargs)


class FunctionalRules(TorchFunctionMode):
    """The mode of the module docstring, for one forward of `model` on `inputs`.

    `ruled` are the modules the composite gave a rule; `pass_rule` and `sum_rule` the rule
    templates (copied per call). Enter it around the forward, keep it until the backward is
    done, then `remove()` the rules of the calls (also on error).
    """

    def __init__(
        self,
        model: nn.Module,
        inputs: Tensor,
        ruled: set[nn.Module],
        *,
        pass_rule: Hook,
        sum_rule: Hook,
    ) -> None:
        super().__init__()
        self.templates, self.ruled = {"pass": pass_rule, "sum": sum_rule}, ruled
        self.model_handles = [
            handle
            for module in model.modules()
            for handle in (
                module.register_forward_pre_hook(self._enter_module),
                module.register_forward_hook(self._leave_module),
            )
        ]
        self.names = {module: name for name, module in model.named_modules()}
        self.stack: list[nn.Module] = []
        self.marks: dict[int, weakref.ref] = {}
        self.rule_handles: list[Any] = []
        self._mark(inputs)

    def _enter_module(self, module: nn.Module, args: Any) -> None:
        self.stack.append(module)

    def _leave_module(self, module: nn.Module, args: Any, output: Any) -> None:
        if self.stack and self.stack[-1] is module:
            self.stack.pop()

    def remove(self) -> None:
        """Remove every hook: the module trackers and the rules of the intercepted calls."""
        for handle in self.model_handles + self.rule_handles:
            handle.remove()
        self.model_handles, self.rule_handles, self.marks = [], [], {}

    def _mark(self, out: Any) -> None:
        for tensor in _tensors(out):
            self.marks[id(tensor)] = weakref.ref(tensor)

    def _active(self, obj: Any) -> bool:
        """Whether `obj` is an activation: a tensor computed from the input."""
        ref = self.marks.get(id(obj)) if isinstance(obj, Tensor) else None
        return ref is not None and ref() is obj

    def __torch_function__(
        self, func: _Func, types: Any, args: tuple = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        found = any(self._active(t) for t in _tensors((args, kwargs)))
        if found and not any(module in self.ruled for module in self.stack):
            out = self._ruled_call(func, args, kwargs)
            if out is not _KEEP:
                self._mark(out)
                return out
        out = func(*args, **kwargs)
        if found:
            self._mark(out)
        return out

    def _twin(self, rule: str, module: nn.Module, h: Tensor) -> Tensor:
        hook = self.templates[rule].copy()
        self.rule_handles.append(hook.register(module))
        return module(h)

    def _ruled_call(self, func: _Func, args: tuple, kwargs: dict[str, Any]) -> Any:
        """The call run as its module twin, or `_KEEP` where it keeps the gradient."""
        first: Any = args[0] if args else None
        if func in _ACTIVATIONS and self._active(first):
            target, inplace = _ACTIVATIONS[func]
            options = {k: v for k, v in kwargs.items() if k != "inplace"}
            out = self._twin("pass", _Call(target, (), args[1:], options), first)
            return _written(first, out, inplace or bool(kwargs.get("inplace", False)))
        if func in _ADDS and len(args) == 2 and all(self._active(a) for a in args):
            return self._add(func, args[0], args[1], kwargs)
        if func in _MULS or func in _DIVS:
            return self._scale(func, args, kwargs)
        if (func in _POOLS or (func in _REDUCTIONS and _per_sample(args, kwargs))) and (
            self._active(first)
        ):
            return self._twin("sum", _Call(func, (), args[1:], kwargs), first)
        if func in _REFUSED or (func in _MATMULS and len(args) == 2):
            if sum(self._active(a) for a in args[:2]) == 1:
                self._refuse(func, _REFUSED.get(func, "nn.Linear"))
        return _KEEP

    def _add(self, func: _Func, a: Tensor, b: Tensor, kwargs: dict[str, Any]) -> Any:
        alpha = kwargs.get("alpha", 1)
        if set(kwargs) - {"alpha"}:
            return _KEEP
        if alpha != 1:
            b = self._twin("pass", _Call(torch.mul, (), (alpha,), {}), b)
        summands = torch.stack(torch.broadcast_tensors(a, b), dim=-1)
        return _written(a, self._twin("sum", Sum(dim=-1), summands), _ADDS[func])

    def _scale(self, func: _Func, args: tuple, kwargs: dict[str, Any]) -> Any:
        """`h * c`, `c * h`, `h / c` with c a constant or parameter: the pass rule."""
        if len(args) != 2 or kwargs:
            return _KEEP
        a, b = args
        op, inplace = (torch.mul, _MULS[func]) if func in _MULS else (torch.div, _DIVS[func])
        if self._active(a) and not self._active(b):
            h, twin = a, _Call(op, (), (b,), {})
        elif op is torch.mul and self._active(b) and not self._active(a) and not inplace:
            h, twin = b, _Call(op, (a,), (), {})
        else:
            return _KEEP
        if torch.broadcast_shapes(_shape(a), _shape(b)) != h.shape:
            return _KEEP
        return _written(a, self._twin("pass", twin, h), inplace)

    def _refuse(self, func: _Func, module: str) -> None:
        where = self.stack[-1] if self.stack else None
        name = self.names.get(where) if where is not None else None
        place = f"`{name}`" if name else "the model"
        place = f" in the forward of {place} ({type(where).__name__})" if where is not None else ""
        raise ValueError(
            f"lrp: the model calls `{_call_name(func)}` on an activation{place}, outside any "
            "module with an LRP rule, so no rule applies to it (its relevance would be the plain "
            f"gradient, not the rule of `{module}`); write it as an `{module}` module"
        )


def _per_sample(args: tuple, kwargs: dict[str, Any]) -> bool:
    """A sum or mean over given dimensions that keep the batch dimension (not a full reduction)."""
    h = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if not isinstance(h, Tensor) or h.dim() < 2 or dim is None or isinstance(dim, str):
        return False
    dims = [dim] if isinstance(dim, int) else list(dim)
    return bool(dims) and all(d % h.dim() != 0 for d in dims)


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(value.shape) if isinstance(value, Tensor) else ()


def _written(target: Tensor, out: Tensor, inplace: bool) -> Tensor:
    """The result of an in-place call written into the tensor it was called on."""
    if not inplace:
        return out
    return target.copy_(out)
