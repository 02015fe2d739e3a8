"""experiments/architectures.py's "penalty options" of a recipe variant: stored by the robust fit
when it runs and read back from there, so that a recipe file changed afterwards does not relabel
stored rows; fits stored before they kept it read "unknown" unless the caller names their recipe."""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path

import pytest
import yaml

RECIPE = "mnist5k_finetune_every_map.yaml"
CAM = "attack/grad_cam/topk/topk_intersection"


@pytest.fixture(scope="module")
def arch():
    return importlib.import_module("experiments.architectures")


def _fake_run(arch, monkeypatch, recipe: Path, out: Path, *options: str) -> None:
    """`run` on one VGGBN seed with the fit and the evaluation replaced by stand-ins."""

    def fit(name, used, seed, init, ckpt, limit):
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        ckpt.write_text("stand-in")
        return {"cpu_s": 1.0, "epoch_cpu_s": [1.0], "ckpt": str(ckpt), "radius": [
            p["init_args"].get("radius") for p in used.penalties]}  # fmt: skip

    monkeypatch.setattr(arch, "fit", fit)
    monkeypatch.setattr(arch, "evaluate", lambda *a, **k: {"accuracy": 0.9, CAM: 0.4})
    argv = ["run", "--recipe", str(recipe), "--archs", "vgg_bn", "--seeds", "0"]
    argv += ["--maps", "grad_cam", "--out", str(out)]
    argv += [f"--penalty-option={o}" for o in options]
    assert arch.main(argv) == 0


def _edit(path: Path, **init_args) -> None:
    cfg = yaml.safe_load(path.read_text())
    cfg["model"]["penalties"][0]["init_args"].update(init_args)
    path.write_text(yaml.safe_dump(cfg))


def _options_cell(arch, out: Path, recipe: str | None = None) -> str:
    rows = arch.variant_table([("variant", out)], recipe)["rows"]
    (row,) = [r for r in rows if r[1] == "variant"]
    return row[2]


def test_a_stored_fit_keeps_its_label_after_its_recipe_file_changes(arch, monkeypatch, tmp_path):
    first = tmp_path / "recipe.yaml"
    first.write_text(arch.recipe_file(RECIPE).read_text())
    text, out = first.read_text(), tmp_path / "run"
    _fake_run(arch, monkeypatch, first, out, "model_mode=eval")
    fit_file = out / "jobs" / "fit_vgg_bn_robust_s0.json"
    stored = json.loads(fit_file.read_text())
    assert stored["penalty_options"] == {"model_mode": "eval"}
    assert stored["recipe_file"]["text"] == text
    assert stored["recipe_file"]["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    radius = stored["radius"][0]
    assert _options_cell(arch, out) == "model_mode=eval"
    # the file changes afterwards (another radius; the option made part of the recipe itself)
    _edit(first, radius=radius + 0.1, model_mode="eval")
    assert _options_cell(arch, out) == "model_mode=eval"
    # a fit stored without its options: read against the recipe file it stored
    fit_file.write_text(json.dumps({k: v for k, v in stored.items() if k != "penalty_options"}))
    assert _options_cell(arch, out) == "model_mode=eval"
    # stored before it kept either: unknown, never compared with the file as it is now ...
    legacy = {k: v for k, v in stored.items() if k not in ("penalty_options", "recipe_file")}
    fit_file.write_text(json.dumps(legacy))
    assert _options_cell(arch, out) == "unknown"
    # ... unless the caller names the recipe it ran with; one that does not match: unknown
    original = tmp_path / "first_shipped.yaml"
    original.write_text(text)
    assert _options_cell(arch, out, str(original)) == "model_mode=eval"
    other = tmp_path / "other.yaml"
    other.write_text(text.replace("lr: 0.004", "lr: 0.001"))
    assert other.read_text() != text
    assert _options_cell(arch, out, str(other)) == "unknown"


def test_seeds_fitted_with_different_options_are_named_per_seed(arch, monkeypatch, tmp_path):
    recipe, out = tmp_path / "recipe.yaml", tmp_path / "run"
    recipe.write_text(arch.recipe_file(RECIPE).read_text())
    _fake_run(arch, monkeypatch, recipe, out, "model_mode=eval")
    jobs = out / "jobs"
    for name in ("fit_vgg_bn_robust_s0", "eval_vgg_bn_robust_s0_grad_cam"):
        job = json.loads((jobs / f"{name}.json").read_text())
        job["seed"], job["id"] = 1, job["id"].replace("_s0", "_s1")
        if job["kind"] == "fit":
            job["penalty_options"] = {}
        (jobs / f"{job['id']}.json").write_text(json.dumps(job))
    assert _options_cell(arch, out) == "seed 0: model_mode=eval; seed 1: -"


def test_variants_refuses_a_recipe_that_is_not_there(arch, tmp_path, capsys):
    (tmp_path / "run" / "jobs").mkdir(parents=True)
    argv = ["variants", "--table", "t", "--run", f"x={tmp_path / 'run'}"]
    assert arch.main([*argv, "--recipe", str(tmp_path / "gone.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gone.yaml" in err
