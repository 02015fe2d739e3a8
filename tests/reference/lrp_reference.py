"""Zennit's own attributor as the reference for `robust_train.explain.lrp` (test helper)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from zennit.attribution import Gradient
from zennit.canonizers import AttributeCanonizer, NamedMergeBatchNorm, SequentialMergeBatchNorm
from zennit.composites import (
    EpsilonAlpha2Beta1,
    EpsilonGammaBox,
    EpsilonPlus,
    LayerMapComposite,
    layer_map_base,
)
from zennit.layer import Sum
from zennit.rules import Epsilon, Pass
from zennit.torchvision import ResNetCanonizer, VGGCanonizer
from zennit.types import Convolution

from robust_train.models import Normalize, TorchvisionClassifier
from robust_train.models.resnet_cifar import BasicBlock
from robust_train.models.torchvision_parts import Hardsigmoid


def _cifar_forward(self, x):
    out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
    return self.relu2(self.canonizer_sum(torch.stack([self.shortcut(x), out], dim=-1)))


def cifar_block_canonizer() -> AttributeCanonizer:
    """Written here from Zennit's ResNetBasicBlockCanonizer, independently of the package's."""

    def attributes(name, module):
        if isinstance(module, BasicBlock):
            return {"forward": _cifar_forward.__get__(module), "canonizer_sum": Sum()}
        return None

    return AttributeCanonizer(attributes)


def _inverted_residual_forward(self, x):
    result = self.block(x)
    if self.use_res_connect:
        result = self.canonizer_sum(torch.stack([result, x], dim=-1))
    return result


def inverted_residual_canonizer() -> AttributeCanonizer:
    """The residual `result += input` of torchvision's MobileNetV3 blocks as a `Sum` module."""

    def attributes(name, module):
        if type(module).__name__ == "InvertedResidual":
            return {"forward": _inverted_residual_forward.__get__(module), "canonizer_sum": Sum()}
        return None

    return AttributeCanonizer(attributes)


def _densenet_forward(self, x):
    out = self.final_relu(self.backbone.features(self.normalize(x)))
    return self.backbone.classifier(torch.flatten(self.canonizer_pool(out), 1))


def densenet_pool_canonizer() -> AttributeCanonizer:
    """The functional global average pool of `TorchvisionClassifier("densenet...")` as a module."""

    def attributes(name, module):
        if isinstance(module, TorchvisionClassifier) and module.final_relu is not None:
            pool = nn.AdaptiveAvgPool2d(1)
            return {"_forward": _densenet_forward.__get__(module), "canonizer_pool": pool}
        return None

    return AttributeCanonizer(attributes)


def densenet_pairs(model: nn.Module) -> list[tuple[tuple[str], str]]:
    """The convolution -> BatchNorm pairs of a torchvision DenseNet, by name: conv0 -> norm0 and,
    in every dense layer, conv1 -> norm2 (the other BatchNorms read concatenations)."""
    names = [name for name, _ in model.named_modules()]
    pairs = [((n,), n[: -len("conv0")] + "norm0") for n in names if n.endswith("features.conv0")]
    pairs += [((n,), n[: -len("conv1")] + "norm2") for n in names if n.endswith(".conv1")]
    return pairs


def reference_canonizers(kind: str, model: nn.Module) -> list:
    if kind == "plain":
        return []
    if kind == "sequential":
        return [SequentialMergeBatchNorm()]
    if kind == "cifar":
        return [SequentialMergeBatchNorm(), cifar_block_canonizer()]
    if kind == "resnet":
        return [ResNetCanonizer()]
    if kind == "vgg":
        return [VGGCanonizer()]
    if kind == "densenet":
        return [NamedMergeBatchNorm(densenet_pairs(model)), densenet_pool_canonizer()]
    if kind == "mobilenet":
        return [SequentialMergeBatchNorm(), inverted_residual_canonizer()]
    raise ValueError(kind)


def reference_composite(name: str, canonizers: list, low: Tensor, high: Tensor):
    extra = [(Normalize, Pass()), (Hardsigmoid, Pass())]
    if name == "epsilon_plus":
        return EpsilonPlus(layer_map=extra, canonizers=canonizers)
    if name == "alpha2_beta1":
        return EpsilonAlpha2Beta1(layer_map=extra, canonizers=canonizers)
    if name == "epsilon_gamma_box":
        return EpsilonGammaBox(low=low, high=high, layer_map=extra, canonizers=canonizers)
    layer_map = extra + layer_map_base() + [(Convolution, Epsilon()), (nn.Linear, Epsilon())]
    return LayerMapComposite(layer_map, canonizers=canonizers)


def zennit_lrp(model, x, target, composite, kind, low, high) -> Tensor:
    """`zennit.attribution.Gradient` with `attr_output` the one-hot of `target`."""
    comp = reference_composite(composite, reference_canonizers(kind, model), low, high)
    with Gradient(model, comp) as attributor:
        logits = model(x)
        onehot = torch.nn.functional.one_hot(target, logits.shape[1]).to(x)
        _, relevance = attributor(x, onehot)
    return relevance


def randomize_batchnorms(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial running statistics and affine parameters, so that merging them matters, and
    eps 0: Zennit's merge leaves the BatchNorm computing x / sqrt(1 + eps), not x (ours computes
    x), a 5e-6 relative change per layer that random deep nets amplify to 1 % (DenseNet-121)."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            n = m.num_features
            m.running_mean.copy_(0.2 * torch.randn(n, generator=g))
            m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            m.eps = 0.0
            with torch.no_grad():
                m.weight.copy_(torch.rand(n, generator=g) + 0.5)
                m.bias.copy_(0.2 * torch.randn(n, generator=g))
    return model
