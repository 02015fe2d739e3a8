"""sanity_checks' stored jobs: a stopped run resumes where it stopped (each seed's curves and each
section's job kept as JSON, named by the checkpoint's hash), and the stored results make
SANITY.md's tables 1-3."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from experiments import sanity_checks as sc


def test_a_stored_job_is_computed_once_and_read_back(tmp_path):
    calls = []
    path = tmp_path / "deep" / "job.json"
    first = sc.stored_job(path, lambda: calls.append(1) or {"a": 0.25, "b": [1.0, 2.0]})
    again = sc.stored_job(path, lambda: calls.append(1) or {"a": 0.0})
    assert calls == [1] and first == again == {"a": 0.25, "b": [1.0, 2.0]}
    assert not list(tmp_path.glob("deep/*.part"))


def test_the_job_name_follows_the_checkpoint_file_not_its_name(tmp_path):
    a, b = tmp_path / "a.ckpt", tmp_path / "b.ckpt"
    a.write_bytes(b"weights one")
    b.write_bytes(b"weights two")
    tag = hashlib.sha256(b"weights one").hexdigest()[:12]
    assert sc.job_name("robust", 32, str(a)) == f"robust_{tag}_32i"
    assert sc.job_name("robust", 32, str(a)) != sc.job_name("robust", 32, str(b))


def test_seeded_sanity_resumes_at_the_seed_it_had_not_stored(tmp_path, monkeypatch):
    import robust_train.evaluation as evaluation

    seen = []

    def fake(model, x, y, settings, progress):
        seen.append(settings.seed)
        return {"measures": {"m": float(settings.seed)}, "curves": {"c": [settings.seed]}}

    monkeypatch.setattr(evaluation, "evaluate_classifier", fake)
    store = tmp_path / "curves" / "robust_abc_32i"
    store.parent.mkdir()
    # a run stopped after seed 0: its file is there, with a value the fake would not give
    (tmp_path / "curves" / "robust_abc_32i_s0.json").write_text(
        json.dumps({"measures": {"m": -1.0}, "curves": {"c": [-1]}})
    )
    x = torch.zeros(2, 1, 4, 4)
    runs = sc.seeded_sanity(None, x, x, store=store)
    assert seen == [1, 2]
    assert [r["measures"]["m"] for r in runs] == [-1.0, 1.0, 2.0]
    assert sc.seeded_sanity(None, x, x, store=store) == runs and seen == [1, 2]
    assert sc.seeded_sanity(None, x, x) and seen == [1, 2, 0, 1, 2]


def _results(model: int, lens: bool = True) -> dict:
    """Stored section jobs of one model, every value distinct and derived from `model`."""
    sanity = {f"sanity/{e}/{m}": model + i / 100 + j / 1000
              for i, e in enumerate(sc.SECTION_EXPLAINERS)
              for j, m in enumerate(sc.SECTION_MEASURES)}  # fmt: skip
    reference = {key: model + i / 10 for i, (_, job, key) in enumerate(sc.REFERENCE_ROWS)
                 if job == "reference"}  # fmt: skip
    reference |= {
        "n": 60.0 + model,
        "attack (attack k 200) lens": 0.9,
        "attack (attack k 100) lens": 0.8,
    }
    out = {
        "sanity": sanity,
        "reference": reference,
        "rar": {"rar topk": 0.7 + model, "random walk": 0.6 + model},
        "chance": {name: [0.12 + model, 0.3 + model] for name in sc.CHANCE_MAPS},
    }
    if lens:
        out["lens"] = {"saliency topk": 0.5 + model, "saliency lens": 0.75 + model,
                       "IG topk": 0.4, "IG lens": 0.45}  # fmt: skip
    return out


def test_the_section_tables_put_each_stored_value_in_its_row_and_column():
    tables = sc.section_tables({"natural": _results(0), "robust": _results(1)})
    first = tables["1-does-the-map-depend-on-what"]
    assert [r[:2] for r in first["rows"][:3]] == [
        ["saliency", "natural"], ["saliency", "robust"], ["input x gradient", "natural"],
    ]  # fmt: skip
    assert first["rows"][3][2:] == ["1.010", "1.011", "1.012", "1.013"]
    second = tables["2-the-reference-map-input-under"]
    assert second["columns"] == [
        "measure (correctly classified images: natural 60 / robust 61)", "natural", "robust",
    ]  # fmt: skip
    assert [r[0] for r in second["rows"][:-1]] == [label for label, _, _ in sc.REFERENCE_ROWS]
    assert second["rows"][4][1:] == ["0.700", "1.700"]
    assert second["rows"][-1] == [f"{sc.CHANCE_LABEL}map = input (top-100 ∩)", "0.120", "1.120"]
    third = tables["3-lens-how-much-of-the-fragility"]["rows"]
    assert third[1] == ["saliency", "robust", "1.500", "1.750", "+0.250"]
    assert third[4] == ["map = input, attack k 200", "natural", "0.300", "0.900", "+0.600"]
    assert sum(r[0].startswith(sc.CHANCE_LABEL) for r in third) == 5


def test_without_every_lens_job_the_lens_table_is_left_as_it_was():
    tables = sc.section_tables({"natural": _results(0), "robust": _results(1, lens=False)})
    assert "3-lens-how-much-of-the-fragility" not in tables
    assert len(tables["1-does-the-map-depend-on-what"]["rows"]) == 8


def test_previous_is_refused_without_its_run_folder_or_file(tmp_path, capsys):
    ckpt = tmp_path / "before.ckpt"
    ckpt.write_bytes(b"x")
    with pytest.raises(SystemExit) as alone:
        sc.main(["--previous", str(ckpt)])
    assert alone.value.code == 2 and "needs --randomisation OUT" in capsys.readouterr().err
    with pytest.raises(SystemExit) as missing:
        sc.main(["--randomisation", str(tmp_path), "--previous", str(tmp_path / "no.ckpt")])
    err = capsys.readouterr().err
    assert missing.value.code == 2 and "no.ckpt" in err and "no such checkpoint" in err


def _curve(model: str, cells: list[str]) -> list[list[str]]:
    zeros = ["0.000 ± 0.000"] * len(cells)
    return [["saliency", model, "top-100 ∩", "1.000 ± 0.000", *cells],
            ["saliency", model, "SSIM", "1.000 ± 0.000", *zeros]]  # fmt: skip


def test_the_flatness_verdict_reads_the_seeds_spread_per_layer():
    natural = _curve("natural", ["0.400 ± 0.010", "0.300 ± 0.050", "0.200 ± 0.010", "n/a"])
    robust = _curve("robust", ["0.560 ± 0.040", "0.340 ± 0.010", "0.150 ± 0.020", "0.1"])
    tables = {"5-cascade-curves": {"rows": natural + robust}}
    rows = sc.flatness_table(tables)["rows"]
    assert [r[1] for r in rows] == ["1", "2", "3", "4"]
    assert [r[-1] for r in rows] == [
        "flatter than natural", "as natural (spreads overlap)", "steeper than natural", "n/a",
    ]  # fmt: skip
    assert rows[0][2:7] == ["0.400 ± 0.010", "-", "0.560 ± 0.040", "+0.160", "-0.440"]
    assert rows[2][5:7] == ["-0.050", "-0.190"]
    tables["5-cascade-previous"] = {"rows": _curve(sc.PREVIOUS, ["0.5", "0.4", "0.3", "0.2"])}
    assert [r[3] for r in sc.flatness_table(tables)["rows"]] == ["0.5", "0.4", "0.3", "0.2"]


def test_the_stored_flatness_table_is_computed_from_the_stored_curves():
    from experiments.pages import RESULTS

    tables = json.loads((RESULTS / "sanity.json").read_text())["tables"]
    assert tables[sc.FLATNESS] == sc.flatness_table(tables)
    assert {r[1] for r in tables["5-cascade-previous"]["rows"]} == {sc.PREVIOUS}
    assert {r[1] for r in tables["5-cascade-curves"]["rows"]} == {"natural", "robust"}
