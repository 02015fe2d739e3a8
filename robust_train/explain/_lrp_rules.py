"""Zennit's LRP rules, made differentiable to second order in the input AND the parameters.

Zennit (Anders et al., "Software for Dataset-wide XAI", 2021) computes LRP as a modified gradient:
a hook on each layer replaces the gradient at its input by the relevance of its rule, computed
from a modified forward of that layer. Two details of `zennit.core.BasicHook.backward` (0.5.1)
lose second-order terms, and this module fixes both while keeping each rule's own modifiers,
gradient mapper and reducer (so the values are Zennit's):

- the modified parameters are built from `param.data` (`ParamMod`): the relevance has no graph
  to the weights, so a training penalty on an LRP map would get wrong parameter gradients. Here
  the modifier is applied to the parameter itself (`_modified_parameters`);
- the rule's inner `torch.autograd.grad` keeps a graph only when the incoming relevance
  requires grad, which the top layer's one-hot does not: the dependence of `R / z` on `z` would
  be dropped there. Here it keeps a graph whenever the outer backward builds one
  (`torch.is_grad_enabled()` inside the backward is its `create_graph`).

`build_composite` assembles the named composites from these rules with Zennit's composite
classes; the `Pass` rule (relevance unchanged) covers activations, unmerged BatchNorm and the
project's `Normalize` layer, which must not divide relevance by the standard deviation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from zennit import rules
from zennit.composites import LayerMapComposite, SpecialFirstLayerMapComposite
from zennit.core import Composite, ParamMod, zero_wrap
from zennit.layer import Sum
from zennit.types import Activation, AvgPool, BatchNorm, Convolution

from robust_train.models.normalize import Normalize
from robust_train.models.torchvision_parts import Hardsigmoid

__all__ = ["COMPOSITES", "build_composite", "call_rules", "ruled_modules"]

COMPOSITES = ("epsilon_plus", "epsilon", "epsilon_gamma_box", "alpha2_beta1")


@contextmanager
def _modified_parameters(module: nn.Module, param_mod: Any) -> Iterator[None]:
    """`ParamMod` without `.data`: the module's parameters (or the merged ones a canonizer put in
    their place) are replaced by `modifier(param, name)`, a function OF them, then put back."""
    mod = ParamMod.ensure(param_mod)
    params = module._parameters
    keys = (
        [k for k, v in params.items() if v is not None]
        if mod.param_keys is None
        else mod.param_keys
    )
    missing = [key for key in keys if key not in params]
    if mod.require_params and missing:
        raise RuntimeError(f"LRP rule for {module} needs the missing parameters {missing}")
    modifier = zero_wrap(mod.zero_params or [])(mod.modifier)
    saved = {key: params[key] for key in keys if params.get(key) is not None}
    try:
        for key, value in saved.items():
            params[key] = modifier(value, key)
        yield
    finally:
        params.update(saved)


class _SecondOrder:
    """Mixin for a `zennit.core.BasicHook` rule: the backward described in the module docstring."""

    input_modifiers: Sequence[Any]
    param_modifiers: Sequence[Any]
    output_modifiers: Sequence[Any]
    stored_tensors: dict[str, Any]

    def backward(self, module: nn.Module, grad_input: Any, grad_output: Any) -> tuple[Any, ...]:
        create_graph = torch.is_grad_enabled()  # the outer backward's create_graph
        original = self.stored_tensors["input"][0]
        inputs, outputs = [], []
        modifiers = zip(
            self.input_modifiers, self.param_modifiers, self.output_modifiers, strict=True
        )
        with torch.enable_grad():
            for in_mod, param_mod, out_mod in modifiers:
                x = in_mod(original.clone())
                if not x.requires_grad:
                    x = x.requires_grad_()
                with _modified_parameters(module, param_mod):
                    outputs.append(out_mod(module.forward(x)))
                inputs.append(x)
            grad_outputs = self.gradient_mapper(grad_output[0], outputs)  # type: ignore[attr-defined]
            gradients = torch.autograd.grad(
                outputs, inputs, grad_outputs=grad_outputs, create_graph=create_graph
            )
            relevance = self.reducer(inputs, gradients)  # type: ignore[attr-defined]
        if not create_graph:
            relevance = relevance.detach()
        return tuple(relevance if g.shape == relevance.shape else None for g in grad_input)


class Epsilon(_SecondOrder, rules.Epsilon):
    """LRP-epsilon (Bach et al. 2015); epsilon -> 0 is LRP-0."""


class ZPlus(_SecondOrder, rules.ZPlus):
    """LRP-z+ (alpha 1, beta 0; Montavon et al. 2017)."""


class Gamma(_SecondOrder, rules.Gamma):
    """LRP-gamma (Montavon et al. 2019)."""


class AlphaBeta(_SecondOrder, rules.AlphaBeta):
    """LRP-alpha-beta (Bach et al. 2015)."""


class ZBox(_SecondOrder, rules.ZBox):
    """LRP-z^B for bounded inputs (Montavon et al. 2017)."""


class Norm(_SecondOrder, rules.Norm):
    """Relevance split in proportion to the summands (sums, average pools)."""


def build_composite(
    name: str,
    *,
    epsilon: float,
    gamma: float,
    low: Tensor,
    high: Tensor,
    canonizers: list[Any],
    stabilizer: float = 1e-6,
) -> Composite:
    """The Zennit composite `name` (one of `COMPOSITES`) with the rules of this module.

    Linear layers get Epsilon; convolutions ZPlus ("epsilon_plus"), Epsilon ("epsilon"), Gamma
    after a first ZBox layer bounded by `low`/`high` ("epsilon_gamma_box") or AlphaBeta(2, 1)
    ("alpha2_beta1"), as Zennit's EpsilonPlus, EpsilonGammaBox and EpsilonAlpha2Beta1.
    """
    layer_map: list[tuple[Any, Any]] = [
        (Normalize, rules.Pass()),
        (Activation, rules.Pass()),
        (Hardsigmoid, rules.Pass()),  # the twice-differentiable nn.Hardsigmoid of MobileNetV3
        (Sum, Norm(stabilizer=stabilizer)),
        (AvgPool, Norm(stabilizer=stabilizer)),
        (BatchNorm, rules.Pass()),
    ]
    conv_rule = {
        "epsilon_plus": lambda: ZPlus(stabilizer=stabilizer),
        "epsilon": lambda: Epsilon(epsilon=epsilon),
        "epsilon_gamma_box": lambda: Gamma(gamma=gamma, stabilizer=stabilizer),
        "alpha2_beta1": lambda: AlphaBeta(alpha=2.0, beta=1.0, stabilizer=stabilizer),
    }[name]()
    layer_map += [(Convolution, conv_rule), (nn.Linear, Epsilon(epsilon=epsilon))]
    if name == "epsilon_gamma_box":
        first_map = [(Convolution, ZBox(low=low, high=high, stabilizer=stabilizer))]
        return SpecialFirstLayerMapComposite(layer_map, first_map, canonizers=canonizers)
    return LayerMapComposite(layer_map, canonizers=canonizers)


def ruled_modules(composite: Composite, model: nn.Module) -> set[nn.Module]:
    """The modules of `model` (after its canonizers) that `composite` gives a rule."""
    ctx: dict[str, Any] = {}
    return {
        module
        for name, module in model.named_modules()
        if composite.module_map(ctx, name, module) is not None
    }


def call_rules(stabilizer: float = 1e-6) -> dict[str, Any]:
    """The rule templates of intercepted calls (robust_train/explain/_lrp_functional.py): the
    pass rule of activations and `Normalize`, the sum rule of `Sum` and average pools."""
    return {"pass_rule": rules.Pass(), "sum_rule": Norm(stabilizer=stabilizer)}
