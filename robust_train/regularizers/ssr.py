"""Smoothed-geometry regulariser SSR (Wang, Wang, Ramkumar, Fredrikson, Mardziel, Datta,
"Smoothed Geometry for Robust Attribution", NeurIPS 2020, arXiv 2006.06643).

Penalty: the largest eigenvalue of the Gauss-Newton part of the input Hessian of the
cross-entropy, H = J^T (diag(p) - p p^T) J, with J the input-to-logit Jacobian (K x D) and p the
softmax. It bounds how fast the input gradient (the saliency map) can turn. lambda_max comes from
a few power iterations that use Jacobian-vector products only (never the full J):

    w = J v,  a = p * w - p (p . w),  v <- J^T a / ||J^T a||,

where J^T a is one backward pass and J v the derivative of the linear map u -> J^T u (built once
per call, with create_graph) in u. The value returned is the Rayleigh quotient
v^T H v = sum_k p_k w_k^2 - (p . w)^2 at the final (detached) v, differentiable in the parameters;
it is <= lambda_max and equal to it once the iteration has converged (the parameter gradient of
lambda_max is then v^T dH v, so detaching v is exact at convergence).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.core.validation import check_positive
from robust_train.regularizers._penalty_parts import expand_like, forward_logits, per_sample_norm
from robust_train.regularizers.base import PenaltyTerm, register_penalty


def check_ssr_args(n_iterations: int) -> None:
    """The one argument check of `ssr_eigenvalue` and `SmoothedGeometry`."""
    check_positive(n_iterations, "n_iterations", integer=True)


def _unit(v: Tensor) -> Tensor:
    return v / expand_like(per_sample_norm(v).clamp_min(1e-12), v)


def ssr_eigenvalue(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor | None = None,
    *,
    n_iterations: int = 10,
    logits: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Per-sample largest eigenvalue of J^T (diag(p) - p p^T) J by power iteration, shape (B,).

    Args:
        model: the classifier (samples must not interact: eval-mode BatchNorm, or none).
        inputs: images (B, C, H, W); when they require grad and `logits` = model(inputs) is
            given, that forward is reused.
        target: unused (the Gauss-Newton matrix of the CE does not depend on the label); kept
            for the common penalty signature.
        n_iterations: power iterations before the final Rayleigh quotient.
        logits: the clean forward, when the caller already ran it.
        generator: RNG of the starting vector (CPU generator).

    Examples:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
        >>> x = torch.rand(2, 1, 2, 2)
        >>> lam = ssr_eigenvalue(net, x, n_iterations=50)
        >>> j = net[1].weight.detach()
        >>> p = torch.softmax(net(x), 1).detach()[0]
        >>> exact = torch.linalg.eigvalsh(j.T @ (torch.diag(p) - torch.outer(p, p)) @ j)[-1]
        >>> bool(torch.isclose(lam[0], exact, rtol=1e-3))
        True
    """
    check_ssr_args(n_iterations)
    x = inputs if inputs.requires_grad else inputs.detach().requires_grad_(True)
    with torch.enable_grad():
        out = forward_logits(model, x, logits if x is inputs else None)
        p = F.softmax(out, dim=1)
        u0 = torch.zeros_like(out, requires_grad=True)
        (jt_u,) = torch.autograd.grad(out, x, grad_outputs=u0, create_graph=True)

        def jvp(v: Tensor, create_graph: bool) -> Tensor:
            (w,) = torch.autograd.grad(
                jt_u, u0, grad_outputs=v, create_graph=create_graph, retain_graph=True
            )
            return w

        v = _unit(torch.randn(x.shape, generator=generator, dtype=torch.float32).to(x))
        pd = p.detach()
        for _ in range(n_iterations):
            w = jvp(v, False)
            a = pd * w - pd * (pd * w).sum(1, keepdim=True)
            (v,) = torch.autograd.grad(out, x, grad_outputs=a, retain_graph=True)
            v = _unit(v.detach())
        w = jvp(v, True)
    return (p * w.pow(2)).sum(1) - (p * w).sum(1).pow(2)


@register_penalty("ssr")
class SmoothedGeometry(PenaltyTerm):
    """SSR (Wang et al. 2020): weight * lambda_max of the Gauss-Newton input Hessian of the CE.

    Examples:
        >>> SmoothedGeometry(weight=0.3, n_iterations=5)
        SmoothedGeometry(name='ssr', weight=0.3)
    """

    needs_input_grad = True
    double_backprop = True

    def __init__(
        self,
        weight: float = 1.0,
        n_iterations: int = 10,
        name: str | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(weight, name, seed)
        check_ssr_args(n_iterations)
        self.n_iterations = n_iterations

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        return ssr_eigenvalue(
            model,
            inputs,
            target,
            n_iterations=self.n_iterations,
            logits=logits,
            generator=self.generator,
        )
