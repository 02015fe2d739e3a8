"""experiments/explainer_recipes.py: the summary's val rule per explainer (the rows of other
explainers left out; accuracy, measured images, all-zero maps and cost each able to exclude a
recipe), and a --quick run of every part."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from experiments import explainer_recipes


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


@pytest.mark.slow
def test_quick_sweep_summary_table_and_surrogate_run_end_to_end(
    tmp_path: Path, capsys, monkeypatch
):
    """The one driver's four parts, --quick: a one-term sweep (a natural row and the weight-1
    row), its summary, the table of the natural model beside the sweep's checkpoint, and the
    surrogate table (whose `Surrogate` gives the registered explainer's own map)."""
    for name in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS"):  # seed_everything sets them: restored
        monkeypatch.setenv(name, "0")
    out = ["--out", str(tmp_path)]
    terms = '[{"penalty": "smoothness", "explainer": "saliency", "radius": 0.3}]'
    sweep = ["sweep", "--quick", "--terms", terms, "--weights", "1", "--tag", "sm"]
    assert explainer_recipes.main(sweep + out) == 0
    rows = [json.loads(line) for line in (tmp_path / "sweep.jsonl").read_text().splitlines()]
    assert [(r["tag"], r.get("weight")) for r in rows] == [("natural", None), ("sm", 1.0)]
    assert all(0.0 <= r["val_acc"] <= 1.0 for r in rows)  # finite too
    assert rows[1]["val_attack"]["n_images"] == 4 and rows[1]["natural_fit_cpu_s"] > 0
    ckpt = tmp_path / "sm_w1.ckpt"
    assert rows[1]["ckpt"] == str(ckpt) and ckpt.is_file()
    capsys.readouterr()

    assert explainer_recipes.main(["summary", *out]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(lines) == 3 and lines[1].startswith("| natural |")
    assert lines[2].startswith("| sm | smoothness(radius=0.3) | 1 | 2 |")

    models = [f"natural={explainer_recipes.BASELINE}", f"x={ckpt}"]
    table = ["table", "--quick", "--model", *models, "--explainers", "saliency", "grad_cam"]
    assert explainer_recipes.main(table + out) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert lines[0].endswith("| grad_cam on common images |")
    assert [line.split(" | ")[0] for line in lines[1:]] == ["| natural", "| x"]
    written = json.loads((tmp_path / "table.json").read_text())
    assert set(written) == {"natural", "x"}
    assert set(written["x"]) == {"test_acc", "saliency", "saliency/random", "grad_cam",
                                 "grad_cam/random"}  # fmt: skip
    assert written["x"]["grad_cam"]["n_images"] == 4

    assert explainer_recipes.main(["surrogate", "--quick", *out]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(lines) == 1 + 6 and "| deeplift | softplus_10 surrogate |" in lines[-2]
    surrogate = json.loads((tmp_path / "surrogate.json").read_text())
    assert set(surrogate["grad_cam"]) == {"model itself", "softplus_10 surrogate", "random signs"}

    from robust_train.explain import get_explainer
    from robust_train.models import load_classifier

    model, (x, y) = load_classifier(explainer_recipes.BASELINE), explainer_recipes.split("test")
    for name in ("grad_cam", "deeplift"):
        same = explainer_recipes.Surrogate(name)(model, x[:3], y[:3])
        assert torch.equal(same, get_explainer(name)(model, x[:3], y[:3]))
