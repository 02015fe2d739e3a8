"""What a monitor evaluates, and how a diverged model is reported instead of crashing the fit.

A model whose weights hold NaN/inf (a diverged fit that `on_nonfinite="skip"` keeps going) has
no explanation to attack: the monitors then log how many non-finite values they met under
`robustness/nonfinite` and nothing that could read as robustness, warn once, and let the fit go
on. The same holds for an evaluation that meets non-finite explanations or scores on the way.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytorch_lightning as pl
import torch
from torch import nn

from robust_train.callbacks.figures import Report

NONFINITE_KEY = "robustness/nonfinite"
_COUNT = re.compile(r"(\d+) non-finite")


def evaluated_model(pl_module: pl.LightningModule) -> nn.Module:
    """The classifier a monitor explains: `pl_module.model` if it is a module, else `pl_module`."""
    model = getattr(pl_module, "model", None)
    return model if isinstance(model, nn.Module) else pl_module


def count_nonfinite(module: nn.Module) -> int:
    """Number of NaN/inf entries in the floating-point parameters and buffers of `module`.

    Examples:
        >>> net = nn.Linear(2, 1)
        >>> count_nonfinite(net)
        0
        >>> with torch.no_grad():
        ...     net.weight[0, 0] = float("nan")
        >>> count_nonfinite(net)
        1
    """
    tensors = [*module.parameters(), *module.buffers()]
    return sum(int((~torch.isfinite(t)).sum()) for t in tensors if t.is_floating_point())


def nonfinite_count(err: BaseException) -> int | None:
    """How many non-finite values an evaluation error reports; None for any other error.

    Examples:
        >>> nonfinite_count(ValueError("`maps` holds 192 non-finite value(s) (NaN or inf)"))
        192
        >>> nonfinite_count(ValueError("`k` must be > 0")) is None
        True
    """
    if isinstance(err, FloatingPointError):
        found = _COUNT.search(str(err))
        return int(found.group(1)) if found else 1
    if isinstance(err, ValueError) and "non-finite" in str(err):
        found = _COUNT.search(str(err))
        return int(found.group(1)) if found else 1
    return None


def guarded(evaluate: Callable[[], Report]) -> Report:
    """`evaluate()`, or, when it stops on non-finite values, a report holding only their count.

    Examples:
        >>> def diverged() -> Report:
        ...     raise ValueError("`maps` holds 192 non-finite value(s) (NaN or inf)")
        >>> guarded(diverged).scalars
        {'robustness/nonfinite': 192.0}
    """
    try:
        report = evaluate()
    except (ValueError, FloatingPointError) as err:
        count = nonfinite_count(err)
        if count is None:
            raise
        return Report(scalars={NONFINITE_KEY: float(count)})
    report.scalars.setdefault(NONFINITE_KEY, 0.0)
    return report


@contextmanager
def warnings_once(seen: set[tuple[str, int]]) -> Iterator[None]:
    """Pass on each warning raised inside once per place of origin (file, line) in `seen`.

    A monitor evaluates every epoch, and an attack that meets a dead or diverged model warns at
    each call; the first one says it all.

    Examples:
        >>> seen: set[tuple[str, int]] = set()
        >>> with warnings.catch_warnings(record=True) as passed_on:
        ...     warnings.simplefilter("always")
        ...     for _ in range(3):
        ...         with warnings_once(seen):
        ...             warnings.warn("the direction was zero", RuntimeWarning)
        >>> len(passed_on), len(seen)
        (1, 1)
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        where = (w.filename, w.lineno)
        if where not in seen:
            seen.add(where)
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
