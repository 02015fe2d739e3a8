"""OverheadBudget: keep a monitor's share of the fit's wall time under a cap by skipping runs
and by shrinking them to the images that fit."""

from __future__ import annotations

import time
from typing import Any

from robust_train.core.validation import check_positive

FLOOR_SECONDS = 0.5
"""The last evaluation of a fit takes one image even past the cap when one costs at most this:
a short fit of a small model still logs its robustness once."""


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
    An evaluation that runs takes only the images that fit in the room left (`images`, from
    the largest cost per image measured so far). Before the first evaluation no cost is
    measured: the monitors set `per_image` from an estimate (one timed attack step times the
    evaluation's work per image, the step's seconds counted by `spend`) and plan that evaluation
    like any other, so it is skipped or shrunk when it would exceed the cap (a monitor that
    cannot estimate times one image and takes as many more as then fit). The last epoch of the
    fit is evaluated whenever
    an image fits, on as many as fit (and on one image when one costs at most `FLOOR_SECONDS`,
    so that a short fit of a small model logs its robustness once); when none does, it is
    skipped too, and the final model is
    left to `robust-train evaluate`. `max_overhead=None` runs every scheduled evaluation on
    every image (the clock still runs).

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
        self.per_image: float | None = None  # the largest seconds per image so far
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

    def record(self, seconds: float, n_images: int | None = None) -> None:
        """An evaluation (of `n_images` images, when given) took `seconds`: add it to the
        monitor's time, update the cost per image, and restart the clock."""
        self.spent_seconds += seconds
        self.last_cost = seconds
        self.max_cost = max(self.max_cost, seconds)
        if n_images:
            self.per_image = max(self.per_image or 0.0, seconds / n_images)
        self._mark = time.perf_counter()

    def spend(self, seconds: float) -> None:
        """Count `seconds` just spent outside an evaluation (a probe) as the monitor's, and
        restart the clock."""
        self.spent_seconds += seconds
        self._mark = time.perf_counter()

    def images(self, n_images: int, *, is_last: bool, progress: float | None = None) -> int:
        """How many of `n_images` the evaluation now due may take (0: skip it), once `allows`
        (or `is_last`) let it run and a cost per image is known (`record(..., n_images)`).

        The images that fit in the room the cap leaves: `max_overhead * other_seconds -
        spent_seconds` (and, when the fit's progress is known and this is not the last
        evaluation, half of the room in the projected fit time, so the last one finds some);
        the last evaluation takes any number that fits, any other one is skipped when fewer
        than a quarter of the images fit. With no cap, or no cost measured yet, all of them.

        Examples:
            >>> budget = OverheadBudget(0.1)
            >>> budget.record(seconds=2.0, n_images=4)  # 0.5 s per image
            >>> budget.other_seconds = 40.0  # room: 0.1 * 40 - 2 = 2 s, four images
            >>> budget.images(16, is_last=False), budget.images(16, is_last=True)
            (4, 4)
            >>> budget.other_seconds = 25.0  # room: 0.5 s, one image: too few but for the last
            >>> budget.images(16, is_last=False), budget.images(16, is_last=True)
            (0, 1)
            >>> budget.other_seconds = 22.0  # room: 0.2 s, not one image, but one image is cheap
            >>> budget.images(16, is_last=True)
            1
            >>> budget.per_image = 2.0  # one image costs more than FLOOR_SECONDS: none
            >>> budget.images(16, is_last=True)
            0
        """
        if self.max_overhead is None or self.per_image is None:
            return n_images
        room = self.max_overhead * self.other_seconds - self.spent_seconds
        if progress is not None and progress > 0 and not is_last:
            projected = self.max_overhead * self.other_seconds / min(progress, 1.0)
            room = min(room, (projected - self.spent_seconds) / 2)
        fit = max(int(room / self.per_image), 0) if room > 0 else 0
        if is_last:
            floor = 1 if self.per_image <= FLOOR_SECONDS else 0  # a cheap model is always seen
            return min(n_images, max(fit, floor))
        return min(n_images, fit) if fit >= max(1, n_images // 4) else 0

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
            "per_image": self.per_image,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.other_seconds = float(state.get("other_seconds", 0.0))
        self.spent_seconds = float(state.get("spent_seconds", 0.0))
        cost = state.get("last_cost")
        self.last_cost = None if cost is None else float(cost)
        self.max_cost = float(state.get("max_cost", self.last_cost or 0.0))
        per_image = state.get("per_image")
        self.per_image = None if per_image is None else float(per_image)
