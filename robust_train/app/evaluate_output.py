"""What `robust-train evaluate` and `compare` print and write beside their tables: the budget and
protocol, a verdict per explainer (`robust_train.evaluation.verdict`), and the one-model table
with its 95% intervals."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from robust_train.evaluation.verdict import budget_line, verdicts

__all__ = ["MEAN_COLUMN", "closing_lines", "evaluate_table"]

MEAN_COLUMN = "mean over the images"
_KEY = re.compile(r"^\| `([^`]+)`")


def evaluate_table(result: Mapping[str, Any]) -> str:
    """One model's table: the mean of each measure and its 95% interval over the images.

    Examples:
        >>> r = {"measures": {"accuracy": 0.5}, "intervals": {"accuracy": [0.1, 0.9]}}
        >>> print(evaluate_table(r).splitlines()[2])
        | `accuracy` ↑ | 0.500 | 0.100 to 0.900 |
    """
    from robust_train.app.report import summary_table

    intervals = result.get("intervals") or {}
    lines = summary_table({MEAN_COLUMN: dict(result)}).splitlines()
    out = [lines[0] + " 95% interval |", lines[1] + "---|"]
    for line in lines[2:]:
        found = _KEY.match(line)
        bounds = intervals.get(found.group(1)) if found else None
        if bounds and all(isinstance(b, (int, float)) and math.isfinite(b) for b in bounds):
            cell = f"{bounds[0]:.3f} to {bounds[1]:.3f}"
        else:
            cell = "-"
        out.append(f"{line} {cell} |")
    return "\n".join(out)


def closing_lines(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The budget and protocol (of the first result: every one ran with the same settings) and
    one verdict line per model and explainer.

    Examples:
        >>> m = {"attack/saliency/topk/topk_intersection": 0.95,
        ...      "attack/saliency/random_sign/topk_intersection": 0.97}
        >>> closing_lines({"a": {"measures": m}})[-1][:27]
        'verdict: saliency: robust ('
    """
    first = next(iter(results.values()), {})
    lines = []
    if first.get("settings"):
        lines.append(budget_line(first["settings"], first.get("n_images")))
    for name, result in results.items():
        prefix = "verdict: " if len(results) == 1 else f"verdict ({name}): "
        lines += [prefix + v.sentence() for v in verdicts(dict(result))]
    return lines
