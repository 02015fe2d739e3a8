"""Top-k mass penalty: the top-k fragility attack's own objective, trained against.

penalty(x) = 1 - sum_{i in B(x)} p(x')_i, with p(x') the sum-normalised importance map of a
differentiable explainer at x' and B(x) the positive pixels among the k most important of the
clean map at x: the share of the perturbed map's mass that left the clean top-k set. x' is found
by a few projected sign-ascent steps on that same value in B_inf(x, radius) (from a uniform
random point of the ball by default), i.e. the inner maximisation is the top-k attack of
Ghorbani, Abid & Zou ("Interpretation of Neural Networks is Fragile", AAAI 2019;
`robust_train.attacks.objectives.topk`) run for a few steps, as attributional adversarial
training does with its attack (RAR, Chen et al. 2019; ART, Singh et al. 2020). Unlike a map
distance (L1, cosine), the value is aligned with the reported top-k intersection: it is zero
exactly when the perturbed map keeps all its mass on the clean top-k set, and it does not reward
dense maps that are close in distance but reorder their top-k set.

B keeps only positive clean pixels: where a map has fewer than k positive pixels (Grad-CAM's
ReLU), the attack's top-k set is filled with zero pixels by index (top-left first), which say
nothing about the image. An all-zero clean map defines no set; its penalty is 0. Caution: on
Grad-CAM a large weight with a weak inner ascent (one step) can be met by shrinking the maps,
many to all-zero, which the gradient attack cannot move; report the measured count and the share
of all-zero maps beside the attack's mean (the design notes say why).

The clean map only defines the set B (a top-k selection has no gradient), so it is computed
without a graph; the penalty differentiates through the perturbed map (create_graph=True,
double backprop). The ascent direction of an explainer whose map is piecewise constant on ReLU
networks (saliency) is taken on the softplus surrogate (`ascent_beta`), as in the attack.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from robust_train.core.options import takes_options
from robust_train.core.validation import check_bool, check_positive
from robust_train.explain.clamp import direction_surrogates
from robust_train.explain.maps import importance_map, normalize_map
from robust_train.explain.similarity import topk_support
from robust_train.regularizers._inner import PGDOptions, linf_pgd
from robust_train.regularizers.base import PenaltyTerm, register_penalty
from robust_train.regularizers.options import ExplainerOptions, PenaltyCall, penalty_function

__all__ = ["TopKMassOptions", "TopKMassPenalty", "topk_mass"]

Explainer = Callable[..., Tensor]


@dataclass(frozen=True)
class TopKMassOptions(ExplainerOptions):
    """The options of the top-k mass penalty (the function and the term take them): the
    ascent's and the explainer's (`ExplainerOptions`: an L_inf ball) and these.

    Attributes:
        k: size of the clean top-k set B (the attack's k; MNIST protocol 100); at most H * W.
        random_start: start the ascent at a uniform point of the ball (else at x).

    The defaults differ from `ExplainerOptions`'s: radius 0.3, one ascent step, and the ascent
    step 2.5 * radius / max(1, n_ascent_steps) (the PGD rule of Madry et al. that lets a few
    steps reach the ball's boundary). `ascent_beta` also gives a map's own final ReLU
    (Grad-CAM's) its scale-free softplus surrogate for every explainer (without it the ascent
    cannot move a map with fewer positive pixels than k). The penalty itself is always computed
    on the model and the exact map.
    """

    radius: float = 0.3
    n_ascent_steps: int = 1
    k: int = 100
    random_start: bool = True

    def __post_init__(self) -> None:
        check_positive(self.k, "k", integer=True)
        check_bool(self.random_start, "random_start")
        super().__post_init__()

    @property
    def step(self) -> float:
        """The ascent step: `ascent_step_size`, else 2.5 * radius / max(1, n_ascent_steps)."""
        if self.ascent_step_size is not None:
            return self.ascent_step_size
        return 2.5 * self.radius / max(1, self.n_ascent_steps)


@penalty_function(TopKMassOptions)
def topk_mass(call: PenaltyCall[TopKMassOptions]) -> Tensor:
    """Per-sample share of the perturbed map's mass outside the clean top-k set, shape (B,).

    Returns:
        Values in [0, 1] with a graph through the perturbed map (not through x').

    Examples:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3),
        ...                           torch.nn.Softplus(), torch.nn.Linear(3, 2))
        >>> x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 0, 1])
        >>> value = topk_mass(net, x, y, k=4, radius=0.1, explainer="saliency")
        >>> value.shape, bool(((value >= 0) & (value <= 1)).all())
        (torch.Size([4]), True)
    """
    model, target, o, x0 = call.model, call.target, call.options, call.inputs.detach()
    explain = o.explain
    clean = importance_map(explain(model, x0, target, create_graph=False)).detach()
    support = topk_support(clean, o.k)
    informative = support.flatten(1).any(1).to(clean.dtype)

    def outside(x: Tensor) -> Tensor:
        maps = normalize_map(importance_map(explain(model, x, target, create_graph=True)), "sum")
        return (1 - (maps * support).flatten(1).sum(1)) * informative

    pgd = PGDOptions(o.radius, o.step, o.n_ascent_steps, o.random_start)
    with direction_surrogates(o.ascent_beta, o.spec.piecewise_constant):
        x_pert = linf_pgd(outside, x0, pgd, call.generator)
    return outside(x_pert)


@register_penalty("topk_mass")
@takes_options(TopKMassOptions)
class TopKMassPenalty(PenaltyTerm):
    """Share of the map's mass that a short top-k attack pushes out of the clean top-k set
    (see `topk_mass`).

    Args:
        weight, name, seed: as every `PenaltyTerm`.
        **options: the fields of `TopKMassOptions`.

    Examples:
        >>> TopKMassPenalty(weight=3.0, explainer="grad_cam").options.k
        100
    """

    double_backprop = True  # the perturbed map is taken with create_graph=True
    options_class = TopKMassOptions
    function = staticmethod(topk_mass)
