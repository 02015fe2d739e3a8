"""Several registered penalties as one term: the same images, one weight, one schedule.

penalty(x) = sum_j w_j * P_j(x), with P_j registered penalties (`get_penalty(name, ...)`) and w_j
their own weights, on the same images: the composed term's `batch_fraction` picks the subset
every term sees. A term with a `batch_fraction` of its own explains the first ceil(f * B) of
those B images; its values there are multiplied by B / ceil(f * B) and the other rows get 0, so
the batch mean of the composed value is sum_j w_j * (mean of P_j over its rows): the loss
`RobustClassifier` optimises with the same terms given one by one. With `schedule="cycle"` only
one term runs per call, in turn (call t runs term t mod n), and its value is multiplied by n, so
the mean over n calls, and the expected gradient, equal the full sum at a cost of one term per
step: the terms alternate instead of stacking up.
It lets a recipe of several maps (a leaderboard row, a config) name one penalty.

Example:
    >>> term = get_penalty("composed", weight=2.0, terms=[
    ...     {"penalty": "gradnorm", "weight": 0.5},
    ...     {"penalty": "smoothness", "radius": 0.1, "distance": "cosine"}])
    >>> [t.name for t in term.terms], [t.weight for t in term.terms]
    (['gradnorm', 'smoothness'], [0.5, 1.0])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn

from robust_train.core.validation import check_choice
from robust_train.regularizers.base import PENALTIES, PenaltyTerm, get_penalty, register_penalty

__all__ = ["DEFAULT_TERMS", "SCHEDULES", "ComposedPenalty"]

SCHEDULES = ("all", "cycle")
# `terms=None`: the multi-map smoothness of input x gradient and Grad-CAM maps (one backward)
# and the top-k mass of DeepLIFT maps.
DEFAULT_TERMS: tuple[dict[str, Any], ...] = (
    {"penalty": "multi_map"},
    {"penalty": "topk_mass", "explainer": "deeplift"},
)


def _build(spec: PenaltyTerm | Mapping[str, Any], i: int, seed: int | None) -> PenaltyTerm:
    """A term from a spec {"penalty": name, "weight": w, ...options} (or a built term)."""
    if isinstance(spec, PenaltyTerm):
        term = spec
    elif isinstance(spec, Mapping):
        options = dict(spec)
        name = options.pop("penalty", None)
        if not isinstance(name, str):
            raise ValueError(
                f'`terms[{i}]` must name its penalty ("penalty": one of {sorted(PENALTIES)}), '
                f"got {dict(spec)!r}"
            )
        if seed is not None:
            options.setdefault("seed", seed + i)
        term = get_penalty(name, **options)
    else:
        raise TypeError(
            f'`terms[{i}]` must be a PenaltyTerm or a dict with a "penalty" name, got {spec!r}'
        )
    if term.replaces_task_loss:
        raise ValueError(
            f"`terms[{i}]` ({type(term).__name__}) replaces the task loss; give it to "
            "RobustClassifier on its own, not inside a composed penalty"
        )
    return term


@register_penalty("composed")
class ComposedPenalty(PenaltyTerm):
    """Weighted sum of registered penalties on the same images (see the module docstring).

    A term's own `every_n_steps` and `batch_fraction` still apply (the first counts the calls
    that reach the term; the second, the module docstring); a term that replaces the task loss
    is refused.

    Args:
        weight: multiplier of the whole sum (each term keeps its own weight inside it).
        name: logged as train/penalty/<name>.
        seed: the terms' seeds, seed + j for term j (unless a spec gives its own).
        terms: the penalties: dicts {"penalty": registered name, "weight": w, ...its options}
            (what a config or a leaderboard row writes) or built `PenaltyTerm`s; None:
            `DEFAULT_TERMS`.
        schedule: "all" (every term at every call) or "cycle" (one term per call, in turn,
            multiplied by the number of terms).

    Example:
        >>> import torch
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(16, 4), nn.Softplus(), nn.Linear(4, 3))
        >>> x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 2, 0])
        >>> both = ComposedPenalty(terms=[{"penalty": "gradnorm"}, {"penalty": "curvature"}])
        >>> both(net, x, y).shape
        torch.Size([4])
    """

    def __init__(
        self,
        weight: float = 1.0,
        name: str | None = None,
        seed: int | None = None,
        terms: Sequence[PenaltyTerm | Mapping[str, Any]] | None = None,
        schedule: str = "all",
    ) -> None:
        super().__init__(weight, name, seed)
        self.schedule, self.turn = schedule, 0  # the cycle's next term (not saved in checkpoints)
        check_choice(schedule, "schedule", SCHEDULES)
        if terms is None:
            terms = DEFAULT_TERMS
        if isinstance(terms, (str, Mapping)) or not terms:
            raise ValueError(f"`terms` must be a non-empty list of penalties, got {terms!r}")
        built = [_build(spec, i, seed) for i, spec in enumerate(terms)]
        names = [t.name for t in built]
        if len(set(names)) != len(names):
            built = [_renamed(t, f"{t.name}{i}") for i, t in enumerate(built)]
        self.terms = nn.ModuleList(built)

    @property
    def members(self) -> list[PenaltyTerm]:
        """The terms, typed."""
        return [cast(PenaltyTerm, t) for t in self.terms]

    @property
    def double_backprop(self) -> bool:  # type: ignore[override]  # follows the terms
        """True when any term differentiates through an input gradient."""
        return any(bool(t.double_backprop) for t in self.members)

    @property
    def full_precision(self) -> bool:  # type: ignore[override]  # follows the terms
        """True when any term must run in float32 under autocast."""
        return any(t.full_precision for t in self.members)

    @property
    def needs_input_grad(self) -> bool:  # type: ignore[override]  # follows the terms
        """True when any term reuses the module's clean forward."""
        return any(t.needs_input_grad for t in self.members)

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        members, total = self.members, inputs.new_zeros(inputs.shape[0])
        if self.schedule == "cycle":
            term, self.turn = members[self.turn % len(members)], self.turn + 1
            return len(members) * _on_rows(term, model, inputs, target, logits, total)
        for term in members:
            if term.weight > 0:
                total = total + _on_rows(term, model, inputs, target, logits, total)
        return total

    def extra_repr(self) -> str:
        text = super().extra_repr()
        return text + (f", schedule={self.schedule!r}" if self.schedule != "all" else "")


def _on_rows(
    term: PenaltyTerm,
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    logits: Tensor | None,
    like: Tensor,
) -> Tensor:
    """w * P(x) on every row (B,): a term on fewer rows (its `batch_fraction`) has them scaled
    by B / m and zeros after them, so the batch mean is w times its own mean."""
    value = term(model, inputs, target, logits)
    b, m = inputs.shape[0], value.shape[0]
    if m == b:
        return term.weight * value
    return term.weight * (b / m) * torch.cat([value, like.new_zeros(b - m)])


def _renamed(term: PenaltyTerm, name: str) -> PenaltyTerm:
    term.name = name
    return term
