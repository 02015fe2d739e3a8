"""The one record of a training run's per-epoch values: key -> [(epoch, value), ...].

The monitors keep what they measured in one, the training module keeps val/acc in one, and a
checkpoint carries their union in the JSON-ready form of `History.state` (key ->
[[epoch, value], ...]), which `History.from_state` reads back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["History"]


class History(dict[str, list[tuple[int, float]]]):
    """Per-epoch values by key, in the order they were added: key -> [(epoch, value), ...].

    Examples:
        >>> h = History()
        >>> h.add_all(0, {"val/acc": 0.5, "robustness/topk": 0.7})
        >>> h.add("val/acc", 1, 0.75)
        >>> h["val/acc"]
        [(0, 0.5), (1, 0.75)]
        >>> History.from_state(h.state()) == h
        True
        >>> History.merged([History.from_state({"a": [[0, 1.0]]}), {"b": [], "a": [(1, 2.0)]}])
        {'a': [(1, 2.0)]}
    """

    def add(self, key: str, epoch: int, value: float) -> None:
        """Append (epoch, value) to `key`'s points."""
        self.setdefault(str(key), []).append((int(epoch), float(value)))

    def add_all(self, epoch: int, scalars: Mapping[str, Any]) -> None:
        """`add` every key -> value of `scalars` at `epoch`."""
        for key, value in scalars.items():
            self.add(key, epoch, value)

    def state(self) -> dict[str, list[list[float]]]:
        """The JSON-ready form (key -> [[epoch, value], ...]), keys without points left out."""
        return {k: [[e, v] for e, v in points] for k, points in self.items() if points}

    @classmethod
    def from_state(cls, state: Mapping[str, Iterable[Iterable[Any]]] | None) -> History:
        """The history of a `state` (or an empty one for None)."""
        out = cls()
        for key, points in (state or {}).items():
            out[str(key)] = [(int(e), float(v)) for e, v in points]
        return out

    @classmethod
    def merged(cls, histories: Iterable[Mapping[str, Iterable[Iterable[Any]]]]) -> History:
        """One history of several: a later one's points of a key replace an earlier one's;
        keys without points are left out."""
        out = cls()
        for history in histories:
            out.update({k: v for k, v in cls.from_state(history).items() if v})
        return out
