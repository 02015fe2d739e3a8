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
with a printed count, and `robust-train check-data --config ...` lists them without training.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning.utilities import rank_zero_only
from torch.utils.data import random_split
from torchvision import transforms
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

from robust_train.core.validation import check_non_negative, check_probability
from robust_train.data._base import ImageDataModule, as_size
from robust_train.data.check import SplitCheck, UnreadableImageError, unreadable_files

__all__ = ["EmptyClassFolderError", "FolderLinkError", "ImageFolderDataModule"]


class EmptyClassFolderError(ValueError):
    """Class folders under `train/` that hold no image (a user error: one line, exit code 2)."""

    user_error = True


class FolderLinkError(ValueError):
    """A link to a folder inside an image folder's split (a user error: one line, exit code 2)."""

    user_error = True


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
        if any(has_file_allowed_extension(name, IMG_EXTENSIONS) for name in files):
            return True
    return False


class _FixedClassesFolder(ImageFolder):
    """ImageFolder whose class indices come from the training folder, so that they agree across
    splits even when a val/test folder lacks a class."""

    samples: list[tuple[str, int]]

    def __init__(self, root: str, classes: list[str], transform: transforms.Compose):
        self._fixed = classes
        super().__init__(root, transform=transform, allow_empty=True)

    def find_classes(self, directory: str | os.PathLike[str]) -> tuple[list[str], dict[str, int]]:
        present = sorted(e.name for e in os.scandir(directory) if e.is_dir())
        unknown = sorted(set(present) - set(self._fixed))
        if unknown:
            raise ValueError(
                f"{str(directory)!r} has class folders {unknown} that the train folder lacks"
            )
        return list(self._fixed), {c: i for i, c in enumerate(self._fixed)}

    def __getitem__(self, index: int) -> Any:
        try:
            return super().__getitem__(index)
        except Exception as err:
            raise UnreadableImageError(
                f"cannot read image {self.samples[index][0]!r}: {type(err).__name__}: {err} "
                "(check every image first: robust-train check-data --config ...; skip such "
                "files: data.init_args.skip_unreadable: true)"
            ) from err

    def drop(self, paths: set[str]) -> None:
        """Leave the files `paths` out of the dataset."""
        kept: list[tuple[str, int]] = [s for s in self.samples if s[0] not in paths]
        self.samples = self.imgs = kept
        self.targets = [target for _, target in self.samples]


class ImageFolderDataModule(ImageDataModule):
    """Images in class folders, resized to `image_size` and converted to [0, 1] tensors.

    Args:
        root: folder with `train/<class>/<images>`, and optionally `val/` and `test/` alike.
        image_size: an int (square) or (height, width) every image is resized to.
        batch_size: batch size of every dataloader.
        num_workers: dataloader workers.
        grayscale: convert to one channel (else RGB; alpha is dropped).
        val_fraction: share of `train/` held out (seeded) for validation when there is no `val/`.
        seed: seed of that split.
        verify: read every image when the fit sets up, before any training, and refuse the
            folder (naming the files) if one cannot be read.
        skip_unreadable: read every image at setup and leave out those that cannot be read,
            printing how many (and the first) on stderr; the split runs over the rest.

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
    ):
        super().__init__(batch_size, num_workers)
        self.save_hyperparameters()
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

    def _folder(self, split: str) -> _FixedClassesFolder:
        steps: list[object] = [transforms.Resize(self.size)]
        if self.hparams["grayscale"]:
            steps.append(transforms.Grayscale(num_output_channels=1))
        steps.append(transforms.ToTensor())
        _refuse_folder_links(self._split_dir(split))
        return _FixedClassesFolder(
            str(self._split_dir(split)), self.class_names, transforms.Compose(steps)
        )

    def _splits(self) -> list[str]:
        return ["train", *(s for s in ("val", "test") if self._split_dir(s).is_dir())]

    def check_files(self) -> list[SplitCheck]:
        """Decode every image of every split (as training would, without resizing); nothing is
        skipped. See `robust_train.data.check_datamodule`."""
        checks = []
        for split in self._splits():
            folder = self._folder(split)
            paths = [path for path, _ in folder.samples]
            checks.append(
                SplitCheck(split, len(paths), tuple(unreadable_files(paths, folder.loader)))
            )
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
        train = self._readable(self._folder("train"), "train")
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
            self.train_set, self.val_set = random_split(
                train, [len(train) - n_val, n_val], generator=generator
            )
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
