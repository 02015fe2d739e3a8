"""The base class of fragility objectives and the registry every caller reads.

An objective (Ghorbani, Abid & Zou, "Interpretation of Neural Networks is Fragile", AAAI 2019)
says what the attack ascends and how its iterates are ranked. A new objective is one file in
this package: a subclass of `FragilityObjective` decorated with `@register_objective("name")`.
`fragility_attack`, the evaluation suite, the report, the monitors and `ExplanationFragility`
all read `OBJECTIVES`, so nothing else has to change (see CONTRIBUTING.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor

from robust_train.core.balls import random_in_ball
from robust_train.core.registry import Registry
from robust_train.explain.maps import normalize_map
from robust_train.explain.ranked_reference import RankedReference
from robust_train.explain.similarity import topk_mask

if TYPE_CHECKING:
    from robust_train.attacks.options import AttackOptions

__all__ = ["OBJECTIVES", "FragilityObjective", "get_objective", "register_objective"]

Score = tuple[Tensor, Tensor]


class FragilityObjective:
    """Attack objective bound to one batch of clean maps (from the original model).

    Class attributes and class methods declare what the objective needs; the attack reads them:

    - `needs_gradient`: its direction is the sign of the gradient of `ascent_value` (through the
      explainer, with double backprop); False: `direction` draws it (no explainer gradient).
    - `needs_region`: it needs a bool target region (B or 1, H, W).
    - `report_metrics`: the `FragilityResult` fields the report shows for it.
    - `uses_attack_k`: its ascent uses the clean top-k set (`k`), so attacks with different
      attacked sets differ (`robust_train.attacks.ensemble` runs several).
    - `schedule(options)`: the restarts, steps and step size it runs with (by default the
      options as given); `start_point` says where each restart starts.
    - `random_starts`: restarts after the first start at a random point of the ball; False:
      every restart starts at the clean input.

    The default score ranks iterates by lower top-k intersection (`measure_k`), ties broken by
    lower Spearman correlation; subclasses override `ascent_value` and, if they rank otherwise,
    `score`.

    Args:
        clean_map: importance maps (B, H, W) of the clean inputs under the original model.
        k: size of the top-k set of the clean map (`clean_topk`).
        measure_k: k of the top-k intersection that ranks iterates.
        region: bool (B, H, W) target region, or None.
    """

    name: ClassVar[str] = ""
    needs_gradient: ClassVar[bool] = True
    needs_region: ClassVar[bool] = False
    uses_attack_k: ClassVar[bool] = False
    random_starts: ClassVar[bool] = True
    report_metrics: ClassVar[tuple[str, ...]] = (
        "topk_intersection",
        "lens_topk",
        "spearman",
        "kendall",
        "center_shift",
    )

    def __init__(
        self, clean_map: Tensor, *, k: int, measure_k: int, region: Tensor | None = None
    ) -> None:
        self.clean_map = clean_map
        self.k, self.measure_k, self.region = k, measure_k, region
        self.clean_topk = topk_mask(clean_map, k)
        self._reference: RankedReference | None = None

    @classmethod
    def schedule(cls, options: AttackOptions) -> AttackOptions:
        """The resolved options this objective runs with: `n_restarts` runs of `n_steps` steps
        of `step_size` (by default the options as given; the noise baseline draws instead)."""
        return options

    def start_restart(self, restart: int, generator: torch.Generator) -> None:
        """Reset per-restart state (e.g. a random tie-break direction); nothing by default."""

    def start_point(
        self,
        x0: Tensor,
        epsilon: float,
        restart: int,
        generator: torch.Generator,
        norm: str = "linf",
    ) -> Tensor:
        """Where a restart starts: restart 0 (and every one without `random_starts`) at the clean
        input, later ones uniformly in the `norm` ("linf" or "l2") ball, clamped to [0, 1]."""
        if restart == 0 or not self.random_starts:
            return x0
        return random_in_ball(x0, epsilon, norm, generator)

    def direction(self, x: Tensor, generator: torch.Generator) -> Tensor:
        """The step direction of an objective that needs no gradient (`needs_gradient` False)."""
        raise NotImplementedError(f"objective {self.name!r} takes its direction from a gradient")

    def ascent_value(self, maps: Tensor, rows: slice) -> Tensor:
        """Differentiable per-sample value (b,) to ascend, for the maps of batch rows `rows`."""
        raise NotImplementedError(f"objective {self.name!r} has no gradient")

    def score(self, maps: Tensor) -> Score:
        """Rank maps of the original model: (primary, secondary), both lower-is-better, (B,).

        The top-k intersection (`measure_k`) and Spearman correlation with the clean maps; the
        clean side is computed once (`RankedReference`), so a step costs one sort of its maps.
        """
        if self._reference is None:
            self._reference = RankedReference(self.clean_map, self.measure_k)
        return self._reference.compare(maps)

    def region_mass(self, maps: Tensor) -> Tensor:
        """Fraction of each (sum-normalised) map inside the target region, (B,)."""
        if self.region is None:
            raise ValueError(f"objective {self.name!r} has no target region")
        return (normalize_map(maps, "sum") * self.region).flatten(1).sum(1)

    @staticmethod
    def better(new: Score, best: Score) -> Tensor:
        """(B,) bool: strictly better, lexicographically; NaN never wins."""
        return (new[0] < best[0]) | ((new[0] == best[0]) & (new[1] < best[1]))


OBJECTIVES: Registry[type[FragilityObjective]] = Registry("OBJECTIVES", "objective")

register_objective = OBJECTIVES.registrar(FragilityObjective)


def get_objective(name: object) -> type[FragilityObjective]:
    """The objective class registered as `name`; the error lists the registered names.

    Examples:
        >>> get_objective("topk").needs_gradient, get_objective("random_sign").needs_gradient
        (True, False)
    """
    return OBJECTIVES.lookup(name, "objective")
