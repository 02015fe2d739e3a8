"""Shared pieces of the reliability tests (tests/app): checkpoints in the layout `robust-train fit`
writes (built by hand in a fraction of a second), image folders, crafted modules, and the check of
a command's one error line."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from robust_train.models import SmallCNN, model_config

TINY_EVAL = ["--n-samples", "4", "--parts", "fragility", "--explainers", "saliency"]
TINY_EVAL += ["--attacks", "topk", "--no-ensemble", "--n-steps", "1", "--no-progress", "--no-wandb"]
TINY_CERTIFY = ["--n-images", "1", "--noise-samples", "8", "--attack-steps", "0"]
TINY_CERTIFY += ["--random-points", "0", "--no-progress"]
DIGITS_DATA = {"class_path": "robust_train.data.DigitsDataModule", "init_args": {}}
EVIL_MODULE = """
import pathlib
pathlib.Path({marker!r}).write_text("the module ran")
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.hidden = nn.Linear(64, 16)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x):
        return self.head(nn.functional.softplus(self.hidden(x.flatten(1))))
"""
EVIL_WEIGHTS = {"hidden.weight": (16, 64), "hidden.bias": (16,), "head.weight": (10, 16)}
EVIL_WEIGHTS |= {"head.bias": (10,)}


def save_fit_checkpoint(
    path: Path,
    *,
    model: torch.nn.Module | None = None,
    model_spec: dict[str, Any] | None = None,
    datamodule: dict[str, Any] | None = None,
    **extra: Any,
) -> Path:
    """A checkpoint in the layout of `robust-train fit` (weights under "model.", the rebuild
    metadata under "robust_train"), by default a seeded SmallCNN on the digits."""
    torch.manual_seed(0)
    net = model if model is not None else SmallCNN(in_channels=1, num_classes=10, input_size=8)
    content = {
        "state_dict": {f"model.{k}": v for k, v in net.state_dict().items()},
        "robust_train": {
            "model": model_spec or model_config(net),
            "num_classes": 10,
            "datamodule": DIGITS_DATA if datamodule is None else datamodule,
        },
        "epoch": 0,
        "global_step": 1,
        **extra,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(content, path)
    return path


def image_folder(root: Path, counts: dict[str, int], splits=("train", "test")) -> Path:
    """root/<split>/<class>/<i>.png, 8x8 grey, one grey level per image."""
    for split in splits:
        for c, (name, n) in enumerate(counts.items()):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                Image.new("L", (8, 8), (40 * c + 3 * i) % 256).save(folder / f"{i}.png")
    return root


def evil_module(folder: Path) -> tuple[str, Path]:
    """(module name, marker): folder/<name>.py, whose import writes the marker file."""
    name = f"evilmod_{uuid.uuid4().hex[:8]}"
    marker = folder / f"MARKER_{name}"
    (folder / f"{name}.py").write_text(EVIL_MODULE.format(marker=str(marker)))
    return name, marker


def error_line(result: Any, *fragments: str) -> str:
    """The one `robust-train: error:` line of a run that exited with 2 (no traceback, not an
    internal error), checked to hold every fragment."""
    stderr = result.stderr if hasattr(result, "stderr") else str(result)
    code = result.returncode if hasattr(result, "returncode") else 2
    assert code == 2, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("robust-train: error: ")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert "internal error" not in errors[0], errors[0]
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]
