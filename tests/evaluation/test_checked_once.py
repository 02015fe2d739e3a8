"""The evaluate path checks its batch of images once: `evaluate_classifier` and
`localisation_values` check it, and the engine (`run_parts`) does not check it again; called on
its own, `run_parts` still refuses bad images before any work."""

from __future__ import annotations

import pytest
import torch

import robust_train.evaluation.engine as engine
import robust_train.evaluation.localisation as localisation
import robust_train.evaluation.suite as suite
from robust_train.evaluation import (
    EvaluationSettings,
    evaluate_classifier,
    localisation_values,
    run_parts,
)

SETTINGS = EvaluationSettings(
    parts=("lipschitz",), explainers=("saliency",), lipschitz_samples=2, n_samples=4,
    attacks=("topk",), n_steps=1, ensemble=False, input_reference=False, correct_only=False,
)  # fmt: skip


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(16, 6), torch.nn.Softplus(), torch.nn.Linear(6, 2)
    )


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The batch shapes the evaluation layer checks (suite, engine, localisation)."""
    seen: list[tuple[int, ...]] = []
    for module in (suite, engine, localisation):
        original = module.check_images

        def counting(inputs, name="inputs", *, check_range=True, _original=original):
            seen.append(tuple(inputs.shape))
            return _original(inputs, name, check_range=check_range)

        monkeypatch.setattr(module, "check_images", counting)
    return seen


def test_evaluate_classifier_checks_once(checks: list[tuple[int, ...]]) -> None:
    x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 0, 1])
    result = evaluate_classifier(_net(), x, y, SETTINGS, progress=False)
    assert checks == [(4, 1, 4, 4)]
    assert result["n_images"] == 4


def test_localisation_values_checks_once(checks: list[tuple[int, ...]]) -> None:
    x, y = torch.rand(3, 1, 4, 4), torch.tensor([0, 1, 0])
    masks = torch.zeros(3, 4, 4, dtype=torch.bool)
    masks[:, :2, :2] = True
    values = localisation_values(_net(), x, y, masks, SETTINGS)
    assert checks == [(3, 1, 4, 4)]
    assert values["localisation/saliency/relevance_mass"].shape == (3,)


def test_run_parts_alone_still_checks(checks: list[tuple[int, ...]]) -> None:
    with pytest.raises(ValueError, match=r"`inputs` must be images in \[0, 1\]"):
        run_parts(_net(), torch.rand(2, 1, 4, 4) + 2, torch.tensor([0, 1]), SETTINGS)
    with pytest.raises(ValueError, match="`labels`"):
        run_parts(_net(), torch.rand(2, 1, 4, 4), torch.tensor([0, 1, 1]), SETTINGS)
    assert checks == [(2, 1, 4, 4), (2, 1, 4, 4)]
