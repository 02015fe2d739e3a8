"""The recipe_search experiment: candidates are the shipped recipe with changes; its tables put
each candidate's proxy levels beside its cost in natural epochs and mark the front."""

from __future__ import annotations

import json

import pytest

from experiments import recipe_search as rs


def test_a_candidate_is_the_shipped_config_with_its_changes():
    shipped = rs.recipe("shipped")
    assert shipped["weight"] == 3.0 and shipped["explainers"][-1] == "grad_cam"
    assert shipped["epochs"] == 2 and shipped["lr"] == pytest.approx(0.004)
    corner = rs.recipe("corner_w6")
    assert {k: v for k, v in corner.items() if shipped.get(k) != v} == rs.CANDIDATES["corner_w6"]
    with pytest.raises(ValueError, match="`candidates`.*'nope'"):
        rs.recipe("nope")


def _row(name, acc, proxy, epochs):
    return {"name": name, "seed": 0, "changes": rs.CANDIDATES[name], "val_acc": acc,
            "test_acc": acc, "epoch_cpu_s": epochs, "index": [1, 2],
            "proxy": dict(zip(rs.PROXY_MAPS, proxy, strict=True))}  # fmt: skip


def test_the_candidates_table_costs_and_front(tmp_path):
    natural = _row("natural", 0.99, [0, 0, 0], [1.0, 1.0])
    del natural["proxy"]  # the cost unit is not scored
    rows = [natural,
            _row("shipped", 0.98, [0.5, 0.3, 0.6], [3.0, 3.0]),
            _row("w6", 0.97, [0.6, 0.4, 0.7], [3.0, 3.0]),
            _row("corner", 0.96, [0.5, 0.3, 0.5], [4.5, 4.5])]  # fmt: skip
    for r in rows:
        (tmp_path / f"{r['name']}_s0.json").write_text(json.dumps(r))
    table = rs.candidate_table(rs.load_search(tmp_path))
    got = {row[0]: row for row in table["rows"]}
    assert len(table["columns"]) == len(table["align"].split("|")) - 2
    # Two epochs of 3 CPU s against natural epochs of 1 s: 6 natural epochs, (6 + 6) / 6 = 2x.
    assert got["shipped"][5:7] == ["6.00", "2.00x"] and got["corner"][5:7] == ["9.00", "2.50x"]
    assert got["w6"][7:11] == ["0.600", "0.400", "0.700", "0.567"]
    # The front of (val accuracy, mean proxy): corner is beaten by shipped on both.
    assert [got[n][-1] for n in ("shipped", "w6", "corner")] == ["yes", "yes", ""]
    assert got["natural"][7:] == ["-", "-", "-", "-", ""]  # the cost unit, not a candidate


def _job(name, chunk, values, ref=None, random=None):
    from experiments import ensemble_maps as em

    index = [10 * chunk + i for i in range(len(values))]
    per_image = {em.TOPK.format(m=name): values}
    if random is not None:
        per_image[em.RANDOM.format(m=name)] = random
    if ref is not None:
        per_image[em.REFERENCE] = ref
    cost = {"members": [], "cpu_seconds": 1.0, "seconds": 1.0, "images": len(values)}
    return {"model": "robust", "explainer": name, "chunk": chunk, "index": index,
            "per_image": per_image, "cpu_seconds": 4.0,
            "attack_cost": {f"{name}/topk": cost}}  # fmt: skip


def test_the_full_check_is_paired_with_the_shipped_model_and_checks_the_proxy(tmp_path):
    before, after = tmp_path / "before", tmp_path / "runs" / "full" / "corner_s0"
    for folder, sal, cam in ((before, [0.5, 0.6], [0.2, 0.2]), (after, [0.6, 0.5], [0.3, 0.3])):
        folder.mkdir(parents=True)
        for name, values in (("saliency", sal), ("grad_cam", cam)):
            job = _job(name, 0, values, ref=[0.55, 0.55] if name == "saliency" else None,
                       random=[0.12, 0.14] if name == "saliency" else None)  # fmt: skip
            (folder / f"robust__{name}__000.json").write_text(json.dumps(job))
    full = rs.full_table(tmp_path / "runs", before)
    rows = {row[1]: row for row in full["rows"]}
    assert rows["saliency"][5].startswith("+0.000 [") and rows["saliency"][6] == "1 / 1 of 2"
    assert rows["Grad-CAM"][5].startswith("+0.100 [") and rows["Grad-CAM"][6] == "2 / 0 of 2"
    assert rows["saliency"][8] == "0.500 (1/2)"  # 0.6 > 0.55, 0.5 < 0.55
    col = full["columns"].index("random map (candidate)")
    assert rows["saliency"][col].startswith("0.130 [") and rows["Grad-CAM"][col] == "not run"
    assert len(full["columns"]) == len(full["align"].split("|")) - 2 == len(rows["saliency"])
    found = {("corner", 0): _row("corner", 0.97, [0.58, 0.18, 0.6], []),
             ("shipped_before", 0): _row("shipped", 0.97, [0.53, 0.2, 0.6], [])}  # fmt: skip
    check = {row[1]: row for row in rs.check_table(found, full)["rows"]}
    assert check["saliency"][2:5] == ["0.580", "0.530", "+0.050"]
    assert check["Grad-CAM"][4] == "-0.020" and check["Grad-CAM"][5] == rows["Grad-CAM"][5]
