"""`lrp` on operations a model's own forward writes as calls: each equals its module twin.

A residual `out + x`, a functional activation `F.softplus(h, beta=2)`, a pooling `h.mean((2, 3))`
or a normalisation `(x - mean) / std` in a user's forward must give the map of the same network
written with `zennit.layer.Sum`, `nn.Softplus`, `nn.AdaptiveAvgPool2d` or `Normalize` (the twin,
same weights), for every composite, with and without biases; the relevance of a bias-free
network sums to 1 where the rules conserve it; a functional linear layer is refused by name; and
the derivative of the map (attacks, penalties) is the twin's. Tolerance float32: 1e-5 relative
plus 1e-6 of the largest |relevance| (the twin runs the same operations).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from zennit.layer import Sum

from robust_train.explain import LRP_COMPOSITES, lrp
from robust_train.models import Normalize
from robust_train.models.softplus import smooth_relus
from tests.reference.lrp_reference import zennit_lrp

RESIDUALS = {
    "add": lambda out, x: out + x,
    "radd": lambda out, x: x + out,
    "iadd": lambda out, x: out.__iadd__(x),
    "add_": lambda out, x: out.add_(x),
    "torch.add": lambda out, x: torch.add(out, x),
    "sum_builtin": lambda out, x: sum([out, x]),
}


class Residual(nn.Module):
    """conv -> block(conv, relu, conv) + shortcut -> relu -> linear; the residual sum written
    as `residual(out, x)`, or (`residual=None`) as the twin: `zennit.layer.Sum` on the stack."""

    def __init__(self, residual, *, bias: bool, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.stem = nn.Conv2d(1, 4, 3, padding=1, bias=bias)
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1, bias=bias)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1, bias=bias)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(4 * 36, 5, bias=bias)
        self.residual, self.sum = residual, Sum()

    def forward(self, x):
        h = self.relu(self.stem(x))
        out = self.conv2(self.relu(self.conv1(h)))
        if self.residual is None:
            out = self.sum(torch.stack([out, h], dim=-1))
        else:
            out = self.residual(out, h)
        return self.fc(self.relu(out).flatten(1))


def _pair(build):
    functional, twin = build(False), build(True)
    twin.load_state_dict(functional.state_dict())
    return functional.eval(), twin.eval()


def _assert_twins(functional, twin, composite, *, dtype=torch.float32, **options):
    x = torch.rand(3, 1, 6, 6, dtype=dtype, generator=torch.Generator().manual_seed(1))
    t = torch.tensor([0, 2, 4])
    ours = lrp(functional.to(dtype), x, t, composite=composite, **options)
    theirs = lrp(twin.to(dtype), x, t, composite=composite, **options)
    assert theirs.abs().max() > 0
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6 * float(theirs.abs().max()))
    return ours


@pytest.mark.parametrize("composite", LRP_COMPOSITES)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("style", RESIDUALS)
def test_a_residual_written_as_an_addition_gets_the_sum_rule(style, bias, composite):
    functional, twin = _pair(lambda twin: Residual(None if twin else RESIDUALS[style], bias=bias))
    _assert_twins(functional, twin, composite)


@pytest.mark.parametrize("composite", ["epsilon", "epsilon_plus"])
def test_the_relevance_of_a_bias_free_residual_network_sums_to_one(composite):
    """The epsilon and z+ rules conserve relevance on a bias-free ReLU network: the map sums to
    1 (the one-hot of the target) up to the rules' stabilisers (measured: within 3e-4, as the
    twin). Without the sum rule the residual counts it twice (2.00)."""
    model = Residual(RESIDUALS["add"], bias=False).double().eval()
    x = torch.rand(4, 1, 6, 6, dtype=torch.float64)
    relevance = lrp(model, x, torch.tensor([0, 1, 2, 3]), composite=composite, epsilon=1e-12)
    totals = relevance.sum(dim=(1, 2, 3))
    torch.testing.assert_close(totals, torch.ones_like(totals), rtol=0, atol=1e-3)


ACTIVATIONS = {
    "F.softplus(beta=2)": (lambda h: F.softplus(h, beta=2), nn.Softplus(beta=2)),
    "torch.sigmoid": (torch.sigmoid, nn.Sigmoid()),
    "Tensor.tanh": (lambda h: h.tanh(), nn.Tanh()),
    "F.gelu": (F.gelu, nn.GELU()),
    "F.silu(inplace)": (lambda h: F.silu(h, inplace=True), nn.SiLU()),
    "F.elu": (F.elu, nn.ELU()),
    "F.leaky_relu(0.1)": (lambda h: F.leaky_relu(h, 0.1), nn.LeakyReLU(0.1)),
    "Tensor.relu_": (lambda h: h.relu_(), nn.ReLU()),
}


class Activated(nn.Module):
    """conv -> act -> conv -> act -> linear, the activation a call or (twin) a module."""

    def __init__(self, act, *, bias: bool = True, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1, bias=bias)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1, bias=bias)
        self.fc = nn.Linear(4 * 36, 5, bias=bias)
        self.act = act

    def forward(self, x):
        h = self.act(self.conv2(self.act(self.conv1(x))))
        return self.fc(h.flatten(1))


@pytest.mark.parametrize("composite", ["epsilon_plus", "epsilon", "alpha2_beta1"])
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_a_functional_activation_gets_the_pass_rule_of_its_module(name, composite):
    call, module = ACTIVATIONS[name]
    functional, twin = _pair(lambda twin: Activated(module if twin else call))
    _assert_twins(functional, twin, composite)


POOLS = {
    "F.avg_pool2d": (lambda h: F.avg_pool2d(h, 2), nn.AvgPool2d(2)),
    "F.adaptive_avg_pool2d": (lambda h: F.adaptive_avg_pool2d(h, 2), nn.AdaptiveAvgPool2d(2)),
    "Tensor.mean": (lambda h: h.mean((2, 3), keepdim=True), nn.AdaptiveAvgPool2d(1)),
    "torch.sum": (lambda h: torch.sum(h.flatten(2), dim=-1), nn.Sequential(nn.Flatten(2), Sum())),
}


class Pooled(nn.Module):
    def __init__(self, pool, *, bias: bool, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=bias)
        self.relu = nn.ReLU()
        self.fc = nn.LazyLinear(5, bias=bias)
        self.pool = pool

    def forward(self, x):
        return self.fc(self.pool(self.relu(self.conv(x))).flatten(1))


@pytest.mark.parametrize("composite", ["epsilon_plus", "epsilon", "alpha2_beta1"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("name", POOLS)
def test_a_functional_pool_or_mean_gets_the_sum_rule_of_an_average_pool(name, bias, composite):
    call, module = POOLS[name]
    functional, twin = Pooled(call, bias=bias), Pooled(module, bias=bias)
    functional(torch.rand(1, 1, 6, 6)), twin(torch.rand(1, 1, 6, 6))  # materialise LazyLinear
    twin.load_state_dict(functional.state_dict())
    _assert_twins(functional.eval(), twin.eval(), composite)


class Standardised(nn.Module):
    """The input standardised and halved in the forward, `0.5 * ((x - mean) / std)`, or (twin)
    standardised by `Normalize` with the halving folded into the first convolution's weights."""

    def __init__(self, twin: bool) -> None:
        super().__init__()
        self.normalize = Normalize([0.4], [0.3]) if twin else None
        self.body = Activated(nn.ReLU())
        if twin:
            self.body.conv1.weight.data *= 0.5

    def forward(self, x):
        if self.normalize is not None:
            return self.body(self.normalize(x))
        return self.body(0.5 * ((x - 0.4) / 0.3))


@pytest.mark.parametrize("composite", ["epsilon_plus", "epsilon", "alpha2_beta1"])
def test_scaling_by_a_constant_passes_relevance_on_like_normalize(composite):
    """Without the pass rule the gradient of `/ 0.3` and `0.5 *` multiplies the relevance."""
    functional, twin = Standardised(twin=False).eval(), Standardised(twin=True).eval()
    x = torch.rand(2, 1, 6, 6)
    torch.testing.assert_close(functional(x), twin(x))
    _assert_twins(functional, twin, composite)


class Gated(nn.Module):
    """A gate (product of two activations): no rule, the gradient, as in Zennit."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.gate = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(1, 4, 3, padding=1)
        self.relu, self.sigmoid = nn.ReLU(), nn.Sigmoid()
        self.fc = nn.Linear(4 * 36, 5)

    def forward(self, x):
        return self.fc((self.relu(self.conv(x)) * self.sigmoid(self.gate(x))).flatten(1))


def test_a_product_of_activations_keeps_the_gradient_as_in_zennit():
    model = Gated().eval()
    x, t = torch.rand(2, 1, 6, 6), torch.tensor([1, 3])
    zero, one = torch.zeros(1, 1, 1, 1), torch.ones(1, 1, 1, 1)
    theirs = zennit_lrp(model, x, t, "epsilon_plus", "plain", zero, one)
    torch.testing.assert_close(lrp(model, x, t), theirs, rtol=1e-5, atol=1e-7)


class FunctionalLayer(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.weight = nn.Parameter(torch.randn(4, 1, 3, 3))
        self.conv, self.relu = nn.Conv2d(1, 4, 3, padding=1), nn.ReLU()
        self.fc = nn.Linear(4 * 36, 5)
        self.proj = nn.Parameter(torch.randn(4 * 36, 4 * 36))

    def forward(self, x):
        if self.kind == "conv2d":
            h = F.conv2d(x, self.weight, padding=1)
        else:
            h = self.relu(self.conv(x))
        h = h.flatten(1)
        if self.kind == "linear":
            h = F.linear(h, self.proj)
        if self.kind == "matmul":
            h = h @ self.proj
        return self.fc(h)


@pytest.mark.parametrize(
    ("kind", "call", "module"),
    [
        ("conv2d", "torch.nn.functional.conv2d", "nn.Conv2d"),
        ("linear", "torch.nn.functional.linear", "nn.Linear"),
        ("matmul", "Tensor.matmul", "nn.Linear"),
    ],
)
def test_a_functional_linear_layer_is_refused_by_name(kind, call, module):
    model = FunctionalLayer(kind).eval()
    hooks = [dict(m._forward_hooks) for m in model.modules()]
    with pytest.raises(ValueError, match=rf"`{call}`.*\(FunctionalLayer\).*`{module}` module"):
        lrp(model, torch.rand(2, 1, 6, 6), torch.tensor([0, 1]))
    assert [dict(m._forward_hooks) for m in model.modules()] == hooks
    assert torch._C._len_torch_function_stack() == 0


class Smooth(nn.Module):
    """float64 net with every intercepted kind of call: functional softplus, a residual
    addition, a functional average pool; `twin=True` writes them as modules."""

    def __init__(self, twin: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(1, 3, 3, padding=1)
        self.conv2 = nn.Conv2d(3, 3, 3, padding=1)
        self.fc = nn.Linear(3 * 9, 4)
        self.twin = twin
        self.act, self.sum, self.pool = nn.Softplus(beta=3.0), Sum(), nn.AvgPool2d(2)

    def forward(self, x):
        if self.twin:
            h = self.act(self.conv1(x))
            h = self.sum(torch.stack([self.act(self.conv2(h)), h], dim=-1))
            return self.fc(self.pool(h).flatten(1))
        h = F.softplus(self.conv1(x), beta=3.0)
        h = F.softplus(self.conv2(h), beta=3.0) + h
        return self.fc(F.avg_pool2d(h, 2).flatten(1))


@pytest.mark.parametrize("composite", ["epsilon_plus", "epsilon"])
def test_the_derivative_of_the_map_is_the_twins_and_matches_finite_differences(composite):
    """Second order (attacks, penalties): the gradient of a function of the map w.r.t. the input
    and a weight equals the twin's and central differences (float64)."""
    functional, twin = _pair(Smooth)
    functional, twin = functional.double(), twin.double()
    x0, t = torch.rand(2, 1, 6, 6, dtype=torch.float64), torch.tensor([1, 3])
    weights = torch.linspace(0, 1, 36, dtype=torch.float64).view(6, 6)

    def value(model, x):
        relevance = lrp(model, x, t, composite=composite, epsilon=0.1, create_graph=True)
        return (relevance.sum(1).pow(2) * weights).sum()

    grads = []
    for model in (functional, twin):
        x = x0.clone().requires_grad_(True)
        grads.append(torch.autograd.grad(value(model, x), [x, model.conv2.weight]))
    for ours, theirs in zip(*grads, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-7, atol=1e-12)
    h, index = 1e-6, (1, 0, 2, 3)
    up, down = x0.clone(), x0.clone()
    up[index] += h
    down[index] -= h
    fd = (value(functional, up) - value(functional, down)).item() / (2 * h)
    assert grads[0][0][index].item() == pytest.approx(fd, rel=1e-5, abs=1e-9)


def test_functional_relus_under_the_softplus_surrogate_equal_their_modules():
    functional, twin = _pair(lambda twin: Activated(nn.ReLU() if twin else F.relu))
    with smooth_relus(5.0):
        _assert_twins(functional, twin, "epsilon_plus")


def test_nothing_is_left_after_the_call():
    model = Residual(RESIDUALS["iadd"], bias=True).eval()
    state = [(dict(m._forward_hooks), dict(m._forward_pre_hooks)) for m in model.modules()]
    x = torch.rand(2, 1, 6, 6, requires_grad=True)
    relevance = lrp(model, x, torch.tensor([0, 1]), create_graph=True)
    assert relevance.requires_grad and torch._C._len_torch_function_stack() == 0
    assert [(dict(m._forward_hooks), dict(m._forward_pre_hooks)) for m in model.modules()] == state
    plain = torch.autograd.grad(model(x)[:, 0].sum(), x)[0]  # a plain backward: no rule left
    h = model.relu(model.stem(x))
    expected = torch.autograd.grad(
        model.fc(model.relu(model.conv2(model.relu(model.conv1(h))) + h).flatten(1))[:, 0].sum(),
        x,
    )[0]
    torch.testing.assert_close(plain, expected)
