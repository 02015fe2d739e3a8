"""The recipe front's results file is its archive: `collect` keeps a model (and a cost unit)
measured earlier whose run files are not under --runs as stored, and reads a model whose fit
file is under --runs from its jobs."""

from __future__ import annotations

import json
import math

from experiments import recipe_front_report as rr
from experiments import recipe_search as rs


def _maps(level: float) -> dict[str, dict[str, list[float]]]:
    index = list(range(4))
    return {"saliency": {"index": index, "values": [level] * 4, "random": [0.1] * 4},
            "input": {"index": index, "values": [0.5] * 4}}  # fmt: skip


def _stored() -> dict[str, object]:
    models = {
        "natural": {"group": "natural", "seed": 0, "maps": _maps(0.2),
                    "fit": {"tag": "natural", "test_acc": 0.971}},
        "corner_w6": {"group": "corner_w6", "seed": 0, "maps": _maps(0.6),
                      "fit": {"tag": "corner_w6", "test_acc": 0.963}},
        "combined_s0": {"group": "combined", "seed": 0, "maps": _maps(0.3),
                        "fit": {"tag": "combined_s0", "test_acc": 0.96, "epoch_cpu_s": [3.0]}},
    }  # fmt: skip
    units = {"natural_unit": {"tag": "natural_unit", "epoch_cpu_s": [1.5], "cost": 99.0}}
    return {"about": "old", "units": units, "models": models, "tables": {}}


def test_collect_with_empty_runs_keeps_the_stored_models(tmp_path, monkeypatch):
    runs, probe, pair, search = (tmp_path / n for n in ("runs", "probe", "pair", "search"))
    for folder in (runs, probe, pair, search):
        folder.mkdir()
    page = tmp_path / "recipe_search.json"
    page.write_text(json.dumps({"tables": {"full": {"rows": []}}}))
    monkeypatch.setattr(rs, "RESULTS", page)
    results = tmp_path / "front.json"
    results.write_text(json.dumps(_stored()))
    data = rr.collect(runs, probe, pair, search, results)
    saved = json.loads(results.read_text())
    assert saved["models"] == _stored()["models"] == data["models"]  # in models()'s order too
    assert list(saved["models"]) == ["natural", "combined_s0", "corner_w6"]
    assert math.isclose(saved["units"]["natural_unit"]["cost"], (6 + 1.0) / 6)  # not 99
    wide = {r[0]: r for r in saved["tables"]["front"]["rows"]}
    assert wide["corner_w6"][3] == "0.963" and wide["corner_w6"][5] == "0.600"
    assert wide["combined_s0"][4] == f"{(6 + 2.0) / 6:.2f}x"
    assert json.loads(page.read_text())["tables"]["front"] == saved["tables"]["front"]
    # a second collect of its own output: the same file
    before = results.read_text()
    rr.collect(runs, probe, pair, search, results)
    assert results.read_text() == before


def test_a_fit_file_under_runs_wins_over_the_stored_model(tmp_path, monkeypatch):
    runs, probe, pair, search = (tmp_path / n for n in ("runs", "probe", "pair", "search"))
    for folder in (runs / "fits", probe, pair, search):
        folder.mkdir(parents=True)
    page = tmp_path / "recipe_search.json"
    page.write_text(json.dumps({"tables": {"full": {"rows": []}}}))
    monkeypatch.setattr(rs, "RESULTS", page)
    results = tmp_path / "front.json"
    results.write_text(json.dumps(_stored()))
    (runs / "fits" / "corner_w6.json").write_text(json.dumps({"tag": "corner_w6", "test_acc": 0.9}))
    (runs / "fits" / "corner_w6_s1.json").write_text(json.dumps({"tag": "corner_w6_s1",
                                                                  "test_acc": 0.95}))  # fmt: skip
    saved = rr.collect(runs, probe, pair, search, results)["models"]
    assert saved["corner_w6"]["fit"]["test_acc"] == 0.9 and saved["corner_w6"]["maps"] == {}
    assert saved["corner_w6_s1"]["group"] == "corner_w6" and saved["corner_w6_s1"]["seed"] == 1
    assert saved["natural"] == _stored()["models"]["natural"]  # type: ignore[index]
    seeds = {r[0]: r for r in rr.seeds_table(rr.load(runs, probe, pair, search), None)["rows"]}
    assert seeds["search: corner start, weight 6"][1] == "0, 1"


def test_the_price_models_are_paired_with_the_shipped_recipe_of_their_seed():
    by_tag = {m.tag: m for m in rr.models()}

    def entry(tag: str, level: float) -> dict[str, object]:
        return {"model": by_tag[tag], "fit": {"test_acc": 0.97}, "maps": _maps(level)}

    found = {t: entry(t, v) for t, v in
             [("shipped_s0", 0.5), ("shipped_s1", 0.6), ("corner_w6", 0.7), ("corner_w10_s1", 0.9),
              ("corner_w10_s2", 0.1)]}  # fmt: skip
    rows = rr.price_paired_table(found)["rows"]
    assert [r[:3] for r in rows] == [["corner_w6", "saliency", "0"],
                                     ["corner_w10", "saliency", "1"]]  # fmt: skip
    assert rows[0][5].startswith("+0.200") and rows[1][5].startswith("+0.300")
    assert rows[1][6] == "4 / 0 of 4"
    assert rr.paired_table(found)["rows"] == []  # no combined model
