"""DICOM files (`.dcm`) as float images in [0, 1], behind the optional `dicom` extra
(`pip install 'robust-train[dicom]'`, which brings pydicom).

The stored pixel values are scaled by the range their format holds, as for PNG and TIFF
(`robust_train.data.images`): unsigned values by 2**BitsStored - 1 (a 12-bit CT or X-ray: 4095),
signed values shifted by 2**(BitsStored - 1) first, so the format's lowest value reads 0 and its
highest 1. No modality rescale (RescaleSlope / RescaleIntercept) and no window is applied: the
network sees the stored data, the same way for every file that shares a format; window or rescale
the files yourself beforehand if the task needs one. MONOCHROME1 images (where a low value is
white) are inverted so that, as in MONOCHROME2, a higher value is brighter. pydicom keeps the
BitsStored bits of each value (bits above them, unused by the format, are dropped). One image per
file: multi-frame files are refused, with one line naming the file.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from robust_train.data.check import UnreadableImageError

__all__ = ["DICOM_EXTENSIONS", "DicomError", "read_dicom"]

DICOM_EXTENSIONS = (".dcm", ".dicom")


class DicomError(UnreadableImageError):
    """A DICOM file that cannot be read as one image in [0, 1] (or pydicom is not installed);
    the message names the file."""


def _pydicom() -> Any:
    try:
        import pydicom
    except ImportError as err:
        raise DicomError(
            "reading DICOM files needs pydicom: pip install 'robust-train[dicom]'"
        ) from err
    return pydicom


def read_dicom(path: str | os.PathLike[str]) -> tuple[np.ndarray, str, float]:
    """(values float32 (H, W) or (H, W, 3) in [0, 1], a format label such as "DICOM-12", the
    divisor applied: the width of the stored range).

    Raises:
        DicomError: pydicom is missing, or the file holds several frames.

    Examples:
        >>> import tempfile
        >>> from pydicom.dataset import Dataset, FileMetaDataset
        >>> from pydicom.uid import ExplicitVRLittleEndian, generate_uid
        >>> ds = Dataset()
        >>> ds.file_meta = FileMetaDataset()
        >>> ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
        >>> ds.SOPClassUID, ds.SOPInstanceUID = generate_uid(), generate_uid()
        >>> ds.set_pixel_data(np.array([[0, 2048, 4095]], np.uint16), "MONOCHROME2", 12)
        >>> path = os.path.join(tempfile.mkdtemp(), "scan.dcm")
        >>> ds.save_as(path, enforce_file_format=True)
        >>> values, label, divisor = read_dicom(path)
        >>> label, divisor, values.round(3).tolist()
        ('DICOM-12', 4095.0, [[0.0, 0.5, 1.0]])
    """
    path = os.fspath(path)
    ds = _pydicom().dcmread(path)
    frames = int(getattr(ds, "NumberOfFrames", 1) or 1)
    if frames != 1:
        raise DicomError(f"DICOM file {path!r} holds {frames} frames; one image per file is read")
    raw = np.asarray(ds.pixel_array)
    bits = int(getattr(ds, "BitsStored", raw.dtype.itemsize * 8))
    signed = int(getattr(ds, "PixelRepresentation", 0)) == 1
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    values = ((raw.astype(np.float64) - low) / (high - low)).astype(np.float32)
    if str(getattr(ds, "PhotometricInterpretation", "")) == "MONOCHROME1":
        values = 1.0 - values
    return values, f"DICOM-{bits}", float(high - low)
