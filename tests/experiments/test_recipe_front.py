"""The recipe front (experiments/recipe_front.py and recipe_front_report.py): the combined
candidate is the shipped penalty plus the Grad-CAM probe's term, the jobs run in the stated
order, and collect's tables agree with the per-image values they are read from."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from experiments import recipe_front as rf
from experiments import recipe_front_report as rr
from experiments import recipe_gradcam_probe as gp
from experiments import recipe_search as rs
from robust_train.core.resources import shipped_config


def test_the_combined_candidate_is_the_shipped_penalty_plus_the_probe_term():
    config = yaml.safe_load(shipped_config("mnist5k_finetune_every_map").read_text())
    (penalty,) = config["model"]["penalties"]
    first, second = rf.terms("combined_s2", 2)
    assert first.weight == penalty["init_args"]["weight"] and first.generator.initial_seed() == 2
    assert first.options.explainers == tuple(penalty["init_args"]["explainers"])
    assert first.options.map_powers == tuple(penalty["init_args"]["map_powers"])
    probe = gp.probe_options(rf.COMBINED_PROBE)
    assert second.name == "grad_cam_topk" and second.generator.initial_seed() == 2 + rf.SECOND_SEED
    assert second.weight == probe["weight"] == 10.0
    assert second.options.explainers == ("grad_cam",)
    assert second.options.distance == probe["distance"] == "l1_topk_mass"
    assert second.options.n_ascent_steps == 3 and second.options.radius == first.options.radius
    assert [t.name for t in rf.terms("shipped_unit", 0)] == ["multi_map"]
    assert rf.terms("natural_unit", 0) == []


def test_the_plan_measures_every_map_once_in_the_stated_order():
    jobs = rf.plan(rf.models())
    assert len(set(jobs)) == len(jobs)
    fits = [j for j in jobs if j[0] == "fit"]
    assert jobs[: len(fits)] == fits  # every fit before any measurement
    assert {j[1] for j in fits} == {m.tag for m in rf.models()} | {"natural_unit", "shipped_unit"}
    full = [j for j in jobs if j[0] == "full"]
    reused = {m.tag for m in rf.models() if m.source in ("pair", "searchfull")}
    assert "shipped_s0" in reused and not {j[1] for j in full} & reused  # their jobs are reused
    for m in rf.models():
        if m.tag not in reused:
            maps = {j[2] for j in full if j[1] == m.tag}
            expected = set(rf.MAPS) - ({"grad_cam"} if m.source == "probe" else set())
            assert maps == expected, m.tag
    combined = [i for i, j in enumerate(full) if j[1].startswith("combined") and j[2] in rf.FIRST]
    assert combined == list(range(len(combined))) and len(combined) == 3 * 2 * 2
    prioritised = [(t, e) for t, maps in rf.PRIORITY for e in maps]
    assert [j[1:3] for j in full if j[3] == 0][: len(prioritised)] == prioritised


def _job(folder, model, explainer, chunk, values, random, reference=None):
    per = {f"attack/{explainer}/topk/topk_intersection": values,
           f"fragility/{explainer}/random_topk": random}  # fmt: skip
    if reference is not None:
        per["attack/input_reference/topk/topk_intersection"] = reference
    n = len(values)
    job = {"model": model, "explainer": explainer, "chunk": chunk, "per_image": per,
           "index": list(range(chunk * n, (chunk + 1) * n)), "cpu_seconds": 1.0,
           "attack_cost": {}}  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{model}__{explainer}__{chunk:03d}.json").write_text(json.dumps(job))


def _fit(runs, tag, acc, epochs=None):
    row = {"tag": tag, "test_acc": acc, **({"epoch_cpu_s": epochs} if epochs else {})}
    (runs / "fits").mkdir(parents=True, exist_ok=True)
    (runs / "fits" / f"{tag}.json").write_text(json.dumps(row))


def test_collect_reads_the_per_image_values_into_its_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(rr, "IMAGES", 4)
    runs, probe, pair = tmp_path / "runs", tmp_path / "probe", tmp_path / "pair"
    search = tmp_path / "search"
    probe.mkdir()
    ref = [[0.6, 0.2], [0.5, None]]  # "map = input": None where the label flipped
    for c in (0, 1):
        _job(pair, "natural", "saliency", c, [0.1, 0.0], [0.12, 0.13], ref[c])
        _job(pair, "robust", "saliency", c, [0.7, 0.3], [0.12, 0.13], ref[c])
        _job(pair, "robust", "grad_cam", c, [0.5, 0.6], [0.1, 0.1])
        _job(search / "full" / "corner_config_s0", "robust", "lrp", c, [0.2, 0.3], [0.1, 0.1])
        _job(runs / "full" / "combined_s0", "robust", "saliency", c, [0.8, 0.1], [0.1, 0.2], ref[c])
    _job(runs / "full" / "combined_s0", "robust", "grad_cam", 0, [0.9, 0.9], [0.1, 0.1])
    full = {"index": [0, 1, 2, 3], "topk": [0.4, 0.5, 0.6, None], "input": [0.5] * 4,
            "random": [0.125] * 4}  # fmt: skip
    (probe / "gc_w10_l1tm_full.json").write_text(json.dumps(full))
    fits = [
        ("natural", 0.971),
        ("shipped_s0", 0.97),
        ("gc_w10_l1tm", 0.968),
        ("corner_config", 0.9),
    ]
    for tag, acc in fits:
        _fit(runs, tag, acc)
    _fit(runs, "combined_s0", 0.96, [3.0, 3.0])
    _fit(runs, "natural_unit", 0.978, [1.0, 2.0])
    page = tmp_path / "recipe_search.json"
    page.write_text(json.dumps({"tables": {"full": {"rows": []}}}))
    monkeypatch.setattr(rs, "RESULTS", page)
    data = rr.collect(runs, probe, pair, search, tmp_path / "front.json", tmp_path / "front.png")
    wide = {r[0]: r for r in data["tables"]["front"]["rows"]}
    assert list(wide) == ["natural", "shipped_s0", "combined_s0", "gc_w10_l1tm", "corner_config"]
    assert wide["corner_config"][3] == "0.900" and wide["corner_config"][8] == "0.250"
    sal, gc = 5, 7  # columns of saliency and Grad-CAM
    assert wide["shipped_s0"][sal] == "0.500" and wide["shipped_s0"][gc] == "0.550"
    assert wide["combined_s0"][gc] == "-"  # one chunk of two: not counted
    assert wide["combined_s0"][4] == f"{(6 + 6.0 / 1.5) / 6:.2f}x" and wide["natural"][4] == "-"
    assert wide["gc_w10_l1tm"][gc] == "0.500" and wide["gc_w10_l1tm"][sal] == "-"
    assert wide["natural"][-2] == f"{(0.6 + 0.2 + 0.5) / 3:.3f}"
    rows = {(r[0], r[3]): r for r in data["tables"]["front_maps"]["rows"]}
    row = rows[("combined_s0", "saliency")]
    assert row[4:7] == ["4", row[5], "0.65"] and row[5].startswith("0.450 [")
    assert row[7].startswith("0.150") and row[-1] == "2 of 3"  # 0.8 > 0.6, 0.1 < 0.2, 0.8 > 0.5
    assert rows[("gc_w10_l1tm", "Grad-CAM")][-1] == "1 of 3"  # the probe's own "map = input"
    seeds = {r[0]: r for r in data["tables"]["front_seeds"]["rows"]}
    assert list(seeds) == ["natural (file)", "shipped", "combined", "gc_w10_l1tm"]
    assert seeds["shipped"][4] == "0.500; 0 of 1 at target"
    assert seeds["shipped"][6] == "0.550; 1 of 1 at target"
    assert seeds["shipped"][-2:] == [f"{(0.6 + 0.2 + 0.5) / 3:.3f}", "0.100-0.125"]
    (pairs,) = data["tables"]["front_paired"]["rows"]  # saliency, seed 0: in both
    assert pairs[:2] == ["saliency", "0"] and pairs[4].startswith("-0.050 [")
    assert pairs[5] == "2 / 2 of 4"  # 0.8 - 0.7, 0.1 - 0.3 on each chunk
    stored = json.loads(page.read_text())["tables"]
    assert {"full", "front", "front_seeds", "front_maps", "front_paired"} < set(stored)
    assert data["tables"]["front_price_paired"]["rows"] == []  # no price model measured
    saved = json.loads((tmp_path / "front.json").read_text())
    assert math.isclose(saved["units"]["natural_unit"]["cost"], (6 + 3 / 1.5) / 6)
    assert (tmp_path / "front.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(FileNotFoundError, match="`--runs`"):
        rr.collect(tmp_path / "none", probe, pair, search, tmp_path / "x.json")


def test_an_unknown_model_or_a_missing_folder_is_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        rr.main(["run", "--runs", str(tmp_path / "r"), "--models", "nope"])
    assert exit_.value.code == 2 and "`--models`" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    with pytest.raises(SystemExit) as exit_:
        rr.main(["collect", "--runs", str(tmp_path), "--probe", str(tmp_path / "p")])
    assert exit_.value.code == 2 and "`--probe`" in capsys.readouterr().err
