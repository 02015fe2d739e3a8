"""Local Lipschitz estimate against Quantus LocalLipschitzEstimate and Captum sensitivity_max,
both fed exactly the perturbed inputs that our random search draws."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robust_train.explain import saliency
from robust_train.metrics.functional import (
    lipschitz_ratios,
    local_lipschitz_estimate,
    sample_perturbations,
)
from tests.support.helpers import SmoothMLP, TinyCNN


def _quantus_explain(model, inputs, targets, **_):
    return saliency(model, torch.as_tensor(inputs), torch.as_tensor(targets)).detach().numpy()


@pytest.mark.parametrize("normalise", [False, True])
def test_equals_quantus_local_lipschitz_estimate(normalise):
    """Quantus: x' = x + N(0, std^2) (no clamping), explanations of x and x' divided by their max
    |value| (per image with normalise_axes=(1, 2, 3); over the whole batch by default),
    ||E(x) - E(x')||_2 / (||x - x'||_2 + 1e-10), max over nr_samples. Its perturb_func is replaced
    by one that replays our sample_perturbations draws, one per Quantus step."""
    quantus = pytest.importorskip("quantus")
    model = SmoothMLP().eval()
    g = torch.Generator().manual_seed(0)
    x, t = torch.rand(4, 1, 8, 8, generator=g), torch.tensor([0, 3, 5, 9])
    kw = {"radius": 0.1, "sampling": "gaussian", "clamp": False}
    points = sample_perturbations(x, 6, seed=1, **kw)
    replay = iter([p.reshape(4, -1).numpy() for p in points])
    extra = {"normalise_func_kwargs": {"normalise_axes": (1, 2, 3)}} if normalise else {}
    metric = quantus.LocalLipschitzEstimate(
        nr_samples=6,
        perturb_func=lambda arr, **_: next(replay),
        normalise=normalise,
        disable_warnings=True,
        **extra,
    )
    expected = np.asarray(
        metric(
            model=model,
            x_batch=x.numpy(),
            y_batch=t.numpy(),
            a_batch=None,
            explain_func=_quantus_explain,
            device="cpu",
        )
    )
    ours = local_lipschitz_estimate(
        model,
        x,
        t,
        explainer=saliency,
        n_samples=6,
        seed=1,
        normalize_maps="max" if normalise else "none",
        **kw,
    )
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-4)


def test_relation_to_captum_sensitivity_max():
    """Captum: max over samples of ||E(x) - E(x')||_2 / ||E(x)||_2 (1 if that norm is 0), no
    division by ||x - x'||. Its perturb_func gets the inputs repeated sample-minor
    (repeat_interleave), so our (N, B) draws are transposed to (B, N)."""
    captum_metrics = pytest.importorskip("captum.metrics")
    model = TinyCNN().eval()
    g = torch.Generator().manual_seed(2)
    x, t = torch.rand(3, 1, 8, 8, generator=g), torch.tensor([1, 2, 8])
    points = sample_perturbations(x, 5, radius=0.02, clamp=False, seed=3)
    flat = points.transpose(0, 1).reshape(-1, 1, 8, 8)

    def explain(inputs, target):
        return (saliency(model, inputs[0] if isinstance(inputs, tuple) else inputs, target),)

    captum = captum_metrics.sensitivity_max(
        explain, x, perturb_func=lambda inputs: flat, n_perturb_samples=5, target=t
    )
    ours = local_lipschitz_estimate(
        model,
        x,
        t,
        explainer=saliency,
        n_samples=5,
        radius=0.02,
        clamp=False,
        divide_by_distance=False,
        seed=3,
    )
    clean_norm = saliency(model, x, t).flatten(1).norm(dim=1)
    torch.testing.assert_close(ours / clean_norm, captum, rtol=1e-5, atol=1e-7)
    ratios = lipschitz_ratios(model, x, t, points, explainer=saliency, divide_by_distance=False)
    torch.testing.assert_close(ratios.amax(0), ours)
