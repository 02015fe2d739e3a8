"""experiments/certified_front.py's before -> now table: a shipped model scored both from the file
shipped before (--out/before/) and from the file shipped now (--out/scores/) gets a column pair
whose values come from the right files; a model without both is left out."""

from __future__ import annotations

import json
import math
from pathlib import Path

from experiments import certified_front as cf


def _score(folder: Path, name: str, base: float, crown: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    interval = {
        "test_acc": base,
        "certified_median": [base + 0.01, base + 0.02, 0.0, 0.0],
        "certified_overlap": [base + 0.03, base + 0.04, 0.0, 0.0],
        "empirical": [base + 0.05, base + 0.06, base + 0.07, base + 0.08],
        "empirical_min_gap": base + 0.09,
    }
    (folder / f"{name}.interval.json").write_text(json.dumps(interval))
    if crown:
        crown_row = {"certified_median": [base + 0.1, base + 0.11]}
        (folder / f"{name}.crown.json").write_text(json.dumps(crown_row))


def test_before_and_now_columns_come_from_their_folders(tmp_path) -> None:
    _score(tmp_path / "before", "mnist5k_certified", 0.1, crown=True)
    _score(tmp_path / "scores", "mnist5k_certified", 0.5, crown=False)
    _score(tmp_path / "scores", "mnist5k_robust", 0.7, crown=True)  # no file before: left out
    table = cf.before_after(tmp_path)
    assert table["columns"] == ["measure", "mnist5k_certified before", "mnist5k_certified now"]
    assert table["align"] == "|---|---|---|"
    rows = {row[0]: row[1:] for row in table["rows"]}
    assert list(rows) == list(cf.CHANGE)
    assert rows["test accuracy"] == ["0.100", "0.500"]
    assert rows["certified median (interval), 0.01"] == ["0.120", "0.520"]
    assert rows["certified mean (interval), 0.005"] == ["0.130", "0.530"]
    assert rows["certified median (CROWN, 3 images), 0.01"] == ["0.210", "-"]  # no CROWN now
    assert rows["attacked mean, 0.05"] == ["0.180", "0.580"]  # the fourth radius, 0.05
    assert rows["min attacked - certified"] == ["0.190", "0.590"]
    assert math.isclose(cf.EPSILONS[3], 0.05)


def test_no_model_scored_before_gives_a_table_of_measures_only(tmp_path) -> None:
    _score(tmp_path / "scores", "mnist5k_robust", 0.7, crown=True)
    table = cf.before_after(tmp_path)
    assert table["columns"] == ["measure"] and [r[0] for r in table["rows"]] == list(cf.CHANGE)
