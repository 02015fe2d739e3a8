"""fragility_attack rejects bad arguments with errors that name the argument and the value."""

from __future__ import annotations

import pytest
import torch

from robust_train.attacks import fragility_attack
from robust_train.explain import meaningful_perturbation
from tests.support.helpers import TinyCNN

X = torch.rand(2, 1, 8, 8)
T = torch.tensor([0, 1])


def _call(**overrides):
    kwargs = {"model": TinyCNN(), "inputs": X, "target": T, "epsilon": 0.1, "n_steps": 1}
    kwargs.update(overrides)
    model, inputs, target = kwargs.pop("model"), kwargs.pop("inputs"), kwargs.pop("target")
    return fragility_attack(model, inputs, target, **kwargs)


@pytest.mark.parametrize(
    "overrides, error, match",
    [
        ({"epsilon": 0.0}, ValueError, r"`epsilon` must be > 0, got 0.0"),
        ({"epsilon": -0.1}, ValueError, r"`epsilon` must be > 0"),
        ({"step_size": 0.0}, ValueError, r"`step_size` must be > 0"),
        ({"n_steps": 0}, ValueError, r"`n_steps` must be > 0, got 0"),
        ({"n_steps": 2.5}, TypeError, r"`n_steps` must be an int"),
        ({"n_restarts": 0}, ValueError, r"`n_restarts` must be > 0"),
        (
            {"k": 65},
            ValueError,
            r"`k` must be an int in \[1, H\*W\] = \[1, 64\] for 8x8 images, got 65",
        ),
        ({"k": 0}, ValueError, r"`k`.*got 0"),
        ({"measure_k": 100}, ValueError, r"`measure_k`.*\[1, 64\].*got 100"),
        ({"surrogate_beta": 0.0}, ValueError, r"`surrogate_beta` must be > 0"),
        ({"internal_batch_size": 0}, ValueError, r"`internal_batch_size` must be > 0"),
        ({"objective": "center"}, ValueError, r"Unknown `objective` 'center'.*mass_center"),
        ({"explainer": "gradcam"}, ValueError, r"Unknown `explainer` 'gradcam'"),
        ({"explainer": 3}, TypeError, r"`explainer` must be a name or a callable"),
        (
            {"explainer": "meaningful_perturbation"},
            ValueError,
            r"'meaningful_perturbation' is not differentiable",
        ),
        ({"explainer": meaningful_perturbation}, ValueError, r"not differentiable"),
        ({"target": torch.tensor([0, 1, 2])}, ValueError, r"`target` must have shape \(2,\)"),
        ({"target": torch.tensor([0.0, 1.0])}, TypeError, r"`target` must be an integer tensor"),
        (
            {"inputs": torch.rand(0, 1, 8, 8), "target": torch.tensor([], dtype=torch.long)},
            ValueError,
            r"`inputs` is an empty batch",
        ),
        ({"inputs": X * 2}, ValueError, r"`inputs` must be images in \[0, 1\]"),
        ({"inputs": X - 0.5}, ValueError, r"`inputs` must be images in \[0, 1\]"),
        ({"inputs": X[0]}, ValueError, r"`inputs` must have shape \(B, C, H, W\)"),
        ({"objective": "targeted"}, ValueError, r"'targeted' needs `target_region`"),
        (
            {"objective": "targeted", "target_region": torch.ones(2, 8, 8)},
            TypeError,
            r"`target_region` must be a bool tensor",
        ),
        (
            {"objective": "targeted", "target_region": torch.ones(3, 8, 8, dtype=torch.bool)},
            ValueError,
            r"`target_region` must have shape \(2 or 1, 8, 8\), got \(3, 8, 8\)",
        ),
        (
            {"objective": "targeted", "target_region": torch.zeros(1, 8, 8, dtype=torch.bool)},
            ValueError,
            r"`target_region` has no pixel set for image\(s\) \[0\]",
        ),
        (
            {"objective": "targeted", "target_region": torch.arange(128).view(2, 8, 8) < 64},
            ValueError,
            r"`target_region` has no pixel set for image\(s\) \[1\]",
        ),
        (
            {"target_region": torch.ones(1, 8, 8, dtype=torch.bool)},
            ValueError,
            r"`target_region` is only used by objective='targeted', got 'topk'",
        ),
        ({"seed": 1, "generator": torch.Generator()}, ValueError, r"either `generator` or `seed`"),
        ({"seed": "1"}, TypeError, r"`seed` must be an int"),
        ({"model": lambda x: x}, TypeError, r"`model` must be a torch.nn.Module"),
    ],
)
def test_bad_arguments(overrides, error, match) -> None:
    with pytest.raises(error, match=match):
        _call(**overrides)


def test_inference_mode_is_refused_but_no_grad_is_fine() -> None:
    with torch.inference_mode(), pytest.raises(RuntimeError, match="inference_mode"):
        _call()
    with torch.no_grad():
        res = _call(n_steps=2)
    assert res.improved.shape == (2,)
