"""An L_inf budget >= 1 covers the whole [0, 1] image range: refused before any work, naming the
argument, from the command line (exit 2, one line) and in Python."""

from __future__ import annotations

from pathlib import Path

import pytest

from robust_train.core.resources import shipped_checkpoint
from robust_train.regularizers import get_penalty

ROOT = Path(__file__).resolve().parents[2]


def test_evaluate_refuses_an_epsilon_that_covers_the_image_range(cli, tmp_path) -> None:
    ckpt = shipped_checkpoint("digits_baseline")
    result = cli("evaluate", "--ckpt", str(ckpt), "--epsilon", "5.0", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "epsilon" in lines[0] and "5.0" in lines[0], result.stderr
    assert not (tmp_path / "runs").exists()  # nothing was evaluated or written


@pytest.mark.parametrize(
    "name, kwargs, argument",
    [
        ("smoothness", {"radius": 5.0}, "radius"),
        ("lga", {"radius": 1.0}, "radius"),
        ("adversarial", {"epsilon": 5.0}, "epsilon"),
        ("ig_norm", {"epsilon": 2.0}, "epsilon"),
    ],
)
def test_penalties_refuse_a_budget_that_covers_the_image_range(name, kwargs, argument) -> None:
    with pytest.raises(ValueError, match=f"`{argument}`"):
        get_penalty(name, **kwargs)


def test_a_budget_below_the_range_is_accepted() -> None:
    assert get_penalty("smoothness", radius=0.3).options.radius == 0.3
