"""The README stays a short front page: its Python example runs as written, its links resolve,
and the demo claim it states is the one the demo checks each run against."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def section(text: str, title: str) -> str:
    """The text of the README section `## <title>`, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"README has no section '## {title}'"
    return match.group(1)


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


def test_readme_is_a_front_page_not_a_manual():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; details belong in docs/"
    headings = [line for line in lines if line.startswith("## ")]
    for wanted in ("## Install", "## Quick start", "## In Python", "## Shipped models"):
        assert wanted in headings, f"README lacks {wanted!r}"


def test_every_relative_link_and_image_of_the_readme_exists():
    text = README.read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert len(local) >= 10, local  # the docs, benchmark pages, the figure
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


@pytest.mark.slow
def test_in_python_section_runs_as_written(capsys):
    torch.set_num_threads(1)
    (block,) = python_blocks(section(README.read_text(), "In Python"))
    exec(compile(block, "README.md (In Python)", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    kept = dict(re.findall(r"^(\S+): ([0-9.]+) of the top-100 pixels kept$", out, flags=re.M))
    assert set(kept) == {"mnist5k_baseline", "mnist5k_robust"}, kept
    # The example's point: the robust model keeps far more of its map under the same attack.
    assert float(kept["mnist5k_robust"]) > float(kept["mnist5k_baseline"]) + 0.2, kept


def test_python_api_penalty_gradient_reaches_the_weights():
    """What a penalty in a user's own module relies on: the penalty alone gives the parameters
    a gradient (double backprop)."""
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


def test_the_demo_claim_in_the_readme_is_the_range_the_demo_checks():
    from robust_train.app.demo import MAPS, MEASURED_ACC_CHANGE, MEASURED_GAINS, MEASURED_SEEDS

    text = " ".join(section(README.read_text(), "Quick start").split())
    if not MEASURED_SEEDS:  # no range measured under the demo's protocol: none may be stated
        assert "no measured range" in text and "demo_ensemble" in text
        return
    seeds = f"seeds {MEASURED_SEEDS[0]}-{MEASURED_SEEDS[-1]}"
    assert seeds in text and len(MEASURED_SEEDS) == MEASURED_SEEDS[-1] - MEASURED_SEEDS[0] + 1
    labels = {"integrated_gradients": "integrated gradients", "grad_cam": "Grad-CAM", "lrp": "LRP",
              "deeplift": "DeepLIFT", "saliency": "saliency"}  # fmt: skip
    for name in MAPS:
        lo, hi = MEASURED_GAINS[name]["min"], MEASURED_GAINS[name]["max"]
        stated = f"{lo:+.2f} to {hi:+.2f} ({labels[name]})"
        assert stated in text, f"README's demo claim should state {stated!r}"
    acc = MEASURED_ACC_CHANGE
    assert f"{100 * acc['min']:+.1f} to {100 * acc['max']:+.1f} points" in text
