"""benchmarks/explainer_recipes.py summary: the val rule per explainer (the rows of other explainers
left out; accuracy, measured images, all-zero maps and cost each able to exclude a recipe)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import explainer_recipes


def _row(tag, explainer, acc, topk, n=180, zero=0.0, fit=20.0, weight=1.0):
    attack = {"topk": topk, "n": n, "zero_maps": zero, "median_positive": 150}
    row = {"tag": tag, "explainer": explainer, "val_acc": acc, "fit_cpu_s": fit}
    if tag != "natural":
        row |= {"terms": [{"penalty": "topk_mass"}], "weight": weight, "epochs": 2}
        row["natural_fit_cpu_s"] = None
    return row | {"val_attack": attack}


def _summary(tmp_path: Path, explainer: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    explainer_recipes.main(["summary", "--explainer", explainer, "--out", str(tmp_path)])
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]


def test_summary_applies_the_rule_to_one_explainers_rows(tmp_path: Path, capsys):
    rows = [
        _row("natural", "grad_cam", 0.986, 0.43, n=108, zero=0.2, fit=10.0),
        _row("gc", "grad_cam", 0.984, 0.90, n=120, weight=3.0),  # another explainer's row
        _row("natural", "lrp", 0.986, 0.38, n=182, fit=10.0),
        _row("best", "lrp", 0.976, 0.72, n=185, weight=5.0),  # at the accuracy limit: chosen
        _row("inaccurate", "lrp", 0.970, 0.75, n=190, weight=10.0),
        _row("hides", "lrp", 0.980, 0.74, n=181, weight=2.0),  # fewer measured than natural
        _row("zeros", "lrp", 0.980, 0.74, n=185, zero=0.1, weight=4.0),  # all-zero maps
        _row("dear", "lrp", 0.980, 0.76, n=185, fit=21.0, weight=6.0),  # 1 + 21 / 10 > 3x
        _row("weak", "lrp", 0.984, 0.60, n=185, weight=1.0),
    ]
    (tmp_path / "sweep.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = _summary(tmp_path, "lrp", capsys)
    assert not any("| gc |" in line for line in lines)
    marks = {line.split(" | ")[0][2:]: line.split(" | ")[-1].rstrip(" |") for line in lines[1:]}
    assert marks == {
        "natural": "-", "best": "**chosen**", "inaccurate": "no", "hides": "no", "zeros": "no",
        "dear": "no", "weak": "yes",
    }  # fmt: skip
    assert "0.380 [182]" in lines[1]  # the lrp natural row, not grad_cam's
