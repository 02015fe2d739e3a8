"""The top-k mass penalty: equal to a slow per-image reference written from its formula (Grad-CAM
and the top-k set written out too), its limiting cases, its argument checks, the surrogate of
the ascent for a piecewise-constant map, and a short real Lightning fit."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from robust_train import RobustClassifier
from robust_train.models import MNISTConvNet
from robust_train.regularizers import PENALTIES, TopKMassPenalty, get_penalty, topk_mass
from tests.support.helpers import TinyCNN, digits_tensors


def reference_cam(net: TinyCNN, x: torch.Tensor, t: int, beta: float | None = None):
    """Grad-CAM of one image (1, C, H, W) at Grad-CAM's default layer, the ReLU after the last
    Conv2d (net.net[3]), from its formula; with a graph to x and the parameters. The layer keeps
    8x8, so no upsampling is needed.
    `beta`: the ascent's surrogate of the final ReLU, s * log(1 + exp(beta z / s)) / beta with s
    the image's max |z| (constant)."""
    a = net.net[:4](x)
    score = net.net[4:](a)[0, t]
    (g,) = torch.autograd.grad(score, a, create_graph=True)
    z = (g.mean((2, 3), keepdim=True) * a).sum(1)[0]
    if beta is None:
        return z.clamp_min(0)
    s = float(z.detach().abs().max())
    return s * torch.log1p(torch.exp(beta * z / s)) / beta


def reference_value(net, x0, x, t: int, k: int, beta: float | None = None):
    """1 - share of the map at x on the positive part of the clean map's top-k set."""
    clean = reference_cam(net, x0, t).detach().flatten()
    order = sorted(range(clean.numel()), key=lambda i: (-float(clean[i]), i))[:k]
    support = [i for i in order if float(clean[i]) > 0]
    if not support:
        return x.new_zeros(())
    cam = reference_cam(net, x, t, beta).flatten()
    return 1 - cam[support].sum() / cam.sum().clamp_min(1e-12)


def reference(net, x, y, *, k, radius, step, n_steps, seed):
    """The penalty per image: uniform start in the ball (the batch's draw), sign ascent on the
    image's own value (the map's final ReLU on its softplus surrogate) projected on
    B_inf(x, radius) and [0, 1], then the value at x' (the exact map)."""
    u = torch.rand(x.shape, generator=torch.Generator().manual_seed(seed))
    values = []
    for i in range(len(x)):
        x0 = x[i : i + 1]
        lo, hi = (x0 - radius).clamp(min=0), (x0 + radius).clamp(max=1)
        xp = torch.min(torch.max(x0 + (2 * u[i : i + 1] - 1) * radius, lo), hi)
        for _ in range(n_steps):
            xp = xp.detach().requires_grad_(True)
            value = reference_value(net, x0, xp, int(y[i]), k, beta=10.0)  # ascent_beta
            (g,) = torch.autograd.grad(value, xp)
            xp = torch.min(torch.max(xp.detach() + step * g.sign(), lo), hi)
        values.append(reference_value(net, x0, xp.detach(), int(y[i]), k))
    return torch.stack(values)


@pytest.mark.parametrize("n_steps", [0, 2])
def test_equals_the_slow_reference_with_its_parameter_gradients(n_steps):
    net = TinyCNN(seed=1).eval()
    x, y = torch.rand(5, 1, 8, 8), torch.tensor([0, 3, 5, 9, 2])
    settings = dict(k=10, radius=0.2, step=0.05, n_steps=n_steps, seed=3)
    expected = reference(net, x, y, **settings)
    (ref_grad,) = torch.autograd.grad(expected.sum(), net.net[2].weight)
    term = TopKMassPenalty(
        explainer="grad_cam", k=10, radius=0.2, n_ascent_steps=n_steps, ascent_step_size=0.05,
        seed=3,
    )  # fmt: skip
    value = term(net, x, y)
    (grad,) = torch.autograd.grad(value.sum(), net.net[2].weight)
    assert value.shape == (5,) and float(value.detach().max()) > 0
    torch.testing.assert_close(value, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(grad, ref_grad, atol=1e-5, rtol=1e-4)


def test_ascent_moves_mass_out_of_the_clean_set():
    net = TinyCNN(seed=1).eval()
    x, y = torch.rand(8, 1, 8, 8), torch.arange(8)
    common = dict(explainer="grad_cam", k=10, radius=0.2, random_start=False)
    still = topk_mass(net, x, y, n_ascent_steps=0, **common)
    moved = topk_mass(net, x, y, n_ascent_steps=3, ascent_step_size=0.05, **common)
    assert float(moved.mean()) > float(still.mean())


def test_limiting_cases():
    net = TinyCNN(seed=1).eval()
    x, y = torch.rand(6, 1, 8, 8), torch.arange(6)
    # x' = x and k = H * W: the whole positive map is the clean set, nothing is outside.
    whole = topk_mass(net, x, y, explainer="grad_cam", k=64, n_ascent_steps=0, random_start=False)
    torch.testing.assert_close(whole, torch.zeros(6), atol=1e-6, rtol=0)
    # An all-zero clean map defines no set: the penalty is 0 there, wherever x' goes.
    zero = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3, padding=1), torch.nn.Flatten())
    torch.nn.init.zeros_(zero[0].weight), torch.nn.init.zeros_(zero[0].bias)
    value = topk_mass(zero, x, torch.zeros(6, dtype=torch.long), explainer="grad_cam", k=4)
    assert float(value.abs().max()) == 0.0


def test_a_piecewise_constant_map_ascends_on_the_softplus_surrogate():
    net = TinyCNN(seed=1).eval()
    x, y = torch.rand(6, 1, 8, 8), torch.arange(6)
    common = dict(explainer="saliency", k=8, radius=0.2, random_start=False, n_ascent_steps=1)
    smooth = topk_mass(net, x, y, ascent_beta=10.0, **common)
    on_relu = topk_mass(net, x, y, ascent_beta=None, **common)  # zero direction: x' = x
    at_x = topk_mass(net, x, y, **(common | {"n_ascent_steps": 0}))
    torch.testing.assert_close(on_relu, at_x)
    assert float((smooth - at_x).abs().max()) > 1e-4


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"k": 0}, "`k`"),
        ({"radius": 1.5}, "`radius`"),
        ({"n_ascent_steps": -1}, "`n_ascent_steps`"),
        ({"ascent_step_size": 0.0}, "`ascent_step_size`"),
        ({"ascent_beta": -1.0}, "`ascent_beta`"),
        ({"explainer": "meaningful_perturbation"}, "`explainer`"),
        ({"explainer": "no_such_map"}, "no_such_map"),
    ],
)
def test_bad_arguments_fail_at_construction(options, message):
    with pytest.raises(ValueError, match=message):
        TopKMassPenalty(**options)


def test_bad_types_and_sizes():
    with pytest.raises(TypeError, match="random_start"):
        TopKMassPenalty(random_start="yes")
    with pytest.raises(ValueError, match="`k` must be an int in"):  # k > H * W, at the call
        topk_mass(TinyCNN(), torch.rand(2, 1, 8, 8), torch.tensor([0, 1]), k=65)


def test_registered_and_declared():
    assert PENALTIES["topk_mass"] is TopKMassPenalty
    term = get_penalty("topk_mass", weight=2.0, explainer="grad_cam")
    assert term.double_backprop and not term.needs_input_grad and term.weight == 2.0
    assert term.options.k == 100 and term.options.step == pytest.approx(0.75)


def test_trainer_fit_of_a_few_steps():
    x, y = digits_tensors()
    x = F.interpolate(x, size=28)  # 28x28: MNISTConvNet's two max-pools
    train = DataLoader(TensorDataset(x[:96], y[:96]), batch_size=32)
    penalty = TopKMassPenalty(weight=3.0, explainer="grad_cam", k=100, seed=0)
    model = MNISTConvNet(channels=(4, 8), hidden=16)
    module = RobustClassifier(model, [penalty])
    before = [p.detach().clone() for p in model.parameters()]
    trainer = pl.Trainer(
        max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(module, train)
    metrics = trainer.callback_metrics
    assert torch.isfinite(metrics["train/loss"])
    assert 0 < float(metrics["train/penalty/topk_mass"]) <= 1
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
