"""OverheadBudget: keep a monitor's share of the fit's wall time under a cap by skipping runs."""

from __future__ import annotations

import time
from typing import Any

from robust_train.core.validation import check_positive


class OverheadBudget:
    """Decides whether a scheduled evaluation fits in `max_overhead` x (time spent on the rest).

    The clock runs from `start()` (fit start). At each scheduled evaluation, the time since the
    last mark (training, validation, other callbacks: everything but this monitor) is added to
    `other_seconds`, and the evaluation runs when both hold, with `cost` the largest evaluation
    time so far (conservative: the first one includes one-off work, and a machine whose load
    changes makes costs vary):
    - `spent_seconds + cost <= max_overhead * other_seconds`: the share so far stays within the
      cap (this spaces evaluations evenly);
    - when the fit's progress is known, `spent_seconds + 2 * cost <= max_overhead *
      other_seconds / progress`: room is left for the last epoch's evaluation in the projected
      fit time.
    The first evaluation always runs (it measures the cost), and so does the last epoch of the
    fit (so the final model is always scored): a fit too short for even these two exceeds the
    cap. `max_overhead=None` runs every scheduled evaluation (the clock still runs).

    Args:
        max_overhead: largest share, e.g. 0.1 for 10 %; None: no cap.

    Examples:
        >>> budget = OverheadBudget(0.1)
        >>> budget.start()
        >>> budget.allows(is_last=False)  # nothing measured yet: the first one runs
        True
        >>> budget.record(seconds=5.0)
        >>> budget.allows(is_last=False), budget.allows(is_last=True)
        (False, True)
        >>> budget.other_seconds = 100.0  # 5 + 5 <= 0.1 * 100 ...
        >>> budget.allows(is_last=False)
        True
        >>> budget.allows(is_last=False, progress=0.9)  # ... but 5 + 2 * 5 > 0.1 * 100 / 0.9
        False
    """

    def __init__(self, max_overhead: float | None) -> None:
        if max_overhead is not None:
            check_positive(max_overhead, "max_overhead")
        self.max_overhead = max_overhead
        self.other_seconds = 0.0
        self.spent_seconds = 0.0
        self.last_cost: float | None = None
        self.max_cost = 0.0
        self._mark: float | None = None

    def start(self) -> None:
        """Start (or restart, after a resume) the clock."""
        self._mark = time.perf_counter()

    def allows(self, *, is_last: bool, progress: float | None = None) -> bool:
        """Account the time since the last mark to the rest of training; may this evaluation run?

        `progress`: share of the fit done (epochs done / max_epochs), None when unknown.
        """
        now = time.perf_counter()
        if self._mark is not None:
            self.other_seconds += now - self._mark
        self._mark = now
        if self.max_overhead is None or self.last_cost is None or is_last:
            return True
        cap, cost = self.max_overhead, self.max_cost
        if self.spent_seconds + cost > cap * self.other_seconds:
            return False
        if progress is not None and progress > 0:
            projected = self.other_seconds / min(progress, 1.0)
            return self.spent_seconds + 2 * cost <= cap * projected
        return True

    def record(self, seconds: float) -> None:
        """An evaluation took `seconds`: add it to the monitor's time and restart the clock."""
        self.spent_seconds += seconds
        self.last_cost = seconds
        self.max_cost = max(self.max_cost, seconds)
        self._mark = time.perf_counter()

    @property
    def share(self) -> float:
        """The monitor's share of the wall time so far (0 before anything was measured)."""
        total = self.spent_seconds + self.other_seconds
        return self.spent_seconds / total if total > 0 else 0.0

    def state_dict(self) -> dict[str, Any]:
        return {
            "other_seconds": self.other_seconds,
            "spent_seconds": self.spent_seconds,
            "last_cost": self.last_cost,
            "max_cost": self.max_cost,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.other_seconds = float(state.get("other_seconds", 0.0))
        self.spent_seconds = float(state.get("spent_seconds", 0.0))
        cost = state.get("last_cost")
        self.last_cost = None if cost is None else float(cost)
        self.max_cost = float(state.get("max_cost", self.last_cost or 0.0))
