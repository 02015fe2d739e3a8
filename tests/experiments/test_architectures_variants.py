"""experiments/architectures.py's recipe variants: `--penalty-option` read, applied to every
penalty and checked before any work, a natural teacher filled in per job, and the variants'
table read from job results."""

from __future__ import annotations

import importlib
import json
import statistics
from pathlib import Path

import pytest

RECIPE = "mnist5k_finetune_every_map.yaml"


@pytest.fixture(scope="module")
def arch():
    return importlib.import_module("experiments.architectures")


def test_options_are_read_as_yaml_and_bad_pairs_are_named(arch):
    opts = arch.parse_options(["model_mode=eval", "map_weights=[0.5, 1, 6]", "teacher=natural"])
    assert opts == {"model_mode": "eval", "map_weights": [0.5, 1, 6], "teacher": "natural"}
    assert arch.parse_options(None) == {}
    for bad in ("model_mode", "=eval", "two words=1"):
        with pytest.raises(ValueError, match=repr(bad).replace("[", r"\[")):
            arch.parse_options([bad])


def test_options_reach_every_penalty_and_the_teacher_is_the_jobs_natural_model(arch, tmp_path):
    import torch

    from robust_train.models import VGGBN

    recipe = arch.read_recipe(RECIPE)
    assert arch.with_options(recipe, {}) is recipe
    variant = arch.with_options(recipe, {"model_mode": "frozen", "teacher": "natural"})
    shipped = recipe.penalties[0]["init_args"]
    assert variant.penalties[0]["init_args"] == {
        **shipped,
        "model_mode": "frozen",
        "teacher": "natural",
    }
    assert "model_mode" not in shipped  # the recipe itself is left as it was
    model = VGGBN(stages=((4,), (8,)), hidden=8)
    natural = tmp_path / "natural.pt"
    torch.save(model.state_dict(), natural)
    (term,), _ = arch.build_penalties(variant, model, 1, teacher=str(natural))
    assert term.options.teacher == str(natural) and term.options.model_mode == "frozen"
    (plain,), _ = arch.build_penalties(recipe, model, 1, teacher=str(natural))
    assert plain.options.teacher is None and plain.options.model_mode == "unchanged"
    # the options a stored robust fit had beyond its recipe file's
    stored = arch.recipe_record(arch.recipe_file(RECIPE))
    job = {"settings": {"robust": variant.record()}, "recipe_file": stored}
    assert arch.penalty_options(job) == {"model_mode": "frozen", "teacher": "natural"}


def test_a_bad_option_stops_the_run_before_any_work(arch, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["run", "--recipe", RECIPE, "--archs", "vgg_bn", "--out", str(out)]
    assert arch.main([*argv, "--penalty-option", "model_mode=bogus"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model_mode=bogus" in err and "'bogus'" in err
    assert arch.main([*argv, "--penalty-option", "wibble=3"]) == 2
    assert "wibble" in capsys.readouterr().err
    assert not out.exists()


def _job(out: Path, kind: str, model: str, seed: int, explainer: str | None = None, **values):
    job = {"kind": kind, "arch": "vgg_bn", "model": model, "seed": seed, "explainer": explainer}
    tail = f"_{explainer}" if explainer else ""
    job["id"] = f"{kind}_vgg_bn_{model}_s{seed}{tail}"
    (out / "jobs").mkdir(parents=True, exist_ok=True)
    (out / "jobs" / f"{job['id']}.json").write_text(json.dumps({**job, **values}))


def test_the_variants_table_reads_each_seed_once_and_names_the_options(arch, tmp_path):
    recipe = arch.read_recipe(RECIPE)
    variant = arch.with_options(recipe, {"model_mode": "eval"})
    stored = arch.recipe_record(arch.recipe_file(RECIPE))
    cam = "attack/grad_cam/topk/topk_intersection"
    ref = arch.VARIANT_KEYS["map = input ∩ attack"][1]
    runs = []
    for name, rec, scores in (("shipped", recipe, (0.1, 0.3)), ("bn eval", variant, (0.5, 0.6))):
        out = tmp_path / name
        for seed, score in enumerate(scores):
            _job(out, "fit", "robust", seed, settings={"robust": rec.record()}, recipe_file=stored)
            _job(out, "eval", "natural", seed, "grad_cam", accuracy=0.97, **{cam: 0.02})
            _job(out, "eval", "natural", seed, "saliency", accuracy=0.97, **{ref: 0.8 + seed / 10})
            _job(out, "eval", "robust", seed, "grad_cam", accuracy=0.95, **{cam: score})
        runs.append((name, out))
    _job(runs[1][1], "eval", "robust", 0, "saliency", **{ref: float("nan")})  # not measured
    for name in ("grad_cam", "saliency"):  # natural evaluated on fewer seeds in the first run
        (runs[0][1] / "jobs" / f"eval_vgg_bn_natural_s1_{name}.json").unlink()
    table = arch.variant_table(runs)
    assert table["columns"] == list(arch.VARIANT_COLUMNS)
    rows = {r[1]: dict(zip(table["columns"], r, strict=True)) for r in table["rows"]}
    assert [r[1] for r in table["rows"]] == ["natural", "shipped", "bn eval"]  # natural once
    assert rows["shipped"]["penalty options"] == "-"
    assert rows["bn eval"]["penalty options"] == "model_mode=eval"
    want = f"{statistics.mean([0.5, 0.6]):.3f} ± {statistics.stdev([0.5, 0.6]):.3f}"
    assert rows["bn eval"]["Grad-CAM ∩ attack"] == want
    assert rows["natural"]["map = input ∩ attack"] == "0.850 ± 0.071"
    assert rows["bn eval"]["map = input ∩ attack"] == "not run"
    assert rows["natural"]["test acc"] == "0.970 ± 0.000" and rows["natural"]["seeds"] == "0 1"
    # the study's own table has "map = input" under the same attack beside each model's row
    lines = arch.attack_table(arch.load_jobs(runs[1][1]), ["vgg_bn"], 2)
    assert lines[0].endswith("| map = input ∩ attack |")
    assert lines[2].startswith("| vgg_bn | natural |") and lines[2].endswith("| 0.850 ± 0.071 |")
    assert lines[3].endswith("| not run |")  # map = input not measured on the robust model


def test_the_modes_measures_top_share_and_l1_limits_and_batchnorm_modes(arch):
    import torch

    uniform, peak = torch.ones(2, 28, 28), torch.zeros(2, 28, 28)
    peak[:, 3, 4] = 5.0
    assert torch.allclose(arch._top_share(uniform), torch.full((2,), 100 / 784))
    assert torch.allclose(arch._top_share(peak), torch.ones(2))
    assert torch.allclose(arch._l1(uniform, 3 * uniform), torch.zeros(2))  # scale-free
    assert torch.allclose(arch._l1(peak, peak.roll(1, dims=1)), torch.full((2,), 2.0))
    torch.manual_seed(0)
    conv = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU())
    head = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4 * 28 * 28, 10))
    plain = torch.nn.Sequential(*conv, *head).eval()
    x, y = torch.rand(12, 1, 28, 28), torch.arange(12) % 10
    d = arch.mode_measures(plain, x, y, None, batch=6)
    assert d.keys() == {f"{m}/{k}" for m in ("train", "eval")
                        for k in ("top100/grad_cam", "l1/grad_cam", "l1/saliency")}  # fmt: skip
    assert all(d[f"train/{k}"] == pytest.approx(d[f"eval/{k}"]) for k in ("l1/saliency",))
    bn = torch.nn.BatchNorm2d(4)
    with_bn = torch.nn.Sequential(conv[0], bn, torch.nn.ReLU(), *head).eval()
    before = bn.running_mean.clone()
    d = arch.mode_measures(with_bn, x, y, None, batch=6)
    assert d["train/l1/saliency"] != pytest.approx(d["eval/l1/saliency"], rel=1e-3)
    assert torch.equal(bn.running_mean, before) and not with_bn.training
