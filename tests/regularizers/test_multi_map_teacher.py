"""The multi-map penalty anchored to a frozen teacher (`teacher`): x''s maps are compared with the
teacher's clean maps (eval mode, no gradient) instead of the model's own. A teacher with the
model's own weights gives the default penalty; a different teacher gives the distance to ITS maps,
computed here one explainer at a time; a model whose maps do not move (a linear model's saliency)
pays nothing against itself and a positive penalty against another teacher; the gradient reaches
the model, never the teacher, whose weights and modes stay as loaded; bad paths are refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.explain import grad_cam, importance_map, saliency
from robust_train.regularizers._penalty_parts import map_distance, sample_in_ball
from robust_train.regularizers.multi_map import MultiMapSmoothness, teacher_model

OPTIONS = {
    "explainers": ["saliency", "grad_cam"],
    "map_weights": [1.0, 2.0],
    "layer": "2",
    "distance": "l1",
    "radius": 0.1,
}


def conv_net(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.Tanh(),
        nn.Conv2d(4, 5, 3, padding=1), nn.Tanh(),
        nn.Flatten(), nn.Linear(5 * 6 * 6, 3),
    )  # fmt: skip


def batch(n: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.rand(n, 3, 6, 6, generator=g), torch.randint(0, 3, (n,), generator=g)


def saved(net: nn.Module, tmp_path, name: str = "teacher.pt") -> str:
    path = str(tmp_path / name)
    torch.save(net.state_dict(), path)
    return path


@pytest.mark.parametrize("steps", [0, 1])
def test_a_teacher_with_the_model_weights_gives_the_default_penalty(tmp_path, steps):
    net, (x, y) = conv_net(0), batch()
    own = MultiMapSmoothness(seed=0, n_ascent_steps=steps, **OPTIONS)(net, x, y)
    path = saved(net, tmp_path)
    anchored = MultiMapSmoothness(seed=0, n_ascent_steps=steps, teacher=path, **OPTIONS)(net, x, y)
    assert float(own.detach().sum()) > 0
    torch.testing.assert_close(anchored, own, rtol=1e-5, atol=1e-7)


def test_the_penalty_is_the_distance_to_the_teacher_maps(tmp_path):
    net, other, (x, y) = conv_net(0), conv_net(1), batch()
    term = MultiMapSmoothness(seed=0, n_ascent_steps=0, teacher=saved(other, tmp_path), **OPTIONS)
    value = term(net, x, y)
    # reference, one explainer at a time: the teacher's maps at x, the model's at the same x'
    x_pert = (x + sample_in_ball(x, 0.1, 1, "linf", torch.Generator().manual_seed(0))).clamp(0, 1)
    expected = torch.zeros(x.shape[0])
    for w, explain in ((1.0, saliency), (2.0, lambda m, i, t: grad_cam(m, i, t, layer="2"))):
        clean = importance_map(explain(other.eval(), x, y))
        pert = importance_map(explain(net, x_pert, y))
        expected += w * map_distance(clean, pert, "l1")
    torch.testing.assert_close(value.detach(), expected, rtol=1e-5, atol=1e-6)


def test_a_map_that_does_not_move_pays_only_against_another_teacher(tmp_path):
    torch.manual_seed(0)
    linear, other = nn.Sequential(nn.Flatten(), nn.Linear(108, 3)), nn.Linear(108, 3)
    x, y = batch()
    options = {"explainers": ["saliency"], "distance": "l1", "radius": 0.1, "n_ascent_steps": 0}
    assert float(MultiMapSmoothness(seed=0, **options)(linear, x, y).detach().abs().max()) < 1e-6
    path = saved(nn.Sequential(nn.Flatten(), other), tmp_path)
    assert float(MultiMapSmoothness(seed=0, teacher=path, **options)(linear, x, y).min()) > 0.1


def test_the_gradient_reaches_the_model_and_never_the_teacher(tmp_path):
    net, other, (x, y) = conv_net(0), conv_net(1), batch()
    term = MultiMapSmoothness(seed=0, n_ascent_steps=1, teacher=saved(other, tmp_path), **OPTIONS)
    term(net, x, y).sum().backward()
    teacher = teacher_model(net, term.options.teacher)
    weights = [p for p in net.parameters() if p.dim() > 1]  # the maps ignore the output bias
    assert all(p.grad is not None and bool(p.grad.any()) for p in weights)
    assert all(p.grad is None and not p.requires_grad for p in teacher.parameters())
    assert not teacher.training and net.training
    pairs = zip(teacher.parameters(), other.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    assert teacher_model(net, term.options.teacher) is teacher  # loaded once


def test_bad_teacher_is_refused_with_its_value(tmp_path):
    missing = str(tmp_path / "nowhere.ckpt")
    with pytest.raises(FileNotFoundError, match=r"`teacher`.*nowhere\.ckpt"):
        MultiMapSmoothness(teacher=missing)
    with pytest.raises(TypeError, match=r"`teacher`.*3"):
        MultiMapSmoothness(teacher=3)


def test_a_shipped_checkpoint_name_is_a_teacher_as_for_init_checkpoint():
    from robust_train.models import load_classifier

    term = MultiMapSmoothness(teacher="mnist5k_baseline")  # accepted: a shipped name
    student = load_classifier("mnist5k_robust")
    teacher = teacher_model(student, term.options.teacher)
    natural = load_classifier("mnist5k_baseline")
    pairs = zip(teacher.parameters(), natural.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    pairs = zip(teacher.parameters(), student.parameters(), strict=True)
    assert not all(torch.equal(a, b) for a, b in pairs)


def test_teacher_powers_hold_the_model_to_the_teachers_map_raised_to_them(tmp_path):
    """The reference written out: the teacher's clean map to the power (Grad-CAM squared,
    saliency as it is), the model's map at the same x' unchanged; with the model as its own
    teacher the sharpened term is positive where the plain one is not."""
    net, other, (x, y) = conv_net(0), conv_net(1), batch()
    options = {**OPTIONS, "teacher_powers": [1.0, 2.0]}
    value = MultiMapSmoothness(seed=0, n_ascent_steps=0, teacher=saved(other, tmp_path), **options)
    x_pert = (x + sample_in_ball(x, 0.1, 1, "linf", torch.Generator().manual_seed(0))).clamp(0, 1)
    expected = torch.zeros(x.shape[0])
    explainers = ((1.0, 1, saliency), (2.0, 2, lambda m, i, t: grad_cam(m, i, t, layer="2")))
    for w, power, explain in explainers:
        clean = importance_map(explain(other.eval(), x, y)).clamp_min(0) ** power
        pert = importance_map(explain(net, x_pert, y))
        expected += w * map_distance(clean, pert, "l1")
    torch.testing.assert_close(value(net, x, y).detach(), expected, rtol=1e-5, atol=1e-6)
    still = {**OPTIONS, "radius": 1e-9, "explainers": ["grad_cam"], "map_weights": [1.0]}
    path = saved(net, tmp_path, "self.pt")
    plain = MultiMapSmoothness(seed=0, n_ascent_steps=0, teacher=path, **still)(net, x, y)
    sharp = MultiMapSmoothness(
        seed=0, n_ascent_steps=0, teacher=path, teacher_powers=[3.0], **still
    )(net, x, y)
    assert float(plain.detach().abs().max()) < 1e-5 < float(sharp.detach().min())


def test_teacher_powers_are_refused_without_a_teacher_or_below_one(tmp_path):
    with pytest.raises(ValueError, match=r"`teacher_powers`.*needs `teacher`"):
        MultiMapSmoothness(explainers=["grad_cam"], teacher_powers=[2.0])
    path = saved(conv_net(0), tmp_path)
    with pytest.raises(ValueError, match=r"`teacher_powers` must have one exponent >= 1.*0\.5"):
        MultiMapSmoothness(explainers=["grad_cam"], teacher=path, teacher_powers=[0.5])
    with pytest.raises(ValueError, match=r"`teacher_powers` must have one exponent"):
        MultiMapSmoothness(explainers=["saliency", "grad_cam"], teacher=path, teacher_powers=[2.0])
