"""DICOM files in an image folder (the `dicom` extra): stored values scaled by the range of their
BitsStored (bits above it dropped), MONOCHROME1 inverted, signed data shifted; multi-frame files
and a missing pydicom refused with one line naming the file or the fix."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pydicom = pytest.importorskip("pydicom")
from pydicom.dataset import Dataset, FileMetaDataset  # noqa: E402
from pydicom.uid import ExplicitVRLittleEndian, generate_uid  # noqa: E402

from robust_train.data import ImageFolderDataModule  # noqa: E402
from robust_train.data.check import tally_images  # noqa: E402
from robust_train.data.dicom import DicomError  # noqa: E402
from robust_train.data.images import decode_image  # noqa: E402

RNG = np.random.default_rng(0)
SCAN = RNG.integers(0, 4096, (6, 5)).astype(np.uint16)
SCAN[0, :2] = 0, 4095


def _dicom(path: Path, pixels: np.ndarray, photometric: str = "MONOCHROME2", bits: int = 12):
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.SOPClassUID, ds.SOPInstanceUID = generate_uid(), generate_uid()
    ds.set_pixel_data(pixels, photometric, bits)
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.save_as(path, enforce_file_format=True)
    return path


def test_dicom_values_are_scaled_by_their_stored_range(tmp_path):
    plain = _dicom(tmp_path / "train" / "a" / "0.dcm", SCAN)
    _dicom(tmp_path / "train" / "a" / "1.dcm", SCAN)
    inverted = _dicom(tmp_path / "train" / "b" / "0.dcm", SCAN, "MONOCHROME1")
    signed = _dicom(tmp_path / "train" / "b" / "1.dcm", (SCAN.astype(np.int16) - 2048), bits=12)
    expected = torch.from_numpy(SCAN / 4095.0).float()
    dm = ImageFolderDataModule(tmp_path, image_size=(6, 5), val_fraction=0.25)
    folder = dm._folder("train")
    assert sorted(Path(p).name for p, _ in folder.samples) == ["0.dcm", "0.dcm", "1.dcm", "1.dcm"]
    image = folder[[p for p, _ in folder.samples].index(str(plain))][0]
    assert image.shape == (3, 6, 5)
    torch.testing.assert_close(image[0], expected)
    torch.testing.assert_close(decode_image(inverted).pixels[0], 1 - expected)
    torch.testing.assert_close(decode_image(signed, grayscale=True).pixels[0], expected)
    bad, (a, b) = tally_images(
        [str(plain), str(inverted)], ["a", "b"], decode_image
    )  # check-data's table: the format and the 12-bit range
    assert not bad and a.modes == ("DICOM-12",) and (a.value_min, a.value_max) == (0.0, 1.0)


def test_dicom_refusals_name_the_file_or_the_fix(tmp_path, monkeypatch):
    frames = _dicom(tmp_path / "frames.dcm", np.stack([SCAN, SCAN]))
    with pytest.raises(DicomError, match=r"frames\.dcm.* holds 2 frames"):
        decode_image(frames)
    over = _dicom(tmp_path / "over.dcm", SCAN)
    ds = pydicom.dcmread(over)
    loud = SCAN.copy()
    loud[0, 0] = 4096 + 7  # a bit above the 12 the file states: dropped, as the format says
    ds.PixelData = loud.tobytes()
    ds.save_as(over)
    assert decode_image(over).pixels[0, 0, 0] == pytest.approx(7 / 4095)
    monkeypatch.setitem(sys.modules, "pydicom", None)  # as if the extra were not installed
    with pytest.raises(DicomError, match=r"needs pydicom: pip install 'robust-train\[dicom\]'"):
        decode_image(over)
