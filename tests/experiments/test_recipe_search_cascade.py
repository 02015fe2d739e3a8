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


def test_the_cascade_table_puts_each_candidate_beside_the_shipped_models(tmp_path):
    from experiments.sanity_checks import PREVIOUS

    both = _table("natural")
    both["rows"] += _table("robust")["rows"]
    sanity = tmp_path / "sanity.json"
    tables = {"5-cascade-curves": both, "5-cascade-previous": _table(PREVIOUS)}
    sanity.write_text(json.dumps({"tables": tables}))
    (tmp_path / "cascade").mkdir()
    (tmp_path / "cascade" / "cand_config.json").write_text(json.dumps(_table("cand_config")))
    fit = rs.SHIPPED_NOW_FILE
    (tmp_path / "cascade" / f"{fit}.json").write_text(json.dumps(_table(fit)))
    table = rs.cascade_table(tmp_path, sanity)
    fit_label = f"shipped now's config fit ({fit})"
    per_map = ["shipped natural", "shipped before", "shipped now", fit_label, "cand_config"]
    assert [r[:2] for r in table["rows"]] == [
        [e, name] for e in ("saliency", "Grad-CAM") for name in per_map
    ]
    assert {r[2] for r in table["rows"]} == {"top-100 ∩"}
    # each row keeps its own model's numbers (the last digit is its name's length)
    lengths = [len("natural"), len(PREVIOUS), len("robust"), len(fit), len("cand_config")]
    assert [r[4] for r in table["rows"][:5]] == [f"0.0{n}" for n in lengths]
    assert table["columns"] == both["columns"]


def test_the_cascade_table_without_the_previous_models_curves(tmp_path):
    both = _table("natural")
    both["rows"] += _table("robust")["rows"]
    sanity = tmp_path / "sanity.json"
    sanity.write_text(json.dumps({"tables": {"5-cascade-curves": both}}))
    (tmp_path / "cascade").mkdir()
    table = rs.cascade_table(tmp_path, sanity)
    assert [r[1] for r in table["rows"]] == ["shipped natural", "shipped now"] * 2


def test_the_cascade_step_needs_a_checkpoint_tag_and_path(capsys):
    with pytest.raises(SystemExit):
        rs.main(["cascade", "--checkpoint", "no_equals_sign"])
    assert "`--checkpoint` takes TAG=PATH" in capsys.readouterr().err
