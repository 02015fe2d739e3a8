"""The README's Python examples run as written, and its demo claim matches the demo's constants."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def section(text: str, title: str) -> str:
    """The text of the README section `## <title>`, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, flags=re.M | re.S)
    assert match, f"README has no section '## {title}'"
    return match.group(1)


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


def test_python_api_section_runs_as_written(capsys):
    blocks = python_blocks(section(README.read_text(), "Python API"))
    assert len(blocks) == 3, "wrap a model, a penalty in your own module, attack + fidelity"
    namespace: dict[str, object] = {"__name__": "readme"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"README.md (Python API, block {i + 1})", "exec"), namespace)
    out = capsys.readouterr().out
    # Block 1 fitted a RobustClassifier with the penalty: its parts were logged, it learned.
    logged = namespace["trainer"].callback_metrics  # type: ignore[attr-defined]
    assert "train/penalty/smoothness_epoch" in logged and float(logged["val/acc"]) > 0.5
    assert "val accuracy" in out
    # Block 2 trained the user's own module: the penalty moved the weights it was given.
    own = namespace["own"]
    assert own.trainer.global_step == 5  # type: ignore[attr-defined]
    # Block 3 attacked and measured a batch.
    attack, curves = namespace["attack"], namespace["curves"]
    measured = attack.topk_intersection[~attack.topk_intersection.isnan()]  # type: ignore[attr-defined]
    assert len(measured) > 0 and bool(((measured >= 0) & (measured <= 1)).all())
    assert curves.mif.shape == (32, 11)  # type: ignore[attr-defined]
    assert "top-k intersection after the attack:" in out and "fidelity (AUC_LIF" in out


def test_python_api_penalty_gradient_reaches_the_weights():
    """Block 2's recipe: the penalty alone gives the parameters a gradient (double backprop)."""
    from robust_train.regularizers import get_penalty

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10)
    )
    term = get_penalty("smoothness", weight=1.0, radius=0.1, seed=0)
    x = torch.rand(8, 1, 8, 8).requires_grad_(True)
    y = torch.randint(0, 10, (8,))
    term.penalty(net, x, y, net(x)).mean().backward()
    assert net[1].weight.grad is not None and float(net[1].weight.grad.abs().sum()) > 0


@pytest.mark.parametrize("key", ["mean", "min", "max"])
def test_demo_claim_in_readme_is_the_demo_constant(key):
    """The README's stated range is the one the demo compares each run with."""
    from robust_train.app.demo import MEASURED_GAIN

    claim = section(README.read_text(), "The demo's claim")
    match = re.search(rf"{key} ([+-][0-9.]+)", claim)
    assert match, f"README's demo claim states no {key}"
    assert float(match.group(1)) == pytest.approx(MEASURED_GAIN[key], abs=1e-3)
