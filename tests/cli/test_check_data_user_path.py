"""check-data as a new user meets it: a model whose class count differs from the folder's is
refused before the fit (one line naming the key and the flag), and a class of 12-bit scans in
16-bit files gets a note on its small range (in-process, tiny images)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

CONFIG = """\
experiment: scans
trainer: {max_epochs: 1, accelerator: cpu, devices: 1, logger: false}
model:
  model:
    class_path: robust_train.models.SmallCNN
    init_args: {in_channels: 3, num_classes: NUM, input_size: 8}
data:
  class_path: robust_train.data.ImageFolderDataModule
  init_args: {root: images, image_size: 8, batch_size: 4, val_fraction: 0.25}
"""


def _folder(root: Path) -> None:
    rng = np.random.default_rng(0)
    for i in range(3):
        for name, pixels in (
            ("scan", rng.integers(0, 4096, (6, 5), dtype=np.uint16)),  # 12 bits in 16
            ("photo", rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)),
            ("film", rng.integers(0, 65536, (6, 5), dtype=np.uint16)),  # the whole 16 bits
        ):
            (root / "train" / name).mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels).save(root / "train" / name / f"{i}.png")


def _run(cli, tmp_path: Path, num_classes: int):
    (tmp_path / "cfg.yaml").write_text(CONFIG.replace("NUM", str(num_classes)))
    return cli("check-data", "--config", "cfg.yaml", cwd=tmp_path)


def test_a_class_count_that_differs_is_one_line_exit_2(tmp_path, cli):
    _folder(tmp_path / "images")
    done = _run(cli, tmp_path, 2)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()[-1:]
    assert line == (
        "robust-train: error: `model.model.init_args.num_classes` is 2 but the data has 3 "
        "classes ['film', 'photo', 'scan']: set --model.model.init_args.num_classes 3 (or edit "
        "the config) before the fit"
    )
    assert "split  class" in done.stdout  # the table came first


def test_only_the_class_of_small_range_gets_a_note(tmp_path, cli):
    _folder(tmp_path / "images")
    done = _run(cli, tmp_path, 3)
    assert done.returncode == 0, done.stderr[-2000:]
    notes = [line for line in done.stdout.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and notes[0].startswith("note: class 'scan' (I;16): values reach only")
    top = max(  # the note's figure is the class's largest value over its splits
        np.asarray(Image.open(p)).max() for p in (tmp_path / "images/train/scan").glob("*.png")
    )
    assert f"only {top / 65535:.3f} of [0, 1]" in notes[0]
    assert f"is {8 / 255 / (top / 65535):.0%} of that range" in notes[0]
