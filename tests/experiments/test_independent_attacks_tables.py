"""experiments/independent_attacks.py: the page's tables written from stored run files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from experiments import independent_attacks as ia


def _record(model: str, explainer: str, attack: list[float], noise: list[float]) -> dict:
    stat = {"mean": 0.5, "lo": 0.4, "hi": 0.6, "n": len(attack)}
    return {"kind": "result", "model": model, "explainer": explainer, "n_images": len(attack),
            "attack": {"topk": ia.mean_ci(attack), "spearman": stat, "per_image_topk": attack},
            "noise": {"topk": ia.mean_ci(noise), "spearman": stat, "per_image_topk": noise},
            "n_could_not_move": 0, "n_no_label_kept_iterate": 0, "n_clean_support_below_k": 1,
            "clean_overlap_with_input": 0.25, "cpu_seconds": 3.0}  # fmt: skip


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_runs_are_read_in_explainer_order_a_later_line_replacing_an_earlier_one(tmp_path):
    checks = {"kind": "checks", "model": "natural", "saliency_vs_captum": 0.0}
    first = _write(tmp_path / "a.jsonl", [
        {"kind": "run"}, checks, _record("natural", "input", [0.7], [0.8]),
        _record("natural", "saliency", [0.1], [0.5]), _record("robust", "saliency", [0.6], [0.8]),
    ])  # fmt: skip
    second = _write(tmp_path / "b.jsonl", [_record("natural", "saliency", [0.2], [0.5])])
    records, found = ia.read_runs([first, second])
    assert [(r["model"], r["explainer"]) for r in records] == [
        ("natural", "saliency"), ("robust", "saliency"), ("natural", "input")]  # fmt: skip
    assert records[0]["attack"]["per_image_topk"] == [0.2] and found == {"natural": checks}
    table = ia.results_table(records)
    assert table["columns"][3] == "attack top-100 ∩ [95% CI]"
    assert table["rows"][2][0] == ia.REFERENCE_LABEL and len(table["rows"][0]) == 12


def test_the_attacked_set_table_compares_the_images_both_runs_attacked():
    wide = [_record("robust", "gradcam", [0.5, 0.6, 0.7, 0.9], [0.9] * 4)]
    narrow = [_record("robust", "gradcam", [0.4, 0.7, 0.6], [0.8, 0.9, 1.0])]
    (row,) = ia.k_table(wide, narrow)["rows"]
    assert row[:4] == ["gradcam", "robust", "3", "0.600"]  # the first 3 of the wide run
    assert row[4].startswith("0.567 [")
    worst = np.minimum([0.5, 0.6, 0.7], [0.4, 0.7, 0.6])
    assert row[5].startswith(f"{worst.mean():.3f} [")
    assert row[6:] == ["0.900", "2 of 3"]  # 0.4 < 0.5 and 0.6 < 0.7; 0.7 > 0.6 is not lower


def test_checks_table_prints_zero_as_zero_and_the_largest_of_each_composite():
    keys = [k for _, ks in ia.CHECK_ROWS for k in ks if k != "max"]
    record = dict.fromkeys(keys, 0.0)
    record["lrp_epsilon_gamma_box_by_hand_vs_zennit"] = 1.93e-9
    record["lrp_epsilon_plus_vs_zennit_gradient"] = 2e-8
    table = ia.checks_table({"natural": record})
    cells = {row[0]: row[1] for row in table["rows"]}
    assert cells[ia.CHECK_ROWS[0][0]] == "0"
    assert cells[ia.CHECK_ROWS[4][0]] == "2.0e-08"
    assert cells[ia.CHECK_ROWS[5][0]] == "0 / 0 / 1.9e-09"


def test_store_tables_writes_the_tables_with_the_random_map_rows(tmp_path, monkeypatch):
    from experiments import pages

    monkeypatch.setattr(pages, "RESULTS", tmp_path)
    (tmp_path / "independent_attacks.json").write_text(json.dumps({"tables": {}}))
    ensemble = {"maps": {"columns": ["map", "robust"], "rows": [["saliency", "0.5 [0.4, 0.6]"]]}}
    (tmp_path / "ensemble_maps.json").write_text(json.dumps({"tables": ensemble}))
    keys = [k for _, ks in ia.CHECK_ROWS for k in ks if k != "max"]
    checks = {"kind": "checks", "model": "robust", **dict.fromkeys(keys, 0.0)}
    result = _record("robust", "saliency", [0.5, 0.6], [0.8, 0.9])
    wide = _write(tmp_path / "w.jsonl", [checks, result])
    narrow = _write(tmp_path / "n.jsonl", [_record("robust", "saliency", [0.4, 0.7], [0.8, 0.8])])
    tables = json.loads(ia.store_tables([str(wide)], [str(narrow)]).read_text())["tables"]
    assert list(tables) == list(ia.PAGE_TABLES)
    for key in ia.PAGE_TABLES[1:3]:
        assert tables[key]["rows"][-1][0].startswith("random map (expectation k/N = 100/784")
    assert tables[ia.PAGE_TABLES[2]]["rows"][0][7] == "1 of 2"
    with pytest.raises(KeyError):
        ia.k_table([], [_record("robust", "saliency", [0.4], [0.8])])


def test_the_ensemble_table_sets_the_ensemble_beside_each_images_worst_of_both_attacked_sets():
    wide = [_record("robust", "saliency", [0.5] * 20 + [0.2], [0.9] * 21),
            _record("natural", "saliency", [0.1] * 21, [0.5] * 21),
            _record("robust", "input", [0.8] * 21, [0.8] * 21)]  # fmt: skip
    narrow = [_record("robust", "saliency", [0.4] * 10, [0.9] * 10)]
    columns = ["map", "natural", "robust", "map = input (robust)"]
    ensemble = {"columns": columns, "rows": [["saliency", "0.05 [0.0, 0.1]", "0.46 [0.4, 0.5]",
                                              "0.7 [0.6, 0.8]"]]}  # fmt: skip
    rows = {(r[0], r[1]): r for r in ia.ensemble_table(wide, narrow, ensemble)["rows"]}
    robust = rows[("saliency", "robust")]
    # first 20 images: 10 at min(0.5, 0.4), 10 at 0.5 -> 0.45, below the ensemble's 0.46
    assert robust[2:6] == ["0.450 (20)", f"{(10 * 0.4 + 10 * 0.5 + 0.2) / 21:.3f} (21)",
                           "0.46 [0.4, 0.5]", "**no**"]  # fmt: skip
    assert rows[("saliency", "natural")][4:6] == ["0.05 [0.0, 0.1]", "yes"]
    assert rows[(ia.REFERENCE_LABEL, "robust")][4:6] == ["0.7 [0.6, 0.8]", "yes"]
    assert (ia.REFERENCE_LABEL, "natural") not in rows  # not run
