"""Image files to float tensors in [0, 1], scaled by the range their format can hold, and fitted
to a size without distorting them.

How a file's values become [0, 1] depends on its pixel format (the Pillow mode it opens in):

| format (Pillow mode)                           | divided by | refused when                  |
| ---------------------------------------------- | ---------- | ----------------------------- |
| 8-bit: L, RGB, RGBA, P, 1, CMYK, ...           | 255        | never                         |
| 16-bit gray: I;16, I;16B, I;16L, I;16N         | 65535      | never                         |
| 32-bit integer gray: I (Pillow's reading of    | 65535      | a value outside 0..65535      |
| some 16-bit PNG and TIFF files)                |            |                               |
| 32-bit float gray: F (float TIFF)              | 1          | a value outside [0, 1], NaN   |
| DICOM (.dcm, with the `dicom` extra)           | 2**bits-1  | see `robust_train.data.dicom` |

A 16-bit image is never squeezed into 8 bits first (Pillow's own conversion to RGB or L clips
every value above 255, so a 12-bit scan would read as nearly all 1.0). Colour images lose their
alpha channel; a palette is expanded. Gray images are repeated to three channels unless
`grayscale=True`; colour images are turned gray with Pillow's luma (ITU-R 601-2) weights. A file
whose values cannot be read this way raises `ImageValueError` naming the file (a user error: one
line, exit code 2 from the command line).

`fit_to_size` then brings the image to the size the model takes: "pad" (the default of the
image-folder data: scale the whole image to fit, fill the rest with 0), "center_crop" (scale to
cover, cut the overflow on both sides) or "stretch" (scale each side on its own).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from torch.nn import functional as F
from torchvision.datasets.folder import IMG_EXTENSIONS

from robust_train.data.base import resize_images
from robust_train.data.check import UnreadableImageError
from robust_train.data.dicom import DICOM_EXTENSIONS, read_dicom

__all__ = [
    "IMAGE_EXTENSIONS",
    "RESIZE_MODES",
    "DecodedImage",
    "ImageValueError",
    "ResizeMode",
    "decode_image",
    "fit_to_size",
    "load_pixels",
    "reduction_factor",
]

ResizeMode = Literal["pad", "center_crop", "stretch"]
RESIZE_MODES: tuple[str, ...] = ("pad", "center_crop", "stretch")
SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N")
_SIXTEEN_BIT_MAX = 65535.0
_LUMA = (0.299, 0.587, 0.114)  # ITU-R 601-2, as Pillow's convert("L")
# the files an image folder reads: torchvision's image extensions and DICOM's
IMAGE_EXTENSIONS: tuple[str, ...] = (*IMG_EXTENSIONS, *DICOM_EXTENSIONS)


class ImageValueError(UnreadableImageError):
    """A file whose values cannot be read as [0, 1] images (a float image outside [0, 1], a
    32-bit integer image outside 0..65535); the message names the file and the values found."""


@dataclasses.dataclass(frozen=True)
class DecodedImage:
    """One decoded file: `pixels` float32 (C, H, W) in [0, 1], the file's Pillow `mode` and the
    `divisor` its values were divided by."""

    pixels: Tensor
    mode: str
    divisor: float


def _gray_values(image: Image.Image, path: str) -> tuple[np.ndarray, float]:
    """(values as float32 in [0, 1], divisor) of a high-bit-depth gray image."""
    raw = np.asarray(image)
    if image.mode in SIXTEEN_BIT_MODES:
        return raw.astype(np.float32) / _SIXTEEN_BIT_MAX, _SIXTEEN_BIT_MAX
    low, high = (float(raw.min()), float(raw.max())) if raw.size else (0.0, 0.0)
    if image.mode == "I":
        if low < 0 or high > _SIXTEEN_BIT_MAX:
            raise ImageValueError(
                f"image {path!r} is 32-bit integer (mode I) with values in [{low:g}, {high:g}]; "
                "only 0..65535 (16-bit data) is read, divided by 65535: save it as 16-bit, or "
                "as float TIFF in [0, 1]"
            )
        return raw.astype(np.float32) / _SIXTEEN_BIT_MAX, _SIXTEEN_BIT_MAX
    if not np.isfinite(raw).all() or low < 0.0 or high > 1.0:
        raise ImageValueError(
            f"image {path!r} is floating point (mode {image.mode}) with values in "
            f"[{low:g}, {high:g}]{'' if np.isfinite(raw).all() else ' and NaN or inf'}; float "
            "images are read as they are and must lie in [0, 1]: rescale the file"
        )
    return raw.astype(np.float32), 1.0


def decode_image(
    path: str | os.PathLike[str],
    grayscale: bool = False,
    size: tuple[int, int] | None = None,
    resize_mode: ResizeMode = "pad",
) -> DecodedImage:
    """Read an image file as float32 (C, H, W) in [0, 1], C = 1 if `grayscale` else 3.

    Args:
        path: the image file.
        grayscale: one channel (colour turned gray) instead of three (gray repeated).
        size: the (height, width) the caller will bring the image to with
            `fit_to_size(..., size, resize_mode)`. An image at least twice as large as that
            needs is first shrunk by an integer factor (a JPEG decoded at a reduced scale,
            other files by box averages), staying at least as large, so large
            files decode faster; None: the full image.
        resize_mode: the `fit_to_size` mode that `size` is meant for.

    Returns:
        The pixels, the file's Pillow mode and the divisor applied (see the module's table).

    Raises:
        ImageValueError: a float image with values outside [0, 1] (or NaN), or a 32-bit
            integer image outside 0..65535; the message names the file.
        OSError: the file cannot be decoded (Pillow's error).

    Examples:
        >>> import tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "scan.png")
        >>> Image.fromarray(np.array([[0, 4095, 65535]], dtype=np.uint16)).save(path)
        >>> image = decode_image(path)
        >>> image.mode, image.pixels.shape, [round(v, 4) for v in image.pixels[0, 0].tolist()]
        ('I;16', torch.Size([3, 1, 3]), [0.0, 0.0625, 1.0])
    """
    path = os.fspath(path)
    if path.lower().endswith(DICOM_EXTENSIONS):
        return _dicom_image(path, grayscale)
    with Image.open(path) as image:
        mode = image.mode
        if mode in (*SIXTEEN_BIT_MODES, "I", "F"):
            image.load()
            values, divisor = _gray_values(image, path)
            pixels = torch.from_numpy(np.ascontiguousarray(values)).unsqueeze(0)
            height, width = values.shape
            factor = 1 if size is None else reduction_factor(height, width, size, resize_mode)
            if factor > 1:  # box averages over the whole image, as Pillow's reduce
                shrunk = (-(-height // factor), -(-width // factor))
                pixels = F.adaptive_avg_pool2d(pixels.unsqueeze(0), shrunk).squeeze(0)
            if not grayscale:
                pixels = pixels.expand(3, -1, -1).contiguous()
            return DecodedImage(pixels, mode, divisor)
        array = np.asarray(_eight_bit(image, "L" if grayscale else "RGB", size, resize_mode))
    pixels = torch.from_numpy(array.copy()).float().div_(255.0)
    pixels = pixels.unsqueeze(0) if pixels.dim() == 2 else pixels.permute(2, 0, 1).contiguous()
    return DecodedImage(pixels, mode, 255.0)


def reduction_factor(
    height: int, width: int, size: tuple[int, int], resize_mode: ResizeMode = "pad"
) -> int:
    """The largest integer k such that an image (height, width) shrunk k times is still at least
    as large as `fit_to_size(image, size, resize_mode)` scales it to (1: no shrinking).

    Examples:
        >>> reduction_factor(1000, 500, (224, 224), "pad"), reduction_factor(1000, 500, (224, 224),
        ...     "center_crop")
        (4, 2)
    """
    if resize_mode == "pad":
        need = _scaled(height, width, min(size[0] / height, size[1] / width))
    elif resize_mode == "center_crop":
        need = _scaled(height, width, max(size[0] / height, size[1] / width))
    else:
        need = size
    return max(1, min(height // max(need[0], 1), width // max(need[1], 1)))


def _eight_bit(
    image: Image.Image, mode: str, size: tuple[int, int] | None, resize_mode: ResizeMode
) -> Image.Image:
    """`image` converted to `mode` ("RGB" or "L"), shrunk by an integer factor toward `size`."""
    factor = 1 if size is None else reduction_factor(image.height, image.width, size, resize_mode)
    if factor > 1 and image.format == "JPEG":
        image.draft(mode, (-(-image.width // factor), -(-image.height // factor)))
    converted = image.convert(mode)
    if size is not None:
        factor = reduction_factor(converted.height, converted.width, size, resize_mode)
        if factor > 1:
            converted = converted.reduce(factor)
    return converted


def _dicom_image(path: str, grayscale: bool) -> DecodedImage:
    values, label, divisor = read_dicom(path)
    pixels = torch.from_numpy(np.ascontiguousarray(values))
    if pixels.dim() == 3:  # (H, W, 3): colour
        pixels = pixels.permute(2, 0, 1).contiguous()
        if grayscale:
            luma = torch.tensor(_LUMA).view(3, 1, 1)
            pixels = (pixels * luma).sum(0, keepdim=True).clamp_(0.0, 1.0)
    else:
        pixels = pixels.unsqueeze(0)
        if not grayscale:
            pixels = pixels.expand(3, -1, -1).contiguous()
    return DecodedImage(pixels, label, divisor)


def load_pixels(
    path: str,
    grayscale: bool = False,
    size: tuple[int, int] | None = None,
    resize_mode: ResizeMode = "pad",
) -> Tensor:
    """`decode_image(path, grayscale, size, resize_mode).pixels`: the loader of the image-folder
    data (then `fit_to_size(pixels, size, resize_mode)`)."""
    return decode_image(path, grayscale, size, resize_mode).pixels


def _scaled(height: int, width: int, scale: float) -> tuple[int, int]:
    return max(1, round(height * scale)), max(1, round(width * scale))


def fit_to_size(pixels: Tensor, size: tuple[int, int], mode: ResizeMode = "pad") -> Tensor:
    """Bring float images (C, H, W) or (N, C, H, W) in [0, 1] to `size` (height, width).

    Args:
        pixels: the image(s).
        size: (height, width) of the result.
        mode: "pad": scale the whole image to fit inside `size` keeping its aspect ratio, and
            fill the border (centred) with 0; "center_crop": scale it to cover `size` keeping its
            aspect ratio, and cut what overflows equally on both sides; "stretch": scale height
            and width independently. All three agree when the aspect ratios match.

    Returns:
        The images at `size` (bilinear, antialiased when shrinking), in [0, 1].

    Raises:
        ValueError: an unknown `mode`.

    Examples:
        >>> wide = torch.ones(1, 2, 4)  # height 2, width 4
        >>> fit_to_size(wide, (4, 4), "pad")[0].tolist()
        [[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]
        >>> fit_to_size(wide, (4, 4), "center_crop").shape
        torch.Size([1, 4, 4])
    """
    if mode not in RESIZE_MODES:
        raise ValueError(f"`resize_mode` must be one of {list(RESIZE_MODES)}, got {mode!r}")
    batch = pixels if pixels.dim() == 4 else pixels.unsqueeze(0)
    height, width = int(batch.shape[-2]), int(batch.shape[-1])
    if mode == "stretch" or (height, width) == size:
        out = resize_images(batch, size)
    elif mode == "pad":
        inner = _scaled(height, width, min(size[0] / height, size[1] / width))
        inner = (min(inner[0], size[0]), min(inner[1], size[1]))
        scaled = resize_images(batch, inner)
        top, left = (size[0] - inner[0]) // 2, (size[1] - inner[1]) // 2
        padding = (left, size[1] - inner[1] - left, top, size[0] - inner[0] - top)
        out = F.pad(scaled, padding, value=0.0)
    else:
        outer = _scaled(height, width, max(size[0] / height, size[1] / width))
        outer = (max(outer[0], size[0]), max(outer[1], size[1]))
        scaled = resize_images(batch, outer)
        top, left = (outer[0] - size[0]) // 2, (outer[1] - size[1]) // 2
        out = scaled[..., top : top + size[0], left : left + size[1]]
    return out if pixels.dim() == 4 else out[0]
