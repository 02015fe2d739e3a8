"""The cluttered benchmark's architecture configs (experiments/cluttered_configs) build through
the real LightningCLI, as `robust-train fit --config` reads them, into the networks the page
names, and those networks classify 64 x 64 RGB images."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from robust_train.app.lightning_cli import lightning_main
from robust_train.data.mnist5k import MNIST5K_SPLIT
from robust_train.models import VGGBN, MNISTConvNet
from robust_train.regularizers import MultiMapSmoothness, TeacherDistillation

CONFIGS = sorted((Path(__file__).parents[2] / "experiments" / "cluttered_configs").glob("*.yaml"))


def test_the_architecture_configs_are_there():
    assert {p.stem for p in CONFIGS} == {
        "resnet18_natural",
        "resnet18_every_map",
        "resnet18_mixed_anchor",
        "resnet18_self15_mixed_anchor",
        "resnet18_self15_kd_mixed_anchor",
        "cnn_mixed_anchor",
        "cnn_soft_anchor",
        "vgg_bn_natural",
        "vgg_bn_every_map",
        "vgg_bn_kd_anchor",
    }


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_config_builds_its_network_and_penalty(config: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the CLI's run folders, if any, stay in the test's folder
    args = ["--config", str(config), "--trainer.logger=false"]
    teacher = tmp_path / "natural.ckpt"  # loaded at the first penalty call, not at build
    if config.stem.endswith(("mixed_anchor", "kd_anchor")):  # the flag the config's comment gives
        teacher.write_bytes(b"")
        args += ["--model.penalties.init_args.teacher", str(teacher)]
    cli = lightning_main(args, run=False)
    net = cli.model.model
    if config.stem.startswith("vgg_bn"):
        assert isinstance(net, VGGBN)
        assert isinstance(net.hidden[0], torch.nn.MaxPool2d)  # the max head over the last map
    penalties = list(cli.model.penalties)
    if "_kd_" in config.stem:  # the distilled anchor: the starting model's predictions held first
        distill, *penalties = penalties
        assert isinstance(distill, TeacherDistillation) and distill.options.teacher is None
        assert distill.weight > 0 and distill.options.temperature > 1
    if config.stem.endswith("every_map"):
        assert len(penalties) == 1 and isinstance(penalties[0], MultiMapSmoothness)
    elif config.stem.endswith("mixed_anchor"):
        # pixel maps held to the model's own maps, Grad-CAM (last: the CLI's teacher flag reaches
        # it) to the teacher's; both in eval mode
        assert [type(p) for p in penalties] == [MultiMapSmoothness] * 2
        assert [tuple(p.options.explainers) for p in penalties] == [
            ("saliency", "input_x_gradient"),
            ("grad_cam",),
        ]
        # BatchNorm's mode matters on the ResNet only (the small CNN has none)
        mode = "unchanged" if config.stem.startswith("cnn") else "eval"
        assert {p.options.model_mode for p in penalties} == {mode}
        assert [p.options.teacher for p in penalties] == [None, str(teacher)]
        # the self15 config: the self-anchored term at half the anchored term's weight
        ratio = 0.5 if "self15" in config.stem else 1.0
        assert penalties[0].weight == pytest.approx(penalties[1].weight * ratio)
    elif config.stem == "vgg_bn_kd_anchor":
        # the VGG-BN's every-map penalty, every map held to the teacher's (the flag reaches it)
        (every,) = lightning_main(
            ["--config", str(config.with_name("vgg_bn_every_map.yaml")), "--trainer.logger=false"],
            run=False,
        ).model.penalties
        (anchored,) = penalties
        assert anchored.options.teacher == str(teacher) and every.options.teacher is None
        assert anchored.weight == every.weight
        assert anchored.options == dataclasses.replace(every.options, teacher=str(teacher))
    elif config.stem.endswith("soft_anchor"):
        # the shipped penalty, then Grad-CAM alone at a third of its weight (the teacher's term)
        assert [type(p) for p in penalties] == [MultiMapSmoothness] * 2
        _same_maps_as_the_shipped_fine_tune(penalties[:1])
        anchored = penalties[1]
        assert tuple(anchored.options.explainers) == ("grad_cam",)
        assert anchored.weight == penalties[0].weight / 3 and anchored.options.teacher is None
    else:
        assert penalties == []
    if config.stem.startswith("cnn"):
        assert isinstance(net, MNISTConvNet)
    if config.stem == "cnn_mixed_anchor":
        _same_maps_as_the_shipped_fine_tune(penalties)
    with torch.no_grad():
        assert net.eval()(torch.rand(2, 3, 64, 64)).shape == (2, 10)
    # the per-step cosine reaches 0 at the fit's last step: T_max = epochs x training batches
    config = cli.config
    batches = math.ceil(MNIST5K_SPLIT["train"] / config.data.init_args.batch_size)
    t_max = config.model.lr_scheduler.init_args.T_max
    assert t_max == config.trainer.max_epochs * batches, (config.trainer.max_epochs, t_max)


def _same_maps_as_the_shipped_fine_tune(penalties: list) -> None:
    """The small CNN's split penalty weighs each map, and sets the radius, weight, distance and
    share of the batch, as the shipped one-term fine-tune does."""
    shipped = Path(__file__).parents[2] / "configs" / "cluttered_mnist5k_finetune_every_map.yaml"
    (one,) = lightning_main(
        ["--config", str(shipped), "--trainer.logger=false"], run=False
    ).model.penalties
    split = {
        name: (p.weight * w, p.options.radius, p.options.distance, p.batch_fraction)
        for p in penalties
        for name, w in zip(p.options.explainers, p.options.weights, strict=True)
    }
    assert split == {
        name: (one.weight * w, one.options.radius, one.options.distance, one.batch_fraction)
        for name, w in zip(one.options.explainers, one.options.weights, strict=True)
    }
