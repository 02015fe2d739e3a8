"""Distillation to a frozen teacher: the KL divergence of the model's softened prediction from
the teacher's on the clean images (Hinton, Vinyals & Dean 2015, "Distilling the Knowledge in a
Neural Network", arXiv 1503.02531; as a fine-tuning anchor, Li & Hoiem 2017, "Learning without
Forgetting").

A penalty on explanations moves the classifier's function as well as its maps; fine-tuned from a
natural model, the model forgets part of what made it accurate. This term holds its predictions
to the starting model's (or another teacher's) without constraining its gradients: one forward of
the frozen teacher per step, no gradient of an explanation, and the clean forward of the training
step reused for the model's own logits.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.core.options import takes_options
from robust_train.core.validation import check_positive
from robust_train.regularizers.base import PenaltyTerm, register_penalty
from robust_train.regularizers.multi_map import check_teacher, teacher_model

__all__ = ["DistillationOptions", "TeacherDistillation", "distillation_loss"]


@dataclass(frozen=True)
class DistillationOptions:
    """The teacher and the temperature of the distillation term.

    Attributes:
        teacher: None (the model itself as it is at the term's first call: the start of the fit,
            i.e. the `init_checkpoint` a fine-tune starts from; its weights are kept in the
            term's state, so a resumed run distils from the same teacher) or a checkpoint of the
            same architecture (a `.ckpt` of `robust-train fit`, a saved state dict or a shipped
            checkpoint's name), loaded into a copy of the model at the first call.
        temperature: T > 0: both predictions are softmax(logits / T); the KL is multiplied by
            T^2, so that its gradient keeps the scale of the cross-entropy's at any T.
    """

    teacher: str | None = None
    temperature: float = 2.0

    def __post_init__(self) -> None:
        check_teacher(self.teacher)
        check_positive(self.temperature, "temperature")


def distillation_loss(student: Tensor, teacher: Tensor, temperature: float = 2.0) -> Tensor:
    """Per-sample T^2 KL(softmax(teacher / T) || softmax(student / T)), shape (B,).

    Args:
        student: the model's logits (B, K), differentiable.
        teacher: the teacher's logits (B, K) (treated as constants).
        temperature: T > 0.

    Returns:
        The divergence per image: 0 where the two predictions agree, >= 0 everywhere.

    Raises:
        ValueError: shapes that differ, or a temperature <= 0.

    Examples:
        >>> s = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
        >>> distillation_loss(s, s).tolist()
        [0.0, 0.0]
        >>> bool((distillation_loss(s, s.flip(1), temperature=1.0) > 0).all())
        True
    """
    check_positive(temperature, "temperature")
    if student.shape != teacher.shape or student.dim() != 2:
        raise ValueError(
            f"`student` and `teacher` must be logits of the same shape (B, K), got "
            f"{tuple(student.shape)} and {tuple(teacher.shape)}"
        )
    t = float(temperature)
    log_q = F.log_softmax(student / t, dim=1)
    log_p = F.log_softmax(teacher.detach().to(student.dtype) / t, dim=1)
    return t * t * (log_p.exp() * (log_p - log_q)).sum(dim=1)


@register_penalty("distillation")
@takes_options(DistillationOptions)
class TeacherDistillation(PenaltyTerm):
    """T^2 KL of the model's softened prediction from a frozen teacher's, on the clean images.

    Beside a penalty on explanations in a fine-tune, it holds the classifier's predictions to
    the model it started from (`teacher` None) or to a given checkpoint, at the price of one
    teacher forward per step (in eval mode, without gradient).

    Args:
        weight, name, seed: as every `PenaltyTerm`.
        **options: `DistillationOptions` (teacher None, temperature 2).

    Raises:
        ValueError: a temperature <= 0.
        FileNotFoundError: a `teacher` path that is not a file.

    Example:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
        >>> x, y = torch.rand(2, 1, 2, 2), torch.tensor([0, 2])
        >>> term = TeacherDistillation(weight=0.5)
        >>> term(net, x, y).tolist()  # the teacher is the model as it was at the first call
        [0.0, 0.0]
        >>> with torch.no_grad():
        ...     net[1].bias += torch.tensor([1.0, 0.0, 0.0])
        >>> bool((term(net, x, y) > 0).all())
        True
    """

    double_backprop = False
    options_class = DistillationOptions

    def __init__(
        self, weight: float = 1.0, name: str | None = None, seed: int | None = None, **options: Any
    ) -> None:
        super().__init__(weight, name, seed, **options)
        # `teacher` None: the model's weights at the first call, saved with the term's state
        self.snapshot: dict[str, Tensor] | None = None
        self.frozen: list[nn.Module] = []  # the teacher built from them (a list: no submodule)

    def teacher_for(self, model: nn.Module) -> nn.Module:
        """The frozen teacher of `model` (see `DistillationOptions.teacher`)."""
        if self.options.teacher is not None:
            return teacher_model(model, self.options.teacher)
        if self.snapshot is None:
            self.snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if not self.frozen:
            teacher = copy.deepcopy(model)
            teacher.load_state_dict(self.snapshot)
            self.frozen.append(teacher.eval().requires_grad_(False))
        return self.frozen[0]

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        teacher = self.teacher_for(model)
        with torch.no_grad():
            reference = teacher(inputs.detach())
        student = model(inputs) if logits is None else logits
        return distillation_loss(student, reference, self.options.temperature)

    def get_extra_state(self) -> dict[str, Any]:
        """The snapshot teacher's weights (None before the first call, or with a `teacher` path)."""
        return {"snapshot": self.snapshot}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore the snapshot teacher of a saved run (`get_extra_state`)."""
        self.snapshot = state.get("snapshot") if isinstance(state, dict) else None
        self.frozen = []
