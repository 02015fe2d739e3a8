"""Your own images: `root/train/<class>/*.png`, optional `root/val/...` and `root/test/...`.

Every sub-folder of `train/` is a class, so a class folder without a single image would become a
class no model can learn: it is refused (`EmptyClassFolderError`, naming the folders; exit code 2
from the command line) wherever the classes are read, by `fit` before training and by
`robust-train check-data`.

Links to folders inside a split folder are never followed: one (a class folder that is a link,
or a link inside one) is refused (`FolderLinkError`, naming it, exit code 2), since a link can
loop (`a/l1 -> .`: the walk never ends) or put one class's images under another (`a/up -> ..`).
Links to image files are read as files.

A file that cannot be decoded is named in the error (`UnreadableImageError`, exit code 2 from the
command line), whether it is met during training or found before it: `verify=True` reads every
image when the fit sets up and refuses the folder if any fails, `skip_unreadable=True` drops them
with a printed count, and `robust-train check-data --config ...` lists them without training
(with a table of each class's image count, file formats, sizes and value range).

Files are decoded by `robust_train.data.images.decode_image`: 16-bit and float images are scaled
by the range their format holds, never clipped through 8 bits; DICOM files (`.dcm`) are read with
the optional `dicom` extra (`robust_train.data.dicom`). Images are fitted to `image_size`
without distortion by default (`resize_mode="pad"`), and `train_transform` (an augmentation:
any callable or torchvision transform taking and returning a float (C, H, W) tensor in [0, 1])
is applied to the training images only.
"""

from __future__ import annotations

import copy
import functools
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning.utilities import rank_zero_only
from torch import Tensor
from torch.utils.data import Subset, random_split
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import has_file_allowed_extension

from robust_train.core.validation import check_non_negative, check_probability
from robust_train.data.base import ImageDataModule, as_size
from robust_train.data.check import (
    SplitCheck,
    UnreadableImageError,
    tally_images,
    unreadable_files,
)
from robust_train.data.images import (
    IMAGE_EXTENSIONS,
    RESIZE_MODES,
    ImageValueError,
    ResizeMode,
    decode_image,
    fit_to_size,
    load_pixels,
)

__all__ = ["AugmentationError", "EmptyClassFolderError", "FolderLinkError", "ImageFolderDataModule"]


class EmptyClassFolderError(ValueError):
    """Class folders under `train/` that hold no image (a user error: one line, exit code 2)."""

    user_error = True


class AugmentationError(ValueError):
    """A `train_transform` whose output is not a float (C, H, W) tensor in [0, 1] of the data's
    shape (a user error: one line, exit code 2)."""


class FolderLinkError(ValueError):
    """A link to a folder inside an image folder's split (a user error: one line, exit code 2)."""

    user_error = True


class _Prepare:
    """Fit decoded pixels to the data's size, then apply the augmentation (if any), checked."""

    def __init__(self, size: tuple[int, int], mode: ResizeMode, augment: Callable | None):
        self.size, self.mode, self.augment = size, mode, augment

    def __call__(self, pixels: Tensor) -> Tensor:
        pixels = fit_to_size(pixels, self.size, self.mode)
        if self.augment is None:
            return pixels
        shape = tuple(pixels.shape)
        out = self.augment(pixels)
        name = type(self.augment).__name__
        if not isinstance(out, Tensor) or tuple(out.shape) != shape or not out.is_floating_point():
            got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise AugmentationError(
                f"train_transform ({name}) must return a float tensor of shape {shape} (the "
                f"image_size and channels of the data); it returned {got}"
            )
        low, high = float(out.min()), float(out.max())
        if low < -1e-6 or high > 1 + 1e-6:
            raise AugmentationError(
                f"train_transform ({name}) returned values in [{low:.3g}, {high:.3g}]; images "
                "stay in [0, 1] (normalisation is a layer of the model, not a transform)"
            )
        return out.clamp(0.0, 1.0)


def _is_image_file(path: str) -> bool:
    return has_file_allowed_extension(path, IMAGE_EXTENSIONS)


def _refuse_folder_links(split: str | os.PathLike[str]) -> None:
    """Refuse links to folders anywhere below `split` (the walk does not follow them).

    Raises:
        FolderLinkError: naming the first link, where it points, and how many there are.
    """
    links = []
    for folder, subfolders, _ in os.walk(split):  # followlinks=False: never enters a link
        links += [
            os.path.join(folder, d) for d in subfolders if os.path.islink(os.path.join(folder, d))
        ]
    if links:
        first = sorted(links)[0]
        raise FolderLinkError(
            f"{first!r} is a link to a folder ({os.readlink(first)!r}; {len(links)} such link(s) "
            f"under {str(split)!r}): links to folders are not followed in an image folder (they "
            "can loop or relabel images); replace it with the folder itself or remove it"
        )


def _holds_an_image(folder: str) -> bool:
    for _, _, files in os.walk(folder):
        if any(has_file_allowed_extension(name, IMAGE_EXTENSIONS) for name in files):
            return True
    return False


class _FixedClassesFolder(ImageFolder):
    """ImageFolder whose class indices come from the training folder, so that they agree across
    splits even when a val/test folder lacks a class."""

    samples: list[tuple[str, int]]

    def __init__(
        self,
        root: str,
        classes: list[str],
        transform: Callable[[Tensor], Tensor],
        loader: Callable[[str], Tensor],
    ):
        self._fixed = classes
        super().__init__(
            root, transform, loader=loader, is_valid_file=_is_image_file, allow_empty=True
        )

    def find_classes(self, directory: str | os.PathLike[str]) -> tuple[list[str], dict[str, int]]:
        present = sorted(e.name for e in os.scandir(directory) if e.is_dir())
        unknown = sorted(set(present) - set(self._fixed))
        if unknown:
            raise ValueError(
                f"{str(directory)!r} has class folders {unknown} that the train folder lacks"
            )
        return list(self._fixed), {c: i for i, c in enumerate(self._fixed)}

    def __getitem__(self, index: int) -> Any:
        path, target = self.samples[index]
        try:
            pixels = self.loader(path)
        except ImageValueError:
            raise  # names the file and the values already
        except Exception as err:
            raise UnreadableImageError(
                f"cannot read image {self.samples[index][0]!r}: {type(err).__name__}: {err} "
                "(check every image first: robust-train check-data --config ...; skip such "
                "files: data.init_args.skip_unreadable: true)"
            ) from err
        return (pixels if self.transform is None else self.transform(pixels)), target

    def drop(self, paths: set[str]) -> None:
        """Leave the files `paths` out of the dataset."""
        kept: list[tuple[str, int]] = [s for s in self.samples if s[0] not in paths]
        self.samples = self.imgs = kept
        self.targets = [target for _, target in self.samples]


class ImageFolderDataModule(ImageDataModule):
    """Images in class folders, decoded to [0, 1] tensors and fitted to `image_size`.

    Args:
        root: folder with `train/<class>/<images>`, and optionally `val/` and `test/` alike.
        image_size: an int (square) or (height, width) every image is brought to.
        batch_size: batch size of every dataloader.
        num_workers: dataloader workers.
        grayscale: convert to one channel (else RGB; alpha is dropped).
        val_fraction: share of `train/` held out (seeded) for validation when there is no `val/`.
        seed: seed of that split.
        verify: read every image when the fit sets up, before any training, and refuse the
            folder (naming the files) if one cannot be read.
        skip_unreadable: read every image at setup and leave out those that cannot be read,
            printing how many (and the first) on stderr; the split runs over the rest.
        resize_mode: how an image whose aspect ratio differs from `image_size` is fitted:
            "pad" (keep all of it, scaled to fit, border filled with 0), "center_crop" (scale to
            cover, cut the overflow equally on both sides) or "stretch" (distort). Square
            images into a square size are the same in all three.
        train_transform: an augmentation applied to each training image (not to validation or
            test images) after resizing: any callable, such as a torchvision transforms v2
            object, taking and returning a float tensor (C, H, W) in [0, 1] of that shape.
            From YAML: `{class_path: torchvision.transforms.v2.RandomHorizontalFlip}`.

    Raises:
        ValueError: an unknown `resize_mode`, a `train_transform` that is not callable.

    Examples:
        >>> import tempfile
        >>> from PIL import Image
        >>> root = Path(tempfile.mkdtemp())
        >>> for c in ("cat", "dog"):
        ...     (root / "train" / c).mkdir(parents=True)
        ...     for i in range(5):
        ...         Image.new("RGB", (10, 12)).save(root / "train" / c / f"{i}.png")
        >>> dm = ImageFolderDataModule(root, image_size=16, val_fraction=0.2)
        >>> dm.class_names, dm.in_channels, dm.image_size
        (['cat', 'dog'], 3, (16, 16))
        >>> dm.setup(); len(dm.train_set), len(dm.val_set), dm.train_set[0][0].shape
        (8, 2, torch.Size([3, 16, 16]))
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        image_size: int | Sequence[int] = 224,
        batch_size: int = 32,
        num_workers: int = 0,
        grayscale: bool = False,
        val_fraction: float = 0.1,
        seed: int = 0,
        verify: bool = False,
        skip_unreadable: bool = False,
        resize_mode: ResizeMode = "pad",
        train_transform: Callable | None = None,
    ):
        super().__init__(batch_size, num_workers)
        # an augmentation object is no plain value: the run's config.yaml records how it was
        # built; checkpoints rebuild the data without it (evaluation sees the images as they are)
        self.save_hyperparameters(ignore=["train_transform"])
        if resize_mode not in RESIZE_MODES:
            raise ValueError(
                f"`resize_mode` must be one of {list(RESIZE_MODES)}, got {resize_mode!r}"
            )
        if train_transform is not None and not callable(train_transform):
            raise ValueError(
                f"`train_transform` must be callable (a function or a transform), got "
                f"{train_transform!r}"
            )
        self.train_transform = train_transform
        check_probability(val_fraction, "val_fraction")
        check_non_negative(seed, "seed", integer=True)
        self.root = Path(root).expanduser()
        self.hparams["root"] = str(root)  # plain values only, for YAML hparams and configs
        self.size: tuple[int, int] = as_size(image_size, "image_size") or (224, 224)
        self._classes: list[str] | None = None
        self.skipped: list[tuple[str, str]] = []  # (path, reason) left out by skip_unreadable

    def _split_dir(self, split: str) -> Path:
        return self.root / split

    @property
    def class_names(self) -> list[str]:
        if self._classes is None:
            train = self._split_dir("train")
            if not train.is_dir():
                raise FileNotFoundError(
                    f"ImageFolderDataModule needs {str(train)!r} with one sub-folder of images "
                    "per class "
                    f"(and optionally {str(self._split_dir('val'))!r}, "
                    f"{str(self._split_dir('test'))!r})"
                )
            _refuse_folder_links(train)
            classes = sorted(e.name for e in os.scandir(train) if e.is_dir())
            if not classes:
                raise FileNotFoundError(f"{str(train)!r} has no class sub-folders")
            empty = [c for c in classes if not _holds_an_image(os.path.join(train, c))]
            if len(empty) == len(classes):
                raise FileNotFoundError(f"no images found under {str(train)!r}")
            if empty:
                raise EmptyClassFolderError(
                    f"{len(empty)} of the {len(classes)} class folders under {str(train)!r} hold "
                    f"no image: {empty}; each folder is a class, so remove them or add images"
                )
            self._classes = classes
        return list(self._classes)

    @property
    def in_channels(self) -> int:
        return 1 if self.hparams["grayscale"] else 3

    @property
    def image_size(self) -> tuple[int, int]:
        return self.size

    def _prepare(self, augment: bool) -> _Prepare:
        augmentation = self.train_transform if augment else None
        return _Prepare(self.size, self.hparams["resize_mode"], augmentation)

    def _folder(self, split: str, augment: bool = False) -> _FixedClassesFolder:
        prepare = self._prepare(augment)
        _refuse_folder_links(self._split_dir(split))
        loader = functools.partial(
            load_pixels,
            grayscale=bool(self.hparams["grayscale"]),
            size=self.size,
            resize_mode=self.hparams["resize_mode"],
        )
        return _FixedClassesFolder(str(self._split_dir(split)), self.class_names, prepare, loader)

    def _splits(self) -> list[str]:
        return ["train", *(s for s in ("val", "test") if self._split_dir(s).is_dir())]

    def check_files(self) -> list[SplitCheck]:
        """Decode every image of every split (as training would, without resizing); nothing is
        skipped. Each split's check also tallies its classes: image counts, file formats,
        sizes and value ranges. See `robust_train.data.check_datamodule`."""
        checks = []
        grayscale = bool(self.hparams["grayscale"])
        for split in self._splits():
            samples = self._folder(split).samples
            paths = [path for path, _ in samples]
            names = [self.class_names[label] for _, label in samples]
            bad, classes = tally_images(
                paths, names, functools.partial(decode_image, grayscale=grayscale)
            )
            checks.append(SplitCheck(split, len(paths), tuple(bad), classes))
        return checks

    def _readable(self, folder: _FixedClassesFolder, split: str) -> _FixedClassesFolder:
        """The folder, checked (verify) or without its unreadable files (skip_unreadable)."""
        if not (self.hparams["verify"] or self.hparams["skip_unreadable"]):
            return folder
        bad = unreadable_files([path for path, _ in folder.samples], folder.loader)
        if bad and not self.hparams["skip_unreadable"]:
            raise UnreadableImageError(
                f"{len(bad)} of {len(folder.samples)} images under "
                f"{str(self._split_dir(split))!r} cannot be read, e.g. {bad[0][0]!r} "
                f"({bad[0][1]}); list them: robust-train check-data --config ...; or set "
                "skip_unreadable: true"
            )
        if bad:
            folder.drop({path for path, _ in bad})
            self.skipped += bad
            _report_skipped(bad, len(folder.samples) + len(bad), self._split_dir(split))
        return folder

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        train = self._readable(self._folder("train", augment=True), "train")
        if len(train) == 0:
            raise FileNotFoundError(f"no images found under {str(self._split_dir('train'))!r}")
        if self._split_dir("val").is_dir():
            self.train_set, self.val_set = train, self._readable(self._folder("val"), "val")
        else:
            n_val = int(round(self.hparams["val_fraction"] * len(train)))
            if n_val < 1 or n_val >= len(train):
                raise ValueError(
                    f"val_fraction={self.hparams['val_fraction']} of {len(train)} training "
                    "images leaves an "
                    f"empty split; add {str(self._split_dir('val'))!r} or change val_fraction"
                )
            generator = torch.Generator().manual_seed(self.hparams["seed"])
            held_out: Subset
            self.train_set, held_out = random_split(
                train, [len(train) - n_val, n_val], generator=generator
            )
            plain = copy.copy(train)  # the same files, without the augmentation
            plain.transform = self._prepare(augment=False)
            self.val_set = Subset(plain, held_out.indices)
        if self._split_dir("test").is_dir():
            self.test_set = self._readable(self._folder("test"), "test")

    def test_dataloader(self):  # noqa: D102
        if self.train_set is not None and self.test_set is None:
            raise RuntimeError(f"no test split: {str(self._split_dir('test'))!r} does not exist")
        return super().test_dataloader()


@rank_zero_only
def _report_skipped(bad: list[tuple[str, str]], total: int, folder: Path) -> None:
    print(
        f"ImageFolderDataModule: skipped {len(bad)} unreadable image(s) of {total} under "
        f"{str(folder)!r} (skip_unreadable), e.g. {bad[0][0]!r}: {bad[0][1]}",
        file=sys.stderr,
    )
