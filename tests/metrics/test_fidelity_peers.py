"""MIF curves against Quantus PixelFlipping; ROAD imputation against Quantus' sparse solver."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robust_train.metrics.functional import fidelity_curves
from robust_train.metrics.functional._fidelity_fill import linear_imputation
from tests.reference.metrics_fidelity_reference import reference_curves
from tests.support.helpers import TinyCNN

quantus = pytest.importorskip("quantus")


@pytest.mark.parametrize(("n_steps", "channels"), [(16, 1), (8, 1), (4, 2)])
def test_mif_equals_quantus_pixel_flipping(n_steps, channels):
    """Quantus records the softmax probability of y after each step of features_in_step features.

    Its curve starts after the first step, so it equals our MIF curve without the clean point
    (fractions 1/n, ..., 1); its fill 0.0 is our "zero". Quantus flips (channel, pixel) features
    of a map given per channel: the map is repeated over channels with channel offsets far below
    the gaps between pixel values, so the C features of a pixel are consecutive in its order and
    a step of C * (pixels per step) features removes whole pixels, as ours does. The map has no
    ties (Quantus' np.argsort is not stable). Quantus requires features_in_step to divide H * W.
    """
    g = torch.Generator().manual_seed(n_steps)
    model = TinyCNN(in_channels=channels).eval()
    x = torch.rand(6, channels, 8, 8, generator=g)
    imp = torch.rand(6, 8, 8, generator=g)
    y = torch.tensor([0, 1, 2, 3, 4, 5])
    metric = quantus.PixelFlipping(
        features_in_step=(64 // n_steps) * channels, perturb_baseline=0.0, disable_warnings=True
    )
    offsets = 1e-6 * np.arange(channels, 0, -1).reshape(1, channels, 1, 1)
    a_batch = imp[:, None].double().numpy() + offsets
    quantus_curves = np.asarray(
        metric(model=model, x_batch=x.numpy(), y_batch=y.numpy(), a_batch=a_batch, device="cpu")
    )
    ours = fidelity_curves(
        model, x, y, imp, n_steps=n_steps, perturbation="zero", score="probability"
    )
    assert quantus_curves.shape == (6, n_steps)
    np.testing.assert_allclose(quantus_curves, ours.mif[:, 1:].numpy(), atol=1e-6)


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_linear_imputation_equals_quantus_sparse_solve(fraction):
    from quantus.functions.perturb_func import noisy_linear_imputation

    g = torch.Generator().manual_seed(int(fraction * 10))
    x = torch.rand(4, 3, 9, 7, generator=g)
    missing = torch.rand(4, 1, 9, 7, generator=g) < fraction
    missing[:, :, 0, 0] = False  # at least one kept pixel: the system is then non-singular
    ours = linear_imputation(x, missing, x.mean((2, 3), keepdim=True))
    for b in range(4):
        indices = np.flatnonzero(missing[b, 0].numpy())
        expected = noisy_linear_imputation(x[b].double().numpy(), indices, noise=0.0)
        np.testing.assert_allclose(ours[b].numpy(), expected, atol=1e-4)


def test_imputation_curves_equal_reference_with_quantus_imputation():
    g = torch.Generator().manual_seed(5)
    model = TinyCNN(in_channels=3).eval()
    x = torch.rand(2, 3, 8, 8, generator=g)
    imp = torch.rand(2, 8, 8, generator=g)
    ours = fidelity_curves(
        model,
        x,
        None,
        imp,
        n_steps=5,
        include_end=False,
        perturbation="imputation",
        imputation_noise=0.0,
    )
    ref = reference_curves(model, x, None, imp, n_steps=5, include_end=False, fill="imputation")
    torch.testing.assert_close(ours.mif, ref[1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours.lif, ref[2], atol=1e-4, rtol=1e-4)


def test_imputation_noise_is_seeded_and_small():
    g = torch.Generator().manual_seed(6)
    model = TinyCNN().eval()
    x, imp = torch.rand(3, 1, 8, 8, generator=g), torch.rand(3, 8, 8, generator=g)
    clean = fidelity_curves(
        model, x, None, imp, n_steps=4, perturbation="imputation", imputation_noise=0.0
    )
    a = fidelity_curves(model, x, None, imp, n_steps=4, perturbation="imputation", seed=1)
    b = fidelity_curves(
        model, x, None, imp, n_steps=4, perturbation="imputation", seed=1, internal_batch_size=5
    )
    torch.testing.assert_close(a.mif, b.mif)
    assert not torch.equal(a.mif, clean.mif)
    torch.testing.assert_close(a.mif, clean.mif, atol=0.05, rtol=0)
