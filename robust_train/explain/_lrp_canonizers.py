"""Canonizers for LRP that keep the autograd graph: BatchNorm merging and residual sums.

LRP rules are defined for linear layers followed by activations (Montavon et al. 2019, sec. 10.3;
Zennit's canonizers). A BatchNorm right after a linear layer or convolution is merged into it,
and a residual addition is rewritten as a `zennit.layer.Sum` module that gets a sum rule:

- `MergeBatchNorm(pairs)`: Zennit's `MergeBatchNorm` writes the merged weights into
  `weight.data` and puts the originals back on removal, which detaches them from the parameters
  and changes, after the call, tensors that the graph saved (a later double backward would read
  the unmerged weights). Here the merged weight `w * gamma / sqrt(var + eps)` and bias are
  tensors computed FROM the parameters, put in the module's parameter slots during the call (the
  original Parameter objects go back afterwards) and the BatchNorm computes the identity. The
  merged layer uses the running statistics, as at inference, in either mode.
- `merge_pairs(model, sample)` finds the pairs by data flow, not by module order (Zennit's
  `SequentialMergeBatchNorm`): one forward of a single row records which BatchNorm reads
  exactly the output of which linear layer, so DenseNet's pre-activation BatchNorms (which read
  a concatenation) stay unmerged and get the Pass rule.
- `CifarBasicBlockCanonizer`: the sum rule for `robust_train.models.resnet_cifar.BasicBlock`,
  as Zennit's `ResNetBasicBlockCanonizer` does for torchvision's blocks (used beside it).
"""

from __future__ import annotations

import types
from collections import Counter
from typing import Any

import torch
from torch import Tensor, nn
from zennit.canonizers import AttributeCanonizer, Canonizer
from zennit.layer import Sum
from zennit.torchvision import ResNetBasicBlockCanonizer, ResNetBottleneckCanonizer

from robust_train.core.runtime import eval_mode
from robust_train.models.resnet_cifar import BasicBlock as CifarBasicBlock

__all__ = ["CifarBasicBlockCanonizer", "MergeBatchNorm", "canonizers_for", "merge_pairs"]

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
_MERGEABLE = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def _identity(x: Tensor) -> Tensor:
    return x


def merge_pairs(model: nn.Module, sample: Tensor) -> list[tuple[nn.Module, nn.Module]]:
    """(linear, batch_norm) pairs where the BatchNorm reads exactly the linear layer's output,
    untouched by in-place ops, each called once, from one forward of `sample` (no gradients,
    eval mode, every module's flag restored). No BatchNorm with running statistics: no forward.
    """
    norms = [
        m for m in model.modules() if isinstance(m, _BATCH_NORMS) and m.running_var is not None
    ]
    if not norms:
        return []
    outputs: dict[int, tuple[nn.Module, Tensor, int]] = {}
    reads: dict[nn.Module, tuple[Tensor, int]] = {}
    calls: Counter[nn.Module] = Counter()

    def after_linear(module: nn.Module, args: Any, output: Tensor) -> None:
        calls[module] += 1
        outputs[id(output)] = (module, output, output._version)

    def before_norm(module: nn.Module, args: Any) -> None:
        calls[module] += 1
        reads[module] = (args[0], args[0]._version)

    handles = [m.register_forward_pre_hook(before_norm) for m in norms]
    handles += [
        m.register_forward_hook(after_linear) for m in model.modules() if isinstance(m, _MERGEABLE)
    ]
    try:
        with torch.no_grad(), eval_mode(model):
            model(sample)
    finally:
        for handle in handles:
            handle.remove()
    pairs = []
    for norm, (tensor, version) in reads.items():
        hit = outputs.get(id(tensor))
        if hit is None or hit[1] is not tensor or hit[2] != version:
            continue
        linear = hit[0]
        if calls[linear] == 1 and calls[norm] == 1:
            pairs.append((linear, norm))
    return pairs


def _merged(weight: Tensor, bias: Tensor | None, norm: Any) -> tuple[Tensor, Tensor]:
    """Weight and bias of `linear -> norm` as one layer (running statistics), as functions of the
    parameters; the same formula as Zennit's `MergeBatchNorm.merge_batch_norm`."""
    root = (norm.running_var + norm.eps) ** 0.5
    scale = 1.0 / root if norm.weight is None else norm.weight / root
    shift = ((0.0 if bias is None else bias) - norm.running_mean) * scale
    if norm.bias is not None:
        shift = shift + norm.bias
    return weight * scale.view(-1, *(1,) * (weight.dim() - 1)), shift


class MergeBatchNorm(Canonizer):
    """Merge each BatchNorm of `pairs` into its linear layer, keeping the graph (module doc)."""

    def __init__(self, pairs: list[tuple[nn.Module, nn.Module]]) -> None:
        self.pairs = pairs
        self.saved: list[tuple[nn.Module, Any, Any]] = []
        self.norms: list[nn.Module] = []

    def apply(self, root_module: nn.Module) -> list[Canonizer]:
        instance = self.copy()
        instance.register()
        return [instance]

    def register(self) -> None:
        for linear, norm in self.pairs:
            params: dict[str, Any] = linear._parameters
            weight, bias = params["weight"], params.get("bias")
            self.saved.append((linear, weight, bias))
            params["weight"], params["bias"] = _merged(weight, bias, norm)
            norm.forward = _identity  # type: ignore[method-assign]
            self.norms.append(norm)

    def remove(self) -> None:
        for linear, weight, bias in self.saved:
            params: dict[str, Any] = linear._parameters
            params["weight"], params["bias"] = weight, bias
        for norm in self.norms:
            del norm.forward
        self.saved, self.norms = [], []

    def copy(self) -> MergeBatchNorm:
        return MergeBatchNorm(self.pairs)


def _cifar_block_forward(self: CifarBasicBlock, x: Tensor) -> Tensor:
    """`BasicBlock.forward` with the residual addition done by the `canonizer_sum` module."""
    out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
    summed: Any = self.canonizer_sum
    return self.relu2(summed(torch.stack([self.shortcut(x), out], dim=-1)))


class CifarBasicBlockCanonizer(AttributeCanonizer):
    """Give the residual sum of `ResNet18CIFAR`'s blocks a `Sum` module (and so the sum rule)."""

    def __init__(self) -> None:
        super().__init__(self._attribute_map)

    @staticmethod
    def _attribute_map(name: str, module: nn.Module) -> dict[str, Any] | None:
        if isinstance(module, CifarBasicBlock):
            return {
                "forward": types.MethodType(_cifar_block_forward, module),
                "canonizer_sum": Sum(),
            }
        return None

    def copy(self) -> CifarBasicBlockCanonizer:
        return CifarBasicBlockCanonizer()


def canonizers_for(model: nn.Module, sample: Tensor) -> list[Canonizer]:
    """The canonizers `lrp` applies: graph-keeping BatchNorm merges found by data flow, then the
    residual sums of torchvision's ResNet blocks (Zennit's own canonizers) and of the project's
    CIFAR ResNet. Each applies only to the modules it knows."""
    return [
        MergeBatchNorm(merge_pairs(model, sample)),
        ResNetBottleneckCanonizer(),
        ResNetBasicBlockCanonizer(),
        CifarBasicBlockCanonizer(),
    ]
