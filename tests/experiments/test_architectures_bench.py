"""experiments/architectures.py: the recipe read from a config, layer options adapted to the
architecture, the page's cells, and a quick run end to end (resumed without refitting)."""

from __future__ import annotations

import importlib
import json

import pytest


@pytest.fixture(scope="module")
def arch():
    return importlib.import_module("experiments.architectures")


def test_recipe_of_a_shipped_fine_tune_and_of_the_baseline(arch):
    robust = arch.read_recipe("mnist5k_finetune_ixg_softplus.yaml")
    assert robust.finetune and robust.epochs == 2 and robust.lr == 0.002 and robust.cosine
    assert robust.softplus_beta == 2.0 and robust.batch_size == 64
    assert robust.penalties[0]["init_args"]["explainer"] == "input_x_gradient"
    natural = arch.read_recipe(arch.NATURAL_CONFIG, epochs=3)
    assert not natural.finetune and natural.epochs == 3 and not natural.penalties
    with pytest.raises(SystemExit, match="no_such.yaml"):
        arch.read_recipe("no_such.yaml")


def test_layer_options_the_architecture_lacks_are_dropped(arch):
    spec = {"weight": 2.0, "layer": "features.4", "terms": [{"layer": "layer4"}, {"k": 3}]}
    dropped: list[str] = []
    out = arch.adapt_layers(spec, {"layer4", "fc"}, dropped)
    assert out == {"weight": 2.0, "terms": [{"layer": "layer4"}, {"k": 3}]}
    assert dropped == ["features.4"]
    dropped = []
    out = arch.adapt_layers(spec, {"layer2", "layer4", "fc"}, dropped, "layer2")
    assert out == {"weight": 2.0, "layer": "layer2", "terms": [{"layer": "layer4"}, {"k": 3}]}
    assert dropped == ["features.4"]
    multi = {"terms": [{"explainers": ["saliency", "grad_cam"]}, {"explainers": ["saliency"]}]}
    out = arch.adapt_layers(multi, {"layer2"}, [], "layer2")
    assert out["terms"] == [{"layer": "layer2", "explainers": ["saliency", "grad_cam"]},
                            {"explainers": ["saliency"]}]  # fmt: skip
    assert arch.adapt_layers(multi, {"layer2"}, []) == multi


def test_resnet_grad_cam_layer_is_seven_by_seven(arch):
    """The small-input ResNet's default Grad-CAM layer is 2 x 2 on MNIST; the benchmark's layer
    for it exists and has the other architectures' 7 x 7 side."""
    model = arch.build_arch("resnet18")
    assert arch.layer_info(model)["grad_cam_side"] == [2, 2]
    info = arch.layer_info(model, arch.GRAD_CAM_LAYERS["resnet18"])
    assert info == {"grad_cam_layer": "backbone.layer2", "grad_cam_side": [7, 7]}
    assert arch.layer_info(arch.build_arch("mnist_cnn"))["grad_cam_side"] == [7, 7]


def test_penalties_are_built_with_the_jobs_seed(arch):
    from robust_train.models import VGGBN

    recipe = arch.read_recipe("mnist5k_finetune_ixg_softplus.yaml")
    terms, dropped = arch.build_penalties(recipe, VGGBN(), seed=2)
    assert len(terms) == 1 and dropped == [] and terms[0].weight == 20.0
    assert terms[0].generator.initial_seed() == 2


def test_cells_say_what_was_not_measured(arch):
    assert arch.cell([], 3) == "not run"
    assert arch.cell([0.5], 3) == "0.500 (1 of 3)"
    assert arch.cell([0.4, 0.6], 2) == "0.500 ± 0.141"


@pytest.mark.heavy  # the study's quick run
def test_a_quick_run_writes_every_cell_and_resumes_without_refitting(arch, tmp_path, capsys):
    out, md = tmp_path / "run", tmp_path / "ARCH.md"
    argv = [
        "run", "--quick", "--recipe", "mnist5k_finetune_ixg_softplus.yaml", "--out", str(out),
        "--archs", "vgg_bn", "--seeds", "0", "--maps", "saliency", "grad_cam",
    ]  # fmt: skip
    assert arch.main([*argv, "--models", "natural"]) == 0  # natural jobs need no recipe run
    jobs = sorted(p.name for p in (out / "jobs").glob("*.json"))
    assert len(jobs) == 3 and not any("robust" in j for j in jobs)  # 1 fit + 2 maps
    assert arch.main(argv) == 0
    assert "3 jobs run" in capsys.readouterr().out.splitlines()[-1]  # the robust ones only
    jobs = sorted(p.name for p in (out / "jobs").glob("*.json"))
    assert len(jobs) == 6  # 2 fits + 2 models x 2 maps
    assert arch.main(argv) == 0
    assert "0 jobs run" in capsys.readouterr().out.splitlines()[-1]
    md.write_text("old table\n" + arch.MARKER + "\nnotes by hand\n")
    assert arch.main(["report", "--out", str(out), "--md", str(md), "--command", "cmd"]) == 0
    text = md.read_text()
    assert "old table" not in text and text.endswith("notes by hand\n")
    assert "| vgg_bn | robust |" in text and "Grad-CAM ∩ attack" in text
    fit = json.loads((out / "jobs" / "fit_vgg_bn_robust_s0.json").read_text())
    assert fit["cpu_s"] > 0 and fit["terms"][0].startswith("ExplanationSmoothness")
