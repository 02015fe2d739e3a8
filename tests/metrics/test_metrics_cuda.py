"""The Lipschitz and fidelity metrics on a CUDA device agree with the CPU (skipped without one)."""

from __future__ import annotations

import pytest
import torch

from robust_train.explain import saliency
from robust_train.metrics import Fidelity, LocalLipschitz
from robust_train.metrics.functional import (
    fidelity_curves,
    lipschitz_ratios,
    local_lipschitz_estimate,
    sample_perturbations,
)
from tests.support.helpers import SmoothMLP, TinyCNN

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_lipschitz_on_cuda_matches_cpu_for_the_same_points():
    model = SmoothMLP().eval()
    x, t = torch.rand(4, 1, 8, 8), torch.tensor([0, 1, 2, 3])
    points = sample_perturbations(x, 5, seed=0)
    cpu = lipschitz_ratios(model, x, t, points, explainer=saliency)
    gpu = lipschitz_ratios(model.cuda(), x.cuda(), t.cuda(), points.cuda(), explainer=saliency)
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-4, atol=1e-6)
    for search in ("random", "gradient"):
        est = local_lipschitz_estimate(
            model,
            x.cuda(),
            t.cuda(),
            explainer=saliency,
            search=search,
            n_samples=8,
            n_steps=4,
            seed=0,
        )
        assert est.device.type == "cuda" and bool((est > 0).all())
    metric = LocalLipschitz(saliency, n_samples=4, seed=0).cuda()
    metric.update(model, x.cuda(), t.cuda())
    assert metric.compute()["mean"].device.type == "cuda"


@pytest.mark.parametrize("perturbation", ["mean", "blur", "imputation"])
def test_fidelity_on_cuda_matches_cpu(perturbation):
    model = TinyCNN().eval()
    x, imp = torch.rand(3, 1, 8, 8), torch.rand(3, 8, 8)
    kw = {"n_steps": 8, "perturbation": perturbation, "imputation_noise": 0.0}
    cpu = fidelity_curves(model, x, None, imp, **kw)
    gpu = fidelity_curves(model.cuda(), x.cuda(), None, imp.cuda(), **kw)
    torch.testing.assert_close(gpu.mif.cpu(), cpu.mif, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(gpu.lif.cpu(), cpu.lif, rtol=1e-3, atol=1e-4)
    metric = Fidelity(n_steps=8, perturbation="noise", seed=0).cuda()
    metric.update(model, x.cuda(), None, imp.cuda())
    assert metric.compute()["mif_curve"].device.type == "cuda"
