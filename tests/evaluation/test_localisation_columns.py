"""Localisation in the reports: the leaderboard's columns and the cluttered benchmark's table."""

from __future__ import annotations

import math

import pytest

from experiments.cluttered import parse_models, table_rows
from experiments.leaderboard_report import column_cells, columns


def leaderboard_run(test: dict[str, float]) -> dict:
    jobs = [{"kind": "eval", "method": "natural", "seed": 0, "group": "saliency", "test": test}]
    return {"jobs": jobs, "names": ["natural"], "chosen": ["natural"], "plan": {"seeds": [0]}}


def test_leaderboard_shows_localisation_columns_only_where_measured():
    plain = leaderboard_run({"accuracy": 0.9, "attack/saliency/topk/topk_intersection": 0.4})
    assert not [c for c in columns(plain) if "rel. mass" in c[2] or "pointing" in c[2]]
    masked = leaderboard_run(
        {
            "accuracy": 0.9,
            "localisation/saliency/relevance_mass": 0.25,
            "attack/saliency/topk/relevance_mass": 0.125,
            "attack/saliency/topk/pointing_game": 0.5,
        }
    )
    added = [c for c in columns(masked) if "rel. mass" in c[2] or "pointing" in c[2]]
    assert [c[2] for c in added] == [
        "sal rel. mass clean",
        "sal rel. mass attack",
        "sal pointing attack",
    ]
    cells = column_cells(masked)
    assert cells[("saliency", "attack/saliency/topk/relevance_mass")][("natural", 0)] == 0.125
    assert cells[("saliency", "localisation/saliency/relevance_mass")][("natural", 0)] == 0.25


def test_cluttered_table_has_a_row_per_map_with_map_equals_input_beside():
    result = {
        "label": "cnn/natural",
        "stamp": {"explainers": ["saliency", "grad_cam"]},
        "accuracy": 0.8591,
        "n_attacked": 30,
        "seconds": 12.0,
        "mask_area": 0.046,
        "attack/saliency/topk/topk_intersection": 0.1674,
        "attack/saliency/random_sign/topk_intersection": 0.5,
        "fidelity/saliency/fidelity": 0.7,
        "localisation/saliency/relevance_mass": 0.188,
        "attack/saliency/topk/relevance_mass": 0.065,
        "attack/input_reference/topk/topk_intersection": 0.385,
        "localisation/input_reference/relevance_mass": math.nan,
    }
    tables = table_rows([result])
    rows = {row[1]: row for row in tables["measures"]["rows"]}
    assert set(rows) == {"saliency", "grad_cam", "map = input"}
    assert rows["grad_cam"][3] == "-"  # not measured: a dash, never a number
    columns = tables["measures"]["columns"]
    sal = dict(zip(columns, rows["saliency"], strict=True))
    assert sal["accuracy"] == "0.859" and sal["top-k under attack"] == "0.167"
    assert sal["rel. mass attacked"] == "0.065" and sal["pointing clean"] == "-"
    ref = dict(zip(columns, rows["map = input"], strict=True))
    assert ref["top-k under attack"] == "0.385" and ref["rel. mass clean"] == "-"
    assert tables["cost"]["rows"] == [["cnn/natural", "30", "12", "-", "-", "-", "0.046"]]


def test_cluttered_models_argument_is_checked():
    assert parse_models(["cnn/natural=a.ckpt"]) == {"cnn/natural": "a.ckpt"}
    with pytest.raises(ValueError, match="ARCH/KIND=PATH, got 'natural=a.ckpt'"):
        parse_models(["natural=a.ckpt"])


def test_cluttered_cost_of_a_fine_tune_is_counted_with_its_natural_fit():
    def result(label: str, fit: float) -> dict:
        return {"label": label, "stamp": {"explainers": ["saliency", "grad_cam"]},
                "accuracy": 0.8, "n_attacked": 3, "mask_area": 0.05,
                "fit_cpu_seconds": fit}  # fmt: skip

    rows = table_rows([result("cnn/natural", 400.0), result("cnn/every_map", 100.0)])
    cost = {row[0]: row for row in rows["cost"]["rows"]}
    assert cost["cnn/every_map"][3:5] == ["100", "1.25"]  # (400 + 100) / 400
    assert cost["cnn/natural"][3:5] == ["400", "-"]
