"""The monitor comment of configs/finetune_torchvision.yaml states what the monitor does at the
config's image size (it said "k = 128 of 1024 pixels" at 224 x 224)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from robust_train.evaluation import MONITOR_DEFAULTS, EvaluationSettings

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "finetune_torchvision.yaml"


def test_finetune_torchvision_comment_matches_the_resolved_monitor_settings():
    text = CONFIG.read_text()
    config = yaml.safe_load(text)
    size = config["data"]["init_args"]["image_size"]
    (monitor,) = [
        c for c in config["trainer"]["callbacks"] if c["class_path"].endswith("RobustnessMonitor")
    ]
    options = {**MONITOR_DEFAULTS, **monitor["init_args"]}
    options = {k: v for k, v in options.items() if k in EvaluationSettings.__dataclass_fields__}
    settings = EvaluationSettings(**options).resolved(size, size)
    stated = re.search(r"k = (\d+) of (\d+) pixels.*eps (\d+)/255", text, re.S)
    assert stated, "the comment states k, the pixel count and eps"
    assert int(stated.group(1)) == settings.k
    assert int(stated.group(2)) == size * size
    assert abs(int(stated.group(3)) / 255 - settings.epsilon) < 1e-9
    assert f"{settings.n_samples} fixed validation images" in text
    assert f"of {settings.n_steps} steps" in text
