"""The directions a gradient attack can take, and which of them it runs (`AttackOptions.direction`).

A fragility attack ascends its objective through the explainer; where that gradient is taken
decides how strong the attack is, and no single choice is the strongest on every image. The
candidates, each a pair of surrogates (`robust_train.models.softplus.smooth_relus` for the
model's ReLUs, `robust_train.explain.clamp.smooth_map_clamps` for a map's own final ReLU, as
Grad-CAM's; both of beta `surrogate_beta`):

- "model": the model itself, with a map's own final ReLU smoothed (the declared direction of an
  explainer whose map moves with the input on a ReLU net: Grad-CAM, LRP, DeepLIFT);
- "surrogate": the model's ReLUs smoothed as well (the declared direction of the gradient
  family, whose map is piecewise constant on a ReLU net so that its own gradient is zero almost
  everywhere; Ghorbani et al. 2019, Dombrowski et al. 2019);
- "exact": no surrogate at all (the map's exact gradient; where it is zero the attack takes a
  random sign step, `_loop.off_flat_point`).

`direction="all"` runs every candidate that differs from the others and keeps, per image, the
worst result (lowest top-k intersection, or the objective's own ranking): each candidate is a
whole attack (restarts x steps) on the same running best, so it costs one attack per candidate.
A candidate is left out when it cannot differ: "surrogate" when the model makes no ReLU call
(a Softplus network: it is the model), "exact" when the map has no final clamp (it is
"model"), and for a piecewise-constant map "model" and "exact" (their gradient is zero almost
everywhere on a ReLU net, so they would be random walks). A probe (three maps of one image)
finds out which; nothing else is measured twice. A map that does not depend on the model
(`ExplainerSpec.model_free`: the reference "map = input") runs "exact" alone, without a probe:
every surrogate of the model gives it the same map and the same gradient, so any other candidate
would repeat the same attack step for step (its label check calls the model's ReLUs, which a
probe would count).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from robust_train.explain.clamp import smooth_map_clamps
from robust_train.explain.maps import importance_map
from robust_train.explain.protocol import Explainer
from robust_train.explain.registry import explainer_spec
from robust_train.models.softplus import smooth_relus

__all__ = ["Direction", "directions"]


@dataclass(frozen=True)
class Direction:
    """One attack direction: the betas of the model's ReLU surrogate and of the map's clamp
    surrogate (None: exact).

    Examples:
        >>> Direction("model", None, 10.0).relu_beta is None
        True
    """

    name: str
    relu_beta: float | None
    clamp_beta: float | None


def directions(
    choice: str,
    beta: float | None,
    *,
    piecewise_constant: bool,
    explain: Explainer,
    model: torch.nn.Module,
    inputs: Tensor,
    target: Tensor,
) -> list[Direction]:
    """The directions an attack with `direction=choice` runs, in this order (see the module
    docstring); `beta` None: only "exact".

    Examples:
        >>> from robust_train.explain import saliency
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3), torch.nn.ReLU(),
        ...                           torch.nn.Linear(3, 2))
        >>> x, t = torch.rand(1, 1, 2, 2), torch.tensor([0])
        >>> [d.name for d in directions("all", 10.0, piecewise_constant=True, explain=saliency,
        ...                             model=net, inputs=x, target=t)]
        ['surrogate']
        >>> [d.name for d in directions("all", None, piecewise_constant=True, explain=saliency,
        ...                             model=net, inputs=x, target=t)]
        ['exact']
        >>> from robust_train.explain import input_reference
        >>> [d.name for d in directions("all", 10.0, piecewise_constant=False,
        ...                             explain=input_reference, model=net, inputs=x, target=t)]
        ['exact']
    """
    model_dir = Direction("model", None, beta)
    surrogate = Direction("surrogate", beta, beta)
    exact = Direction("exact", None, None)
    if beta is None:
        return [exact]
    if choice == "declared":
        return [surrogate if piecewise_constant else model_dir]
    if choice != "all":
        return [{"model": model_dir, "surrogate": surrogate, "exact": exact}[choice]]
    if explainer_spec(explain).model_free:
        return [exact]
    relu_calls, has_clamp = _probe(explain, model, inputs[:1], target[:1], beta)
    if piecewise_constant:
        return [surrogate]
    return [
        model_dir,
        *([surrogate] if relu_calls else []),
        *([exact] if has_clamp else []),
    ]


def _probe(
    explain: Explainer, model: torch.nn.Module, x: Tensor, target: Tensor, beta: float
) -> tuple[int, bool]:
    """(ReLU calls the model makes in one map, whether the map has a final clamp): the map of
    one image under `smooth_relus`, under `smooth_map_clamps` and exact (a smoothed clamp is
    positive everywhere, so it always changes a clamped map)."""
    with smooth_relus(beta) as relus:
        explain(model, x, target, create_graph=False)
    with smooth_map_clamps(beta):
        smoothed = importance_map(explain(model, x, target, create_graph=False)).detach()
    exact = importance_map(explain(model, x, target, create_graph=False)).detach()
    return relus.calls, not torch.equal(torch.nan_to_num(smoothed), torch.nan_to_num(exact))
