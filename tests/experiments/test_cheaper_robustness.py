"""experiments/cheaper_robustness.py (the study behind CHEAPER.md) runs: a quick run through its
`main(argv)`, the function `python -m experiments run cheaper_robustness` calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments import cheaper_robustness

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.heavy  # the study's quick run
def test_a_quick_run_measures_only_the_variants_asked_for(tmp_path: Path, monkeypatch):
    out = tmp_path / "cheaper.md"
    # three: the others share code (every_map: the shipped robust recipe's penalty and rate)
    picked = ("full (the recipe)", "every_map (the recipe shipped now)", "every_n_steps 4")
    argv = ["--quick", "--out", str(out), "--shipped", "--variants", *picked]
    monkeypatch.chdir(ROOT)
    cheaper_robustness.main(argv)
    text = out.read_text()
    for name in ("natural", *picked):
        assert f"| {name} |" in text
    assert "| batch_fraction 0.5 |" not in text  # a variant not asked for does not run
    # the shipped file itself: no cost, its chance levels beside it, every cell filled
    head, shipped = (
        text.splitlines()[0],
        next(
            line
            for line in text.splitlines()
            if line.startswith(f"| {cheaper_robustness.SHIPPED} |")
        ),
    )
    assert "random map" in head and "map = input" in head
    assert shipped.count("|") == head.count("|") and shipped.split(" | ")[1:4] == ["-"] * 3
