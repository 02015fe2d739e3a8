"""Image folders of medical-style files: 16-bit and float images keep their values (scaled by
the range their format holds, or refused with one line naming the file), non-square images keep
their aspect ratio, a train-only augmentation hook, and check-data's table of classes, formats,
sizes and value ranges (through the console script's entry point, in-process)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

from robust_train.app.lightning_cli import lightning_main
from robust_train.data import ImageFolderDataModule, UnreadableImageError
from robust_train.data.image_folder import AugmentationError
from robust_train.data.images import ImageValueError, decode_image, fit_to_size, reduction_factor

H, W = 6, 5
RNG = np.random.default_rng(0)
SCAN = RNG.integers(0, 4096, (H, W), dtype=np.uint16)  # 12-bit data stored in 16 bits
SCAN[0, :2] = 4095, 0  # a known maximum and minimum
FLOAT = RNG.random((H, W), dtype=np.float32)


def _save(array: np.ndarray, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)
    return path


def _scan_folder(root: Path) -> dict[str, Path]:
    """train/scan: a 16-bit PNG, a 16-bit big-endian TIFF, a 32-bit integer TIFF; train/float:
    float TIFFs; train/photo: 8-bit RGB PNGs."""
    t = root / "train"
    files = {
        "png16": _save(SCAN, t / "scan" / "a.png"),
        "tif16b": _save(SCAN.astype(">u2"), t / "scan" / "b.tif"),
        "tif32": _save(SCAN.astype(np.int32), t / "scan" / "c.tif"),
        "float": _save(FLOAT, t / "float" / "a.tif"),
        "float2": _save(FLOAT[::-1].copy(), t / "float" / "b.tif"),
    }
    for i in range(2):
        _save(RNG.integers(0, 256, (H, W, 3), dtype=np.uint8), t / "photo" / f"{i}.png")
    return files


def test_16_bit_and_float_images_keep_their_values(tmp_path):
    files = _scan_folder(tmp_path)
    assert Image.open(files["png16"]).mode == "I;16"  # what the test means to write
    assert Image.open(files["tif16b"]).mode == "I;16B"
    assert Image.open(files["tif32"]).mode == "I"
    dm = ImageFolderDataModule(tmp_path, image_size=(H, W), val_fraction=0.25)
    folder = dm._folder("train")
    items = {
        Path(path).stem + Path(path).parent.name: folder[i]
        for i, (path, _) in enumerate(folder.samples)
    }
    expected = torch.from_numpy(SCAN.astype(np.float32) / 65535)
    for key in ("ascan", "bscan", "cscan"):  # 16-bit PNG, big-endian TIFF, 32-bit TIFF
        image, label = items[key]
        assert image.shape == (3, H, W) and label == dm.class_names.index("scan")
        torch.testing.assert_close(image, expected.expand(3, H, W), rtol=0, atol=1e-7)
        assert image.max().item() == pytest.approx(4095 / 65535)  # not clipped to 1.0
    torch.testing.assert_close(items["afloat"][0][0], torch.from_numpy(FLOAT), rtol=0, atol=0)
    gray = ImageFolderDataModule(tmp_path, image_size=(H, W), grayscale=True)._folder("train")
    index = [path for path, _ in gray.samples].index(str(files["png16"]))
    torch.testing.assert_close(gray[index][0], expected[None], rtol=0, atol=1e-7)
    assert decode_image(files["png16"]).divisor == 65535.0


def test_out_of_range_files_are_refused_naming_the_file(tmp_path):
    _scan_folder(tmp_path)
    hot = _save(FLOAT * 3 - 1, tmp_path / "train" / "float" / "hot.tif")
    big = _save(SCAN.astype(np.int32) * 100, tmp_path / "train" / "scan" / "big.tif")
    with pytest.raises(
        ImageValueError, match=r"hot\.tif.* values in \[-0\.99.*, 1\.8.*\].*\[0, 1\]"
    ):
        decode_image(hot)
    with pytest.raises(ImageValueError, match=r"big\.tif.*32-bit integer.*0\.\.65535"):
        decode_image(big)
    folder = ImageFolderDataModule(tmp_path, image_size=4)._folder("train")
    index = next(i for i, (path, _) in enumerate(folder.samples) if path == str(hot))
    with pytest.raises(ImageValueError) as caught:
        folder[index]  # during training: the same one line
    assert "\n" not in str(caught.value) and str(hot) in str(caught.value)
    with pytest.raises(UnreadableImageError, match=r"2 of 9 images .* cannot be read"):
        ImageFolderDataModule(tmp_path, image_size=4, verify=True).setup()


def _halves(height: int, width: int) -> torch.Tensor:
    """One channel, the left half 0.25 and the right half 0.75."""
    image = torch.full((1, height, width), 0.25)
    image[..., width // 2 :] = 0.75
    return image


def test_resize_modes_on_a_wide_image():
    wide = _halves(4, 8)  # height 4, width 8, into 8 x 8
    pad = fit_to_size(wide, (8, 8), "pad")
    torch.testing.assert_close(pad[:, 2:6], wide)  # kept whole, at scale 1
    assert pad[:, :2].abs().sum() == 0 and pad[:, 6:].abs().sum() == 0
    crop = fit_to_size(wide, (8, 8), "center_crop")  # scaled x2 to 8 x 16, the middle 8 kept
    torch.testing.assert_close(crop[..., 0], torch.full((1, 8), 0.25))
    torch.testing.assert_close(crop[..., -1], torch.full((1, 8), 0.75))
    reference = torch.nn.functional.interpolate(wide[None], size=(8, 16), mode="bilinear")[0]
    torch.testing.assert_close(crop, reference[..., 4:12])
    stretch = fit_to_size(wide, (8, 8), "stretch")  # every column kept, height doubled
    torch.testing.assert_close(stretch, wide.repeat_interleave(2, dim=1), rtol=0, atol=0.13)
    assert stretch.min() > 0
    tall = fit_to_size(_halves(8, 4), (4, 8), "pad")  # width 4 of 8 used, centred
    assert tall[..., :2].abs().sum() == 0 and tall[..., 6:].abs().sum() == 0
    for mode in ("pad", "center_crop", "stretch"):  # square into square: all the same
        torch.testing.assert_close(
            fit_to_size(_halves(8, 8), (4, 4), mode), fit_to_size(_halves(8, 8), (4, 4), "stretch")
        )
    with pytest.raises(ValueError, match="resize_mode.*'squash'"):
        ImageFolderDataModule("anywhere", resize_mode="squash")  # type: ignore[arg-type]


def _photos(root: Path, n: int = 4) -> Path:
    for cls in ("a", "b"):
        for i in range(n):
            _save(
                RNG.integers(0, 256, (H, W, 3), dtype=np.uint8), root / "train" / cls / f"{i}.png"
            )
    return root


def test_train_transform_applies_to_training_images_only(tmp_path):
    _photos(tmp_path)
    flip = ImageFolderDataModule(
        tmp_path, image_size=(H, W), val_fraction=0.25, train_transform=lambda x: x.flip(-1)
    )
    plain = ImageFolderDataModule(tmp_path, image_size=(H, W), val_fraction=0.25)
    flip.setup(), plain.setup()
    assert flip.val_set.indices == plain.val_set.indices  # the same split
    torch.testing.assert_close(flip.train_set[0][0], plain.train_set[0][0].flip(-1))
    torch.testing.assert_close(flip.val_set[0][0], plain.val_set[0][0])  # not augmented
    assert "train_transform" not in flip.hparams  # checkpoints rebuild the data without it

    wrong = ImageFolderDataModule(
        tmp_path, image_size=(H, W), train_transform=v2.Normalize([0.5] * 3, [0.1] * 3)
    )
    wrong.setup()
    with pytest.raises(AugmentationError, match=r"Normalize.*values in .*\[0, 1\]"):
        wrong.train_set[0]
    resized = ImageFolderDataModule(tmp_path, image_size=(H, W), train_transform=v2.Resize(3))
    resized.setup()
    with pytest.raises(AugmentationError, match=r"Resize.*shape \(3, 6, 5\).*\(3, 3, 3\)"):
        resized.train_set[0]
    with pytest.raises(ValueError, match="train_transform.*callable"):
        ImageFolderDataModule(tmp_path, train_transform="flip")  # type: ignore[arg-type]


CONFIG = """\
experiment: scans
trainer: {max_epochs: 1, accelerator: cpu, devices: 1, enable_progress_bar: false,
          enable_model_summary: false, logger: false}
model:
  model:
    class_path: robust_train.models.SmallCNN
    init_args: {in_channels: 3, num_classes: 3, input_size: 8}
data:
  class_path: robust_train.data.ImageFolderDataModule
  init_args:
    root: images
    image_size: 8
    batch_size: 4
    val_fraction: 0.25
    train_transform:
      class_path: torchvision.transforms.v2.Compose
      init_args:
        transforms:
          - class_path: torchvision.transforms.v2.RandomHorizontalFlip
          - class_path: torchvision.transforms.v2.ColorJitter
            init_args: {brightness: 0.2}
"""


def test_train_transform_from_yaml_and_check_data_table(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _scan_folder(tmp_path / "images")
    _save(np.zeros((H, W), np.uint8), tmp_path / "images" / "train" / "photo" / "blank.png")
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    built = lightning_main(["--config", str(tmp_path / "cfg.yaml")], run=False)
    augment = built.datamodule.train_transform
    assert isinstance(augment, v2.Compose)
    assert [type(t) for t in augment.transforms] == [v2.RandomHorizontalFlip, v2.ColorJitter]

    out = cli("check-data", "--config", "cfg.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    table = out.stdout[out.stdout.index("split  class") :].splitlines()
    rows = {tuple(line.split()[:3]): line for line in table[1:] if line.startswith("train ")}
    assert set(rows) == {("train", "float", "2"), ("train", "photo", "3"), ("train", "scan", "3")}
    scan = rows[("train", "scan", "3")]
    assert "I,I;16,I;16B" in scan and "5x6" in scan
    assert f"0.000-{4095 / 65535:.3f}" in scan  # the 12-bit range shows, not 1.0
    photo = rows[("train", "photo", "3")]
    assert photo.split()[3] in ("L,RGB", "RGB,L") and photo.split()[-1] == "1"  # blank.png
    assert table[0].split()[-1] == "single-valued"


def test_large_files_are_shrunk_while_decoding_to_about_the_same_pixels(tmp_path):
    rows, cols = np.mgrid[0:96, 0:128] / np.array([96.0, 128.0])[:, None, None]
    smooth = (rows * 0.6 + cols * 0.4).astype(np.float32)  # 96 high, 128 wide, in [0, 1)
    files = {
        "a.png": Image.fromarray((smooth * 255).astype(np.uint8)).convert("RGB"),
        "b.jpg": Image.fromarray((smooth * 255).astype(np.uint8)).convert("RGB"),
        "c.png": Image.fromarray((smooth * 65535).astype(np.uint16)),
    }
    for name, image in files.items():
        image.save(tmp_path / name, quality=95) if name.endswith("jpg") else image.save(
            tmp_path / name
        )
    assert reduction_factor(96, 128, (8, 8), "pad") == 16  # 128 wide into 8: 16 times smaller
    assert reduction_factor(96, 128, (8, 8), "center_crop") == 11  # 128 / 12 < 11 columns
    assert reduction_factor(96, 128, (8, 8), "stretch") == 12
    for name in files:
        for mode in ("pad", "center_crop", "stretch"):
            shrunk = decode_image(tmp_path / name, size=(8, 8), resize_mode=mode).pixels
            assert shrunk.shape[-1] < 128
            full = fit_to_size(decode_image(tmp_path / name).pixels, (8, 8), mode)
            torch.testing.assert_close(fit_to_size(shrunk, (8, 8), mode), full, rtol=0, atol=0.03)
