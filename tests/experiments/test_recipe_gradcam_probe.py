"""The Grad-CAM probe of the recipe search (experiments/recipe_gradcam_probe.py): the probes'
options are the shipped recipe's with the stated changes and build a penalty, the diagnosis at
the 14 x 14 layer is Grad-CAM at that layer, and collect's tables, figure and page results."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
import yaml

from experiments import recipe_gradcam as rg
from experiments import recipe_gradcam_probe as gp
from experiments import recipe_search as rs
from robust_train.core.resources import shipped_config
from robust_train.explain import grad_cam
from robust_train.models import MNISTConvNet
from robust_train.regularizers import MultiMapSmoothness


def test_every_probe_is_the_shipped_recipe_with_its_changes_and_builds_a_penalty():
    config = yaml.safe_load(shipped_config("mnist5k_finetune_every_map").read_text())
    (penalty,) = config["model"]["penalties"]
    for name, changes in gp.PROBES.items():
        options = gp.probe_options(name)
        for key, value in penalty["init_args"].items():
            assert options[key] == changes.get(key, value), (name, key)
        assert options["epochs"] == changes.get("epochs", config["trainer"]["max_epochs"])
        term = MultiMapSmoothness(**{k: v for k, v in options.items() if k not in gp.FIT_KEYS})
        assert term.options.explainers == ("grad_cam",) and term.weight >= 3
    with pytest.raises(ValueError, match="`probes`.*'nope'"):
        gp.probe_options("nope")


def test_the_diagnosis_at_the_14_layer_is_grad_cam_there():
    torch.manual_seed(0)
    net = MNISTConvNet(channels=(4, 8), hidden=16).eval()
    x, y = torch.rand(2, 1, 28, 28), torch.tensor([1, 5])
    cam = rg.signed_cam(net, x, y, gp.LAYER_14)
    assert cam.shape == (2, 14, 14)
    up = F.interpolate(cam[:, None], size=(28, 28), mode="bilinear", align_corners=False)
    torch.testing.assert_close(
        up, grad_cam(net, x, y, layer=gp.LAYER_14, relu=False), rtol=1e-4, atol=1e-6
    )
    same = rg.describe(net, x, x.clone(), y, layer=gp.LAYER_14)
    assert same["top_cells_kept"] == [1.0, 1.0] and same["relu_topk"] == [1.0, 1.0]
    assert same["cell_change"] == [0.0, 0.0]
    moved = rg.describe(net, x, (x + 0.3 * torch.randn_like(x)).clamp(0, 1), y, layer="features.4")
    assert min(moved["cell_change"]) > 0
    assert all(1 <= c <= 196 for c in same["cells_under_topk"])


def _files(runs, name, topk, acc):
    n = len(topk)
    (runs / f"{name}_fit.json").write_text(json.dumps({"name": name, "test_acc": acc}))
    full = {"name": name, "index": list(range(n)), "cpu_s": 2.0 * n, "topk": topk,
            "input": [0.6] * (n - 1) + [None], "random": [0.125] * n}  # fmt: skip
    (runs / f"{name}_full.json").write_text(json.dumps(full))
    cells = {"name": name, "layer": None, "cam_shape": [7, 7], "index": list(range(n)),
             **{k: [0.5] * n for k in gp.CELLS}, "cells_under_topk": [10.0, 12.0][:n],
             "random_topk": [0.12] * n}  # fmt: skip
    (runs / f"{name}_cells_default.json").write_text(json.dumps(cells))


def test_collect_writes_the_tables_into_the_page_results_and_draws(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    runs.mkdir()
    _files(runs, "gc_w30", [0.2, 0.4, float("nan")], 0.95)
    _files(runs, "shipped", [0.3, 0.1], 0.971)
    clean = {"name": "gc_w30", "other_topk": [0.3, 0.5, float("nan")], "blank": [0, 0, 1]}
    (runs / "gc_w30_clean.json").write_text(json.dumps(clean))
    (runs / "natural_fit.json").write_text(json.dumps({"name": "natural", "test_acc": 0.971}))
    (runs / "natural_clean.json").write_text(json.dumps({**clean, "name": "natural"}))
    page = tmp_path / "recipe_search.json"
    page.write_text(json.dumps({"tables": {"full": {"rows": []}}}))
    monkeypatch.setattr(rs, "RESULTS", page)
    data = gp.collect(runs, tmp_path / "probe.json", tmp_path / "probe.png")
    rows = data["tables"]["probe"]["rows"]
    assert [r[0] for r in rows] == ["natural", "shipped", "gc_w30"]  # the fixed models first
    assert rows[0][3:] == ["-"] * 5 + ["0.400 (1 blank)", "-"]  # clean maps only
    rows = rows[1:]
    assert rows[1][2:4] == ["0.950", "2"] and rows[1][4].startswith("0.300 [")
    assert rows[1][6].startswith("0.600") and rows[1][7] == "0.000 (0/2)"
    assert rows[1][5].startswith("0.125") and rows[1][8:] == ["0.400 (1 blank)", "2.0"]
    assert rows[0][8] == "-"  # no clean job
    cells = data["tables"]["probe_cells"]["rows"]
    assert cells[0][:4] == ["shipped", "default (features.5)", "7 x 7", "0.500"]
    assert cells[0][4] == "11.0 of 49" and cells[0][-2:] == ["0.120", "0.600"]
    stored = json.loads(page.read_text())["tables"]
    assert set(stored) == {"full", "probe", "probe_cells"}
    assert (tmp_path / "probe.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(FileNotFoundError, match="`--runs`"):
        gp.collect(tmp_path / "empty", tmp_path / "x.json")


@pytest.mark.parametrize("flag", ["--probes", "--cells"])
def test_an_unknown_model_is_refused_before_any_work(flag, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        gp.main(["run", "--runs", str(tmp_path / "r"), flag, "nope"])
    assert exit_.value.code == 2 and f"`{flag}`" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
