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
