"""recipe_search's cascade table: each candidate's top-100 line of the cascading randomisation
beside the shipped pair's, per explainer, read from the files the `cascade` step writes."""

from __future__ import annotations

import json

import pytest

from experiments import recipe_search as rs


def _table(model, explainers=("saliency", "Grad-CAM")):
    rows = [[e, model, line, "1.000", f"0.{i}{len(model)}"]
            for i, e in enumerate(explainers) for line in ("top-100 ∩", "SSIM")]  # fmt: skip
    return {"columns": ["explainer", "model", "measure", "x 0", "x 1"], "align": "|", "rows": rows}


def test_the_cascade_table_puts_each_candidate_beside_the_shipped_pair(tmp_path):
    both = _table("natural")
    both["rows"] += _table("robust")["rows"]
    sanity = tmp_path / "sanity.json"
    sanity.write_text(json.dumps({"tables": {"5-cascade-curves": both}}))
    (tmp_path / "cascade").mkdir()
    (tmp_path / "cascade" / "cand_config.json").write_text(json.dumps(_table("cand_config")))
    table = rs.cascade_table(tmp_path, sanity)
    assert [r[:2] for r in table["rows"]] == [
        ["saliency", "shipped natural"], ["saliency", "shipped before"],
        ["saliency", "cand_config"], ["Grad-CAM", "shipped natural"],
        ["Grad-CAM", "shipped before"], ["Grad-CAM", "cand_config"],
    ]  # fmt: skip
    assert {r[2] for r in table["rows"]} == {"top-100 ∩"}
    assert table["rows"][2][4] == "0.011" and table["columns"] == both["columns"]


def test_the_cascade_step_needs_a_checkpoint_tag_and_path(capsys):
    with pytest.raises(SystemExit):
        rs.main(["cascade", "--checkpoint", "no_equals_sign"])
    assert "`--checkpoint` takes TAG=PATH" in capsys.readouterr().err
