"""Chance levels beside every attacked top-k number: the baselines page's random-map row and its
share above "map = input" (experiments/baselines.py), and the generated pages' tables checked
from their results data."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from experiments import baselines as bl

RANDOM = "fragility/{ex}/random_topk"
RANDOM_LENS = "fragility/{ex}/random_lens"


def _write(out: Path, row: str, ex: str, topk: list, chance: list | None, ref: list | None = None):
    per_image = {f"attack/{ex}/{a}/{m}": topk for a, m, _ in bl.COLUMNS}
    if chance is not None:
        per_image[RANDOM.format(ex=ex)] = chance
        per_image[RANDOM_LENS.format(ex=ex)] = [None if c is None else c + 0.2 for c in chance]
    if ref is not None:
        per_image.update({f"attack/input_reference/{a}/{m}": ref for a, m, _ in bl.COLUMNS})
    job = {"row": row, "explainer": ex, "indices": [5, 6, 7], "n_images": 3, "cpu_s": 6.0,
           "accuracy": 0.97, "measures": {}, "per_image": per_image}  # fmt: skip
    (out / "jobs" / f"{bl._job_id(row, ex)}.json").write_text(json.dumps(job))


def test_the_baselines_table_has_a_random_map_row_and_the_share_above_map_input(tmp_path):
    (tmp_path / "jobs").mkdir()
    meta = {"chosen": {"natural": None, "adversarial": 0.05, "gaussian_noise": 0.12},
            "indices": [5, 6, 7]}  # fmt: skip
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    ref = [0.6, 0.6, 0.6]
    _write(tmp_path, "natural/s0", "saliency", [0.1, 0.7, 0.3], [0.12, 0.14, 0.13], ref)
    _write(tmp_path, "natural/s1", "saliency", [0.6, 0.9, None], [0.10, 0.11, None])
    _write(tmp_path, "shipped robust", "saliency", [0.8, 0.7, 0.5], [0.2, 0.2, 0.2])
    _write(tmp_path, "natural/s0", "grad_cam", [0.0, 0.0, 0.0], None)  # kept none
    t = bl.tables(tmp_path)
    rows = {r[0]: r for r in t["main"]["rows"]}
    random, cols = rows["random map (every model)"], t["main"]["columns"]
    per_model = [statistics.mean([0.12, 0.14]), statistics.mean([0.10, 0.11]), 0.2]  # images 5, 6
    want = f"{statistics.mean(per_model):.3f} ± {statistics.stdev(per_model):.3f}"
    assert random[cols.index("saliency top-k ∩ ensemble")] == want
    lens = [v + 0.2 for v in per_model]
    assert random[cols.index("saliency LENS ensemble")].startswith(f"{statistics.mean(lens):.3f}")
    assert random[cols.index("saliency top-k ∩ noise")] == "-"
    assert random[cols.index("grad_cam top-k ∩ ensemble")] == "not run"  # a job without it
    above = {r[0]: r[1:] for r in t["above"]["rows"]}
    assert above["natural"] == ["0.50 (2/4)", "0.00 (0/3)"]  # 0.7 and 0.9 > 0.6; equal is not
    assert above["shipped robust"] == ["1.00 (2/2)", "not run"]
    assert above["adversarial"] == ["not run", "not run"]


def test_the_sanity_pages_chance_rows_score_random_maps_on_the_correct_images_only() -> None:
    import torch

    from experiments import sanity_checks as sc
    from robust_train.evaluation.parts.fragility import random_map_level
    from robust_train.explain import importance_map

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(144, 2))
    x = torch.rand(6, 1, 12, 12)
    x[5] = 0.5  # a constant input: its map is left out
    y = model(x).argmax(1)
    y[0] = 1 - y[0]  # misclassified: left out
    levels = sc.chance_rows(model, x, y)
    assert set(levels) == set(sc.CHANCE_MAPS)
    want = random_map_level(importance_map(x[1:5]), sc.K, "random_topk", 0).mean()
    assert levels["map = input"][0] == pytest.approx(float(want), abs=1e-6)
    for topk, lens in levels.values():
        assert abs(topk - sc.K / 144) < 0.1 and topk <= lens <= 1.0  # k / (H W) in expectation


# ------------------------------------------------------------------ every generated page's tables
TOPK = re.compile(r"∩|top-k|top-\d+|LENS|topk", re.I)
UNDER_ATTACK = re.compile(r"attack|ensemble", re.I)
REFERENCE = "map = input"

# Tables of the generated pages that print a top-k or LENS value under attack without both chance
# levels beside it (a random map's score and "map = input" under the same attack): the levels
# each lacks, and why. A table that gains one must change its entry; a new table missing one fails.
BOTH, INPUT = ("random map", REFERENCE), (REFERENCE,)
GONE = "its models are not kept; its random map is the expectation k/N (experiments.chance)"
GAPS = {
    "architectures:one-recipe-three-architectures": (INPUT, GONE),
    "cheaper:mean-over-the-two-seeds": (INPUT, GONE),
    "cheaper:per-run": (INPUT, GONE),
    "cheaper:saliency-and-ig-together-input-x-2": (INPUT, GONE),
    "cheaper:the-shipped-recipe-and-every": (INPUT, GONE),
    "lrp:summary": (INPUT, GONE),
    "lrp:surrogate": (INPUT, GONE),
    "lrp:sweep": (INPUT, "validation sweep; " + GONE),
    "lrp:sweep-2": (INPUT, "validation sweep; " + GONE),
    "lrp:table": (INPUT, GONE),
    "lrp:table-2": (INPUT, GONE),
    "measurements:3-grad-cam-the-default-layer-3": (INPUT, "an earlier pair; " + GONE),
    "new_explainers:2-fine-tuning-for-them-weight": (INPUT, "validation sweep; " + GONE),
    "new_explainers:2-fine-tuning-for-them-weight-2": (INPUT, "validation sweep; " + GONE),
}


def _labels(table: dict) -> list[str]:
    """The row labels: each row's first three cells (a model, a protocol and a map column)."""
    return [str(cell) for row in table["rows"] for cell in row[:3]]


def attacked_topk(table: dict) -> bool:
    """Whether a results table prints a top-k or LENS value under attack: a column or row label
    naming both, or a "map = input" column or row (a reference that exists only under attack).

    Examples:
        >>> attacked_topk({"columns": ["model", "sal ∩ attack"], "rows": [["a", "0.1"]]})
        True
        >>> attacked_topk({"columns": ["model", "top-k under noise"], "rows": [["a", "0.1"]]})
        False
    """
    names = [*table["columns"], *_labels(table)]
    return any(TOPK.search(n) and UNDER_ATTACK.search(n) for n in names) or any(
        n.startswith(REFERENCE) for n in names
    )


def missing_levels(table: dict) -> tuple[str, ...]:
    """The chance levels ("random map", "map = input") no column or row label of a table names."""
    names = " ".join([*table["columns"], *_labels(table)]).lower()
    return tuple(level for level in BOTH if level not in names)


def has_chance_levels(table: dict) -> bool:
    """Whether a table names a random map's score and "map = input" in a column or row label."""
    return not missing_levels(table)


def _gaps() -> dict[str, tuple[str, ...]]:
    from experiments.pages import RESULTS
    from experiments.support import read_text

    found = {}
    for path in sorted(RESULTS.glob("*.json")):
        for key, table in (json.loads(read_text(path)).get("tables") or {}).items():
            if attacked_topk(table) and not has_chance_levels(table):
                found[f"{path.stem}:{key}"] = missing_levels(table)
    return found


def test_every_attacked_topk_table_of_a_page_stands_beside_its_chance_levels() -> None:
    found = _gaps()
    assert "ensemble_maps:maps" not in found and "cluttered:ensemble" not in found
    assert "recipe_search:full" not in found
    assert sorted(set(found) - set(GAPS)) == [], (
        "attacked top-k without a random map or map = input"
    )
    assert sorted(set(GAPS) - set(found)) == [], "these have their chance levels now: unlist them"
    changed = {k: found[k] for k in GAPS if GAPS[k][0] != found[k]}
    assert changed == {}, "these lack other chance levels now: change their entries"


def test_every_map_job_of_the_leaderboards_ensemble_section_stands_beside_its_chance_levels():
    """From the committed job results the leaderboard page reads: every map job holds a random
    map's level on each of its images, every model measured holds "map = input" under the same
    ensemble, so no cell of the section's chance rows is missing."""
    from experiments import leaderboard_ensemble_report as report
    from experiments.pages import RESULTS

    folder = RESULTS / "leaderboard"
    jobs = report.load_jobs(folder / json.loads((folder / "page.json").read_text())["ensemble"])
    maps = [j for j in jobs if j["explainer"] in report.MAPS]
    assert maps
    for j in maps:
        for key in (report.RANDOM, report.RANDOM_LENS):
            assert len(j["per_image"][key.format(m=j["explainer"])]) == len(j["indices"]), j["id"]
    refs = report._references(jobs, report.REFERENCE)
    assert {(j["method"], j["seed"]) for j in maps} <= set(refs)
    meta = {"rows": list(report.ROWS), "seeds": list(report.SEEDS)}
    for name in ("topk", "lens"):
        chance = [
            r for r in report.tables(jobs, meta)[name] if r[0].startswith(("map =", "random"))
        ]
        assert len(chance) == 2 and not any("not run" in c for r in chance for c in r), chance
