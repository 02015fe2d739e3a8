"""experiments/sanity_front.py (SANITY.md's front of top-layer dependence against robustness):
which models it measures and how, the front, and the stored page it writes."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from experiments import sanity_front as sf
from experiments.pages import RESULTS

ROOT = Path(__file__).resolve().parents[2]


def _slow_front(points: list[tuple[float, float]]) -> list[int]:
    """The front by its definition, written apart: a point is on it unless another point is at
    least as robust and at most as flat, better in one of the two."""
    keep = []
    for i, (r, c) in enumerate(points):
        others = points[:i] + points[i + 1 :]
        if not any(r2 >= r and c2 <= c and (r2, c2) != (r, c) for r2, c2 in others):
            keep.append(i)
    return sorted(keep, key=lambda i: points[i][0])


def test_the_front_is_every_point_no_other_point_beats():
    rng = random.Random(0)
    for _ in range(50):
        pts = [(rng.randint(0, 6) / 6, rng.randint(0, 6) / 6) for _ in range(rng.randint(1, 12))]
        assert sf.pareto(pts) == _slow_front(pts)
    # NaN (a model with every map constant) is never on the front and beats nothing
    assert sf.pareto([(0.5, float("nan")), (0.4, 0.5)]) == [1]


def _candidate(folder: Path, name: str, seed: int, ckpt: bool = True, **row) -> None:
    body = {"name": name, "seed": seed, "test_acc": 0.97, "changes": {}, **row}
    (folder / f"{name}_s{seed}.json").write_text(json.dumps(body))
    if ckpt:
        (folder / f"{name}_s{seed}.ckpt").write_bytes(b"w")


def test_candidates_take_the_shipped_files_for_the_shipped_rows_and_the_weight_series_first(
    tmp_path,
):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    proxy = {"proxy": {"saliency": 0.5, "grad_cam": 0.2}}
    _candidate(first, "zeta", 0, **proxy)
    _candidate(first, "corner_w4", 1, **proxy)
    _candidate(first, "corner", 0, **proxy)
    _candidate(first, "natural", 0)  # the cost unit: no proxy, left out
    _candidate(first, sf.NATURAL, 0, ckpt=False, **proxy)
    _candidate(first, sf.NOW, 0, ckpt=False, **proxy, changes={"checkpoint": "/x/last.ckpt"})
    _candidate(first, sf.BEFORE, 0, ckpt=False, **proxy)
    _candidate(second, "zeta", 0, test_acc=0.5, **proxy)  # a repeat: the first folder's wins
    _candidate(second, "scored", 0, ckpt=False, **proxy, changes={"checkpoint": "/y/f.ckpt"})
    rows = sf.candidates([first, second], None)
    names = [(r["name"], r["seed"]) for r in rows]
    assert names == [(sf.NATURAL, 0), (sf.NOW, 0), ("corner", 0), ("corner_w4", 1),
                     ("scored", 0), ("zeta", 0)]  # fmt: skip
    by = {r["name"]: r for r in rows}
    assert by[sf.NATURAL]["checkpoint"] == "checkpoints/mnist5k_baseline.ckpt"
    assert by[sf.NOW]["checkpoint"] == "checkpoints/mnist5k_robust.ckpt"  # not its config fit
    assert by["scored"]["checkpoint"] == "/y/f.ckpt"
    assert (
        by["zeta"]["checkpoint"] == str(first / "zeta_s0.ckpt") and by["zeta"]["test_acc"] == 0.97
    )
    # a config fit's JSON describes the fit; its file is given by name
    _candidate(first, "fit_config", 0, ckpt=False, **proxy, changes={"checkpoint": "robust-train"})
    given = sf.candidates([first], None, {"fit_config": "/w/last.ckpt"})
    assert {r["name"]: r["checkpoint"] for r in given}["fit_config"] == "/w/last.ckpt"
    with_before = sf.candidates([first], "/z/before.ckpt")
    assert [r["name"] for r in with_before][:3] == [sf.NATURAL, sf.NOW, sf.BEFORE]
    assert with_before[2]["checkpoint"] == "/z/before.ckpt"


def _curve(values: list[float]) -> dict:
    return {"xs": [0.0, 1.0, 2.0, 3.0, 4.0], "topk": values, "spearman": values}


def test_top_of_cascade_reads_the_top_layers_of_each_seeds_cascade():
    seeds = [
        {
            "curves": {
                f"sanity/{ex}/cascade": _curve([1.0, 0.5 + s / 10 + i, 0.3 + s / 10, 0.2, 0.1])
                for i, ex in enumerate(sf.EXPLAINERS)
            }
        }  # fmt: skip
        for s in range(3)
    ]
    out = sf.top_of_cascade(seeds)
    assert out["saliency"]["1"] == pytest.approx([0.5, 0.6, 0.7])
    assert out["saliency"]["2"] == pytest.approx([0.3, 0.4, 0.5])
    assert out["grad_cam"]["1"] == pytest.approx([1.5, 1.6, 1.7])


def _point(name: str, proxy: float, flat: float, seed: int = 0) -> dict:
    cascade = {ex: {str(n): [flat - 0.01, flat, flat + 0.01] for n in sf.LAYERS}
               for ex in sf.EXPLAINERS}  # fmt: skip
    return {"name": name, "seed": seed, "test_acc": 0.97, "cascade": cascade,
            "proxy": {"saliency": proxy, "grad_cam": proxy}}  # fmt: skip


def test_the_correlation_table_finds_a_conflict_and_its_front():
    # the more robust, the flatter, every fine-tune above the natural model's level
    points = [_point(sf.NATURAL, 0.1, 0.40), _point("a", 0.5, 0.50), _point("b", 0.6, 0.55),
              _point("c", 0.55, 0.60), _point(sf.NOW, 0.7, 0.58)]  # fmt: skip
    rows = sf.correlation_table(points)["rows"]
    assert len(rows) == len(sf.EXPLAINERS) * len(sf.LAYERS)
    saliency_top = rows[0]
    assert saliency_top[:3] == ["saliency", "1", "4"]
    assert saliency_top[3] == "+0.40 (p 0.6)"  # ranks 1 3 2 4 against 1 2 4 3: 1 - 6 * 6 / (4 * 15)
    assert saliency_top[5] == "0 of 4"  # none at or below 0.40 + its deviation 0.01
    assert saliency_top[6] == f"{sf.NATURAL} s0, a s0, b s0, {sf.NOW} s0"
    # a robust fine-tune as steep as the natural model: no longer a conflict, and a lead
    points.append(_point("lead", 0.8, 0.405))
    lead = sf.correlation_table(points)["rows"][0]
    assert lead[5] == "1 of 5" and lead[6] == f"{sf.NATURAL} s0, lead s0"
    verdicts = {r[0]: r[-1] for r in sf.front_table(points)["rows"]}
    assert verdicts["lead s0"] == "as natural (spreads overlap)"
    assert verdicts["a s0"] == "flatter than natural"


def test_the_weight_series_pools_every_training_seed_and_random_seed():
    points = [_point(sf.NATURAL, 0.1, 0.40), _point(sf.NATURAL_FINETUNE, 0.1, 0.41),
              _point("corner", 0.5, 0.50, 0), _point("corner", 0.7, 0.60, 1),
              _point("corner_w5", 0.8, 0.7), _point("other", 0.9, 0.9)]  # fmt: skip
    rows = sf.weight_table(points)["rows"]
    assert [r[0] for r in rows] == ["natural (shipped), no fine-tune", "0 (natural_finetune)",
                                    "3 (corner)", "5 (corner_w5)"]  # fmt: skip
    corner = rows[2]
    assert corner[1:5] == ["0, 1", "0.970", "0.600", "0.600"]
    # six values 0.49 0.50 0.51 0.59 0.60 0.61: mean 0.55, sample deviation 0.0554
    assert corner[5] == "0.550 ± 0.055"


def test_the_ensemble_levels_are_the_stored_recipe_search_cells():
    tables = json.loads((RESULTS / "recipe_search.json").read_text())["tables"]
    levels = sf.ensemble_levels()
    shipped = {r[0].split(" top-100")[0]: r for r in tables["shipped"]["rows"]}
    for label, key in (("saliency", "saliency"), ("Grad-CAM", "grad_cam")):
        natural, before, now = (float(c.split(" [")[0]) for c in shipped[label][1:4])
        assert (levels[sf.NATURAL][key], levels[sf.BEFORE][key], levels[sf.NOW][key]) == (
            natural, before, now,
        )  # fmt: skip
    full = [r for r in tables["full"]["rows"] if r[0] == "corner_w4_gcp2_config_s0"]
    assert levels["corner_w4_gcp2_config"]["saliency"] == float(
        next(r for r in full if r[1] == "saliency")[4].split(" [")[0]
    )


def test_the_stored_front_is_the_page_s_table_and_figure():
    data = json.loads((RESULTS / "sanity.json").read_text())
    points = data["front"]
    assert data["tables"]["5-front"] == json.loads(json.dumps(sf.front_table(points)))
    assert data["tables"]["5-front-correlation"] == json.loads(
        json.dumps(sf.correlation_table(points))
    )
    names = {p["name"] for p in points}
    assert {sf.NATURAL, sf.NOW, sf.BEFORE} <= names
    page = (ROOT / "experiments" / "SANITY.md").read_text()
    assert "../docs/images/sanity_cascade_front.png" in page
    assert sf.FIGURE.is_file()


def test_bad_arguments_are_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        sf.main(["--out", str(tmp_path), "--candidates", str(tmp_path / "nope")])
    assert exit_.value.code == 2 and "nope" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sf.main(["--out", str(tmp_path), "--candidates", str(tmp_path), "--score", "a=/no.ckpt"])
    assert "--score 'a=/no.ckpt'" in capsys.readouterr().err
