"""bench_eval_224's chosen explainers and its row cache (a stopped run continues)."""

from __future__ import annotations

import importlib
import json

import pytest


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| fast")]


@pytest.mark.slow  # two ResNet-18 evaluations at 32 px: seconds
def test_explainers_replace_the_presets_and_cached_rows_are_read_back(tmp_path):
    bench = importlib.import_module("benchmarks.bench_eval_224")
    flags = ["--quick", "--no-write", "--estimate", "--cache", str(tmp_path)]
    first = _rows(bench.main([*flags, "--explainers", "grad_cam"]))
    assert [r.split(" | ")[:3] for r in first] == [["| fast", "grad_cam", "measured"]]
    (stored,) = tmp_path.glob("*.json")
    assert stored.name == "fast_grad_cam+reference_32px_1img_1t_cpu_quick.json"
    row = json.loads(stored.read_text())
    assert row["work"] > 0 and row["cpu_s"] > 0
    # the time left the evaluate's progress bar would print, over the time the run then took
    ratios = row["eta_ratio"]
    assert set(ratios) <= {"first", "10%", "25%", "50%"} and "first" in ratios
    assert all(0 < r < 100 for r in ratios.values())
    assert first[0].split(" | ")[7] == f"{ratios['first']:.3g}"
    row["cpu_s"] = 1234.5  # a stored row is read back, not measured again
    stored.write_text(json.dumps(row))
    again = _rows(bench.main([*flags, "--explainers", "grad_cam"]))
    assert again[0].split(" | ")[4] == "1.23e+03"  # 1234.5 in bench_utils.table's format
    assert again[0].split(" | ")[3] == first[0].split(" | ")[3]  # the same planned work


def test_an_unknown_explainer_is_refused_before_any_work(capsys):
    bench = importlib.import_module("benchmarks.bench_eval_224")
    with pytest.raises(SystemExit) as stop:
        bench.main(["--quick", "--no-write", "--explainers", "salency"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--explainers salency" in err
