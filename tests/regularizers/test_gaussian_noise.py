"""Gaussian-noise training against a reference written from its definition (CE at
clip(x + sigma z), z ~ N(0, I)): its noise, its loss, its limiting cases, the task loss it
replaces in RobustClassifier, argument checks, and the leaderboard row it adds."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from robust_train import RobustClassifier
from robust_train.regularizers import GaussianNoiseTraining, gaussian_noise_loss, get_penalty
from robust_train.regularizers.gaussian_noise import GaussianNoiseOptions, noisy_copy
from tests.support.helpers import SmoothMLP


def reference_loss(model, x, y, sigma, seed, clip=True):
    """CE per image at x + sigma * z, z drawn from a CPU generator seeded with `seed`."""
    z = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
    noisy = x + sigma * z
    if clip:
        noisy = noisy.clamp(0, 1)
    return F.cross_entropy(model(noisy), y, reduction="none")


@pytest.mark.parametrize("clip", [True, False])
def test_loss_matches_the_reference(clip):
    model = SmoothMLP()
    x, y = torch.rand(6, 1, 8, 8), torch.tensor([0, 1, 2, 3, 4, 5])
    ours = gaussian_noise_loss(
        model, x, y, sigma=0.3, clip=clip, generator=torch.Generator().manual_seed(4)
    )
    torch.testing.assert_close(ours, reference_loss(model, x, y, 0.3, 4, clip))


def test_noise_has_the_asked_spread_and_clipping_keeps_the_range():
    x = torch.full((64, 1, 16, 16), 0.5)
    gen = torch.Generator().manual_seed(0)
    raw = noisy_copy(x, GaussianNoiseOptions(sigma=0.2, clip=False), gen) - x
    assert abs(float(raw.mean())) < 0.005 and abs(float(raw.std()) - 0.2) < 0.005
    clipped = noisy_copy(x, GaussianNoiseOptions(sigma=0.4), gen)
    assert float(clipped.min()) == 0.0 and float(clipped.max()) == 1.0  # some pixels hit each end
    assert not clipped.requires_grad


def test_sigma_zero_is_natural_training_and_draws_differ_by_seed():
    model = SmoothMLP()
    x, y = torch.rand(4, 1, 8, 8), torch.tensor([1, 2, 3, 4])
    clean = F.cross_entropy(model(x), y, reduction="none")
    torch.testing.assert_close(gaussian_noise_loss(model, x, y, sigma=0.0), clean)
    a = GaussianNoiseTraining(sigma=0.3, seed=0)(model, x, y)
    b = GaussianNoiseTraining(sigma=0.3, seed=1)(model, x, y)
    assert not torch.allclose(a, b)


def test_replaces_the_task_loss_in_the_training_step():
    """The optimised loss is the noisy CE alone (weight 1): the natural CE is only logged."""
    torch.manual_seed(0)
    model = SmoothMLP()
    x, y = torch.rand(8, 1, 8, 8), torch.randint(0, 10, (8,))
    module = RobustClassifier(model, [GaussianNoiseTraining(sigma=0.25, seed=7)])
    _, _, parts, loss = module._loss_parts(x, y, 1.0)
    expected = reference_loss(model, x, y, 0.25, 7).mean()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(parts["ce"], F.cross_entropy(model(x), y))
    (grad,) = torch.autograd.grad(loss, [next(model.parameters())])
    assert grad.abs().sum() > 0


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="`sigma` must be >= 0, got -0.5"):
        get_penalty("gaussian_noise", sigma=-0.5)
    with pytest.raises(TypeError, match="`clip` must be a bool"):
        GaussianNoiseTraining(clip="yes")
    with pytest.raises(ValueError, match="`batch_fraction` 0.5 is not available"):
        GaussianNoiseTraining(batch_fraction=0.5)


def test_leaderboard_row_has_a_full_grid_at_the_paper_values():
    from experiments.leaderboard_methods import GRID_SIZE, METHODS, Job, available

    method = METHODS["gaussian_noise"]
    assert len(method.values) == GRID_SIZE and method.paper_value in method.values
    assert "gaussian_noise" in available(["natural", "gaussian_noise"])
    job = Job("fit", "fit_gaussian_noise_s0", "gaussian_noise", value=0.5)
    assert job.kwargs() == {"sigma": 0.5}
    assert get_penalty("gaussian_noise", **job.kwargs()).options.sigma == 0.5
