"""nn.Module loss terms around the penalty functions, summed with their weights by RobustClassifier.

Each term has a `name` (logged as train/penalty/<name>) and a `weight`; calling it returns the
per-sample penalty (B,). Terms are plain constructor arguments so LightningCLI configs can list them:

    penalties:
      - class_path: robust_train.regularizers.ExplanationSmoothness
        init_args: {weight: 1.0, radius: 0.1}
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from robust_train._validation import check_choice, check_non_negative
from robust_train.regularizers.curvature import curvature
from robust_train.regularizers.gradient_norm import input_gradient_norm
from robust_train.regularizers.smoothness import Explainer, explanation_smoothness


class PenaltyTerm(nn.Module):
    """Base class: a weighted per-sample penalty on the explanations of `model` at `inputs`.

    Subclasses implement `penalty`. `needs_input_grad` tells the module to run its clean forward on
    inputs that require grad so the term can reuse it (double backprop from the shared graph).
    """

    needs_input_grad: bool = False
    default_name: str = "penalty"
    # True for terms whose value already holds the task loss (e.g. CE at an adversarial example):
    # RobustClassifier then drops the natural cross-entropy from the optimised loss.
    replaces_task_loss: bool = False

    def __init__(self, weight: float = 1.0, name: str | None = None, seed: int | None = None) -> None:
        super().__init__()
        check_non_negative(weight, "weight")
        self.weight = float(weight)
        self.name = name or self.default_name
        self.generator = torch.Generator().manual_seed(seed) if seed is not None else None

    def forward(self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None = None) -> Tensor:
        return self.penalty(model, inputs, target, logits)

    def penalty(self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None) -> Tensor:
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"name={self.name!r}, weight={self.weight}"


class ExplanationSmoothness(PenaltyTerm):
    """Distance between explanations at x and at x' in a ball (see `explanation_smoothness`)."""

    needs_input_grad = True
    default_name = "smoothness"

    def __init__(self, weight: float = 1.0, explainer: str | Explainer = "saliency", radius: float = 0.1,
                 n_samples: int = 1, ball: str = "linf", distance: str = "l1", lipschitz: bool = False,
                 n_ascent_steps: int = 0, ascent_step_size: float | None = None, name: str | None = None,
                 seed: int | None = None) -> None:
        super().__init__(weight, name, seed)
        self.kwargs = dict(explainer=explainer, radius=radius, n_samples=n_samples, ball=ball, distance=distance,
                           lipschitz=lipschitz, n_ascent_steps=n_ascent_steps, ascent_step_size=ascent_step_size)
        # Check the settings now rather than at the first training step.
        check_choice(ball, "ball", ("linf", "l2"))
        check_choice(distance, "distance", ("l1", "cosine", "l2"))

    def penalty(self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None) -> Tensor:
        return explanation_smoothness(model, inputs, target, logits=logits, generator=self.generator, **self.kwargs)


class LocalLipschitzPenalty(ExplanationSmoothness):
    """Explanation smoothness divided by ||x - x'||: a penalty on the local Lipschitz ratio."""

    default_name = "lipschitz"

    def __init__(self, weight: float = 0.01, explainer: str | Explainer = "saliency", radius: float = 0.1,
                 n_samples: int = 1, ball: str = "linf", distance: str = "l1", n_ascent_steps: int = 1,
                 ascent_step_size: float | None = None, name: str | None = None, seed: int | None = None) -> None:
        super().__init__(weight, explainer, radius, n_samples, ball, distance, True, n_ascent_steps,
                         ascent_step_size, name, seed)


class InputGradientNorm(PenaltyTerm):
    """||grad_x CE||^2 by double backprop or by a finite difference (see `input_gradient_norm`)."""

    needs_input_grad = True
    default_name = "gradnorm"

    def __init__(self, weight: float = 1.0, method: str = "double_backprop", h: float = 0.01,
                 name: str | None = None) -> None:
        super().__init__(weight, name)
        check_choice(method, "method", ("double_backprop", "finite_difference"))
        self.method, self.h = method, h

    def penalty(self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None) -> Tensor:
        return input_gradient_norm(model, inputs, target, method=self.method, h=self.h, logits=logits)


class Curvature(PenaltyTerm):
    """Zero-order (logit second difference) or CURE-style gradient-difference curvature."""

    needs_input_grad = True
    default_name = "curvature"

    def __init__(self, weight: float = 1.0, method: str = "zero_order", h: float = 0.05, n_directions: int = 1,
                 name: str | None = None, seed: int | None = None) -> None:
        super().__init__(weight, name, seed)
        check_choice(method, "method", ("zero_order", "gradient_difference"))
        self.method, self.h, self.n_directions = method, h, n_directions

    def penalty(self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None) -> Tensor:
        return curvature(model, inputs, target, method=self.method, h=self.h, n_directions=self.n_directions,
                         logits=logits, generator=self.generator)


PENALTIES: dict[str, type[PenaltyTerm]] = {
    "smoothness": ExplanationSmoothness,
    "lipschitz": LocalLipschitzPenalty,
    "gradnorm": InputGradientNorm,
    "curvature": Curvature,
}


def get_penalty(name: str, **kwargs: object) -> PenaltyTerm:
    """Build a penalty term by name ("smoothness", "lipschitz", "gradnorm", "curvature").

    Example:
        >>> get_penalty("curvature", weight=0.5)
        Curvature(name='curvature', weight=0.5)
    """
    check_choice(name, "penalty", PENALTIES)
    return PENALTIES[name](**kwargs)  # type: ignore[arg-type]
