"""Soundness of the deterministic explanation bounds: on tiny networks the bounds contain the
exact map (autograd) at every vertex of the box and at random points of it; CROWN is at least as
tight as the interval bounds on every pre-activation and contains the exact pre-activations;
epsilon 0 gives the exact map; unsupported layers are refused by name; on the shipped robust MNIST
model no attacked or random point goes below the certified top-k overlap."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from robust_train.certify.crown import crown_tightener
from robust_train.certify.deterministic import certify_topk, explanation_bounds
from robust_train.certify.graph import UnsupportedLayerError, trace_network
from robust_train.certify.interval import forward_bounds, input_box
from robust_train.explain import input_x_gradient, saliency
from robust_train.explain.maps import importance_map
from robust_train.explain.similarity import topk_mask


class Residual(nn.Module):
    """conv -> ReLU -> conv, added to the input, -> ReLU -> linear (a residual block)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 3, 3, padding=1)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(3, 1, 3, padding=1)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(9, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(x + self.conv2(self.relu(self.conv1(x)))))


def conv_net() -> nn.Module:
    net = nn.Sequential(
        nn.Conv2d(1, 4, 2, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2, stride=1),  # overlapping windows
        nn.Conv2d(4, 4, 2),
        nn.ReLU(),
        nn.AvgPool2d(2, stride=1),
        nn.Flatten(),
        nn.Linear(4, 6),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(6, 3),
    )
    net[1].running_mean.uniform_(-0.3, 0.3)
    net[1].running_var.uniform_(0.5, 2.0)
    return net


def mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(9, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(),
                         nn.Linear(8, 3))  # fmt: skip


def networks() -> list[tuple[str, nn.Module, tuple[str, ...]]]:
    torch.manual_seed(0)
    return [
        ("mlp", mlp().double().eval(), ("interval", "crown")),
        ("conv", conv_net().double().eval(), ("interval", "crown")),
        ("residual", Residual().double().eval(), ("interval", "crown")),
    ]


def points_of_the_box(x: torch.Tensor, eps: float, n_random: int) -> torch.Tensor:
    """Every vertex of [x - eps, x + eps] cap [0, 1] and `n_random` uniform points of it."""
    box = input_box(x, eps)
    corners = torch.tensor(list(itertools.product((0, 1), repeat=x.numel())), dtype=x.dtype)
    vertices = box.lower.flatten() + corners * (box.upper - box.lower).flatten()
    random = (
        box.lower.flatten()
        + torch.rand(n_random, x.numel(), dtype=x.dtype) * (box.upper - box.lower).flatten()
    )
    return torch.cat([vertices, random]).view(-1, *x.shape[1:])


@pytest.mark.parametrize("explainer", ["saliency", "input_x_gradient"])
def test_the_bounds_contain_the_map_at_every_vertex_and_random_points(explainer) -> None:
    explain = {"saliency": saliency, "input_x_gradient": input_x_gradient}[explainer]
    torch.manual_seed(1)
    x = torch.rand(1, 1, 3, 3, dtype=torch.float64) * 0.6 + 0.2
    x[0, 0, 0, 0] = 0.02  # its box is clipped at 0
    for name, net, methods in networks():
        target = net(x).argmax(1)
        points = points_of_the_box(x, 0.08, 300)
        exact = explain(net, points, target.expand(len(points)))
        for method in methods:
            b = explanation_bounds(net, x, target, epsilon=0.08, method=method, explainer=explainer)
            assert (b.lower <= exact + 1e-12).all() and (exact <= b.upper + 1e-12).all(), (
                name, method,
            )  # fmt: skip
            imp = importance_map(exact)
            assert (b.importance_lower <= imp + 1e-12).all(), (name, method)
            assert (imp <= b.importance_upper + 1e-12).all(), (name, method)
            assert (b.upper - b.lower).max() > 1e-3, (name, method)  # not a fixed map
            assert b.stable.item() < 1, (name, method)  # some ReLU is uncertain


def test_crown_is_at_least_as_tight_and_contains_the_exact_pre_activations() -> None:
    torch.manual_seed(2)
    x = torch.rand(2, 1, 3, 3, dtype=torch.float64)
    tighter = 0
    for name, net, methods in networks():
        if "crown" not in methods or name == "residual":  # test_crown_residual.py
            continue
        steps = trace_network(net)
        coarse = forward_bounds(steps, input_box(x, 0.3))
        fine = forward_bounds(steps, input_box(x, 0.3), crown_tightener(steps, rows_per_chunk=3))
        exact: dict[str, torch.Tensor] = {}
        hooks = [
            m.register_forward_hook(lambda m, i, o, key=key, out=exact: out.__setitem__(key, i[0]))
            for key, m in net.named_modules()
            if isinstance(m, nn.ReLU)
        ]
        points = torch.cat([points_of_the_box(x[i : i + 1], 0.3, 200) for i in range(2)])
        net(points)
        for hook in hooks:
            hook.remove()
        for step in (s for s in steps if s.kind == "relu"):
            c, f = coarse[step.args[0]], fine[step.args[0]]
            assert (f.lower >= c.lower - 1e-12).all(), name  # rounding of the sums aside
            assert (f.upper <= c.upper + 1e-12).all(), name
            tighter += int((f.lower > c.lower + 1e-9).sum() + (f.upper < c.upper - 1e-9).sum())
            z = exact[str(step.path)]
            z = z.view(2, -1, *z.shape[1:])  # (image, point, ...)
            assert (f.lower.unsqueeze(1) <= z + 1e-12).all(), name
            assert (z <= f.upper.unsqueeze(1) + 1e-12).all(), name
    assert tighter > 0  # back-substitution tightened some bound


@pytest.mark.parametrize("explainer", ["saliency", "input_x_gradient"])
def test_epsilon_zero_gives_the_exact_map(explainer) -> None:
    explain = {"saliency": saliency, "input_x_gradient": input_x_gradient}[explainer]
    x = torch.rand(3, 1, 3, 3, dtype=torch.float64)
    for name, net, methods in networks():
        target = torch.tensor([0, 1, 2])
        exact = explain(net, x, target)
        for method in methods:
            b = explanation_bounds(net, x, target, epsilon=0.0, method=method, explainer=explainer)
            torch.testing.assert_close(b.lower, exact, msg=name)
            torch.testing.assert_close(b.upper, exact, msg=name)


def test_unsupported_layers_and_arguments_are_refused_by_name() -> None:
    x, y = torch.rand(1, 1, 3, 3), torch.tensor([0])
    tanh = nn.Sequential(nn.Flatten(), nn.Linear(9, 4), nn.Tanh(), nn.Linear(4, 2))
    with pytest.raises(UnsupportedLayerError, match=r"layer '2' \(Tanh\)"):
        explanation_bounds(tanh, x, y, epsilon=0.1)
    with pytest.raises(ValueError, match="`method` must be one of"):
        explanation_bounds(mlp(), x, y, epsilon=0.1, method="lp")
    with pytest.raises(ValueError, match="`explainer` must be one of"):
        explanation_bounds(mlp(), x, y, epsilon=0.1, explainer="grad_cam")
    with pytest.raises(ValueError, match="`epsilon`"):
        explanation_bounds(mlp(), x, y, epsilon=-0.1)


def test_certified_overlap_falls_with_epsilon_and_is_one_at_zero() -> None:
    torch.manual_seed(3)
    net = conv_net().double().eval()
    x = torch.rand(4, 1, 3, 3, dtype=torch.float64)
    cert = certify_topk(net, x, net(x).argmax(1), epsilons=[0.0, 0.01, 0.3], k=3)
    assert cert.certified_overlap.shape == (4, 3)
    assert (cert.certified_overlap[:, 0] == 1).all()  # ties aside, the map is its own top-k
    assert (cert.certified_overlap.diff(dim=1) <= 0).all()
    assert (cert.certified_overlap[:, 2] < 1).any()


@pytest.fixture(scope="module")
def shipped_robust():
    from robust_train.data import MNIST5kDataModule
    from robust_train.models import load_classifier

    model = load_classifier("mnist5k_robust")
    dm = MNIST5kDataModule()
    dm.setup()
    x, y = dm.test_set.tensors
    x, y = x[:6], y[:6]
    keep = model(x).argmax(1) == y
    return model, x[keep][:3], y[keep][:3]


@pytest.mark.slow
def test_no_attack_or_random_point_goes_below_the_certificate_on_the_shipped_model(
    shipped_robust,
) -> None:
    from robust_train.attacks import fragility_attack

    torch.set_num_threads(1)
    model, x, y = shipped_robust
    eps, k = 0.0005, 100
    for method in ("interval", "crown"):
        cert = certify_topk(model, x, y, epsilons=[eps], k=k, method=method)
        bound = cert.certified_overlap[:, 0]
        assert bound.mean() > 0.2  # the test is not vacuous
        result = fragility_attack(
            model, x, y, epsilon=eps, step_size=eps / 4, n_steps=5, k=k, seed=0
        )
        gen = torch.Generator().manual_seed(0)
        noise = (torch.rand((8, *x.shape), generator=gen) * 2 - 1) * eps
        points = torch.cat([result.adversarial, (x + noise).clamp(0, 1).flatten(0, 1)])
        maps = importance_map(saliency(model, points, y.repeat(9)))
        kept = (topk_mask(maps, k) & cert.reference.repeat(9, 1, 1)).flatten(1).sum(1) / k
        assert (kept.view(9, -1) >= bound.float()).all(), (method, kept, bound)


def test_interval_logit_bounds_match_auto_lirpa_where_installed() -> None:
    """Cross-check with auto_LiRPA (Xu et al. 2020; not a dependency, it needs an older torch):
    the interval bounds of the logits over the same box are the same IBP."""
    lirpa = pytest.importorskip("auto_LiRPA")
    from auto_LiRPA.perturbations import PerturbationLpNorm

    torch.manual_seed(4)
    net = conv_net().eval()
    x, eps = torch.rand(2, 1, 3, 3), 0.05
    box = input_box(x, eps)
    bounded = lirpa.BoundedModule(net, torch.zeros_like(x))
    ptb = PerturbationLpNorm(norm=float("inf"), eps=eps, x_L=box.lower, x_U=box.upper)
    low, high = bounded.compute_bounds(x=(lirpa.BoundedTensor(x, ptb),), method="IBP")
    steps = trace_network(net)
    ours = forward_bounds(steps, box)[steps[-1].name]
    torch.testing.assert_close(ours.lower, low, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.upper, high, atol=1e-5, rtol=1e-5)


def test_crown_is_exact_on_two_stacked_affine_layers_where_intervals_are_not() -> None:
    """Reference: the range of z = W2 (W1 x + b1) + b2 over a box is sum of min/max of the
    composed weights times the box ends, which back-substitution reaches and intervals do not."""
    torch.manual_seed(5)
    net = nn.Sequential(nn.Flatten(), nn.Linear(9, 6), nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2))
    net = net.double().eval()
    x = torch.rand(2, 1, 3, 3, dtype=torch.float64)
    box = input_box(x, 0.2)
    steps = trace_network(net)
    pre = next(s for s in steps if s.kind == "relu").args[0]
    coarse = forward_bounds(steps, box)[pre]
    fine = forward_bounds(steps, box, crown_tightener(steps))[pre]
    w = net[2].weight @ net[1].weight
    b = net[2].weight @ net[1].bias + net[2].bias
    lo, hi = box.lower.flatten(1), box.upper.flatten(1)
    exact_low = lo @ w.clamp_min(0).T + hi @ w.clamp_max(0).T + b
    exact_high = hi @ w.clamp_min(0).T + lo @ w.clamp_max(0).T + b
    unstable = (coarse.lower < 0) & (coarse.upper > 0)  # only these are back-substituted
    assert unstable.any()
    torch.testing.assert_close(fine.lower[unstable], exact_low[unstable])
    torch.testing.assert_close(fine.upper[unstable], exact_high[unstable])
    looser = (coarse.upper - coarse.lower) > (exact_high - exact_low) + 1e-9
    assert looser[unstable].any()  # the intervals alone were not exact there
