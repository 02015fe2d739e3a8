"""The cluttered benchmark's architecture configs (experiments/cluttered_configs) build through
the real LightningCLI, as `robust-train fit --config` reads them, into the networks the page
names, and those networks classify 64 x 64 RGB images."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from robust_train.app.lightning_cli import lightning_main
from robust_train.data.mnist5k import MNIST5K_SPLIT
from robust_train.models import VGGBN
from robust_train.regularizers import MultiMapSmoothness

CONFIGS = sorted((Path(__file__).parents[2] / "experiments" / "cluttered_configs").glob("*.yaml"))


def test_the_architecture_configs_are_there():
    assert {p.stem for p in CONFIGS} == {
        "resnet18_natural",
        "resnet18_every_map",
        "resnet18_mixed_anchor",
        "resnet18_self15_mixed_anchor",
        "vgg_bn_natural",
        "vgg_bn_every_map",
    }


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_config_builds_its_network_and_penalty(config: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the CLI's run folders, if any, stay in the test's folder
    cli = lightning_main(["--config", str(config), "--trainer.logger=false"], run=False)
    net = cli.model.model
    if config.stem.startswith("vgg_bn"):
        assert isinstance(net, VGGBN)
        assert isinstance(net.hidden[0], torch.nn.MaxPool2d)  # the max head over the last map
    penalties = list(cli.model.penalties)
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
        assert {p.options.model_mode for p in penalties} == {"eval"}
        # the self15 config: the self-anchored term at half the anchored term's weight
        ratio = 0.5 if "self15" in config.stem else 1.0
        assert penalties[0].weight == pytest.approx(penalties[1].weight * ratio)
    else:
        assert penalties == []
    with torch.no_grad():
        assert net.eval()(torch.rand(2, 3, 64, 64)).shape == (2, 10)
    # the per-step cosine reaches 0 at the fit's last step: T_max = epochs x training batches
    config = cli.config
    batches = math.ceil(MNIST5K_SPLIT["train"] / config.data.init_args.batch_size)
    t_max = config.model.lr_scheduler.init_args.T_max
    assert t_max == config.trainer.max_epochs * batches, (config.trainer.max_epochs, t_max)
