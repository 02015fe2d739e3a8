"""The monitor comments of the image-folder configs (configs/finetune_torchvision.yaml,
configs/imagefolder_resnet18_every_map.yaml) state what the monitor does at the config's image
size (one said "k = 128 of 1024 pixels" at 224 x 224)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from robust_train.evaluation import MONITOR_DEFAULTS, EvaluationSettings

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("name", ["finetune_torchvision", "imagefolder_resnet18_every_map"])
def test_monitor_comment_matches_the_resolved_monitor_settings(name: str):
    text = (CONFIGS / f"{name}.yaml").read_text()
    config = yaml.safe_load(text)
    size = config["data"]["init_args"]["image_size"]
    (monitor,) = [
        c for c in config["trainer"]["callbacks"] if c["class_path"].endswith("RobustnessMonitor")
    ]
    options = {**MONITOR_DEFAULTS, **monitor["init_args"]}
    options = {k: v for k, v in options.items() if k in EvaluationSettings().as_dict()}
    settings = EvaluationSettings(**options).resolved(size, size)
    stated = re.search(r"k = (\d+) of (\d+) pixels.*eps (\d+)/255", text, re.S)
    assert stated, "the comment states k, the pixel count and eps"
    assert int(stated.group(1)) == settings.k
    assert int(stated.group(2)) == size * size
    assert abs(int(stated.group(3)) / 255 - settings.epsilon) < 1e-9
    assert f"{settings.n_samples} fixed validation images" in text
    assert f"of {settings.n_steps} steps" in text
