"""The one base of the torch function modes that replace some torch calls inside a block.

`CallInterceptor.intercept(func, args, kwargs)` returns what a call computes instead, or
`NOT_INTERCEPTED` to let it run as it is; the mode protocol (`__torch_function__`) is written once
here for the softplus surrogate of ReLUs and the rescale rule's two forwards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.overrides import TorchFunctionMode

__all__ = ["NOT_INTERCEPTED", "CallInterceptor"]

NOT_INTERCEPTED: Any = object()


class CallInterceptor(TorchFunctionMode):
    """A `TorchFunctionMode` whose `intercept` decides, call by call, what runs.

    Examples:
        >>> import torch
        >>> class Double(CallInterceptor):
        ...     def intercept(self, func, args, kwargs):
        ...         return 2 * func(*args, **kwargs) if func is torch.exp else NOT_INTERCEPTED
        >>> with Double():
        ...     torch.exp(torch.zeros(1)), torch.sin(torch.zeros(1))
        (tensor([2.]), tensor([0.]))
    """

    def intercept(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """What `func(*args, **kwargs)` computes inside the mode (`NOT_INTERCEPTED`: itself)."""
        return NOT_INTERCEPTED

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = self.intercept(func, args, kwargs)
        return func(*args, **kwargs) if out is NOT_INTERCEPTED else out
