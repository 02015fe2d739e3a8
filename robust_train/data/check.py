"""Read every sample of a DataModule before training: which files (or items) cannot be read.

`robust-train check-data --config CONFIG.yaml` runs `check_datamodule` on the config's data
section; `ImageFolderDataModule(verify=True)` runs it when the fit sets up, and
`skip_unreadable=True` drops what it finds (with a printed count) instead of refusing. An image
folder whose `train/` has a class folder without images is refused before any file is read
(`robust_train.data.image_folder.EmptyClassFolderError`), by check-data as by `fit`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["SplitCheck", "UnreadableImageError", "check_datamodule", "unreadable_files"]


class UnreadableImageError(OSError):
    """An image file that cannot be decoded, named in the message (a user error: exit code 2).

    A DataLoader worker re-raises it in the main process as `UnreadableImageError(<worker
    traceback>)`; the message is then reduced to the line that names the file again.

    Examples:
        >>> str(UnreadableImageError("Caught X in worker\\nTraceback\\nrobust_train.data.check."
        ...                          "UnreadableImageError: cannot read image 'a.png': truncated"))
        "cannot read image 'a.png': truncated"
    """

    def __init__(self, message: str) -> None:
        marker = f"{type(self).__name__}: "
        lines = [line for line in str(message).splitlines() if marker in line]
        self.worker_traceback = str(message) if lines else None
        super().__init__(lines[-1].split(marker, 1)[1] if lines else message)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclasses.dataclass(frozen=True)
class SplitCheck:
    """What `check_datamodule` found in one split: its size and the (name, reason) of each
    sample that could not be read (a file path for image folders, `split[index]` otherwise)."""

    split: str
    n_items: int
    unreadable: tuple[tuple[str, str], ...]


def _reason(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".strip().splitlines()[0]


def unreadable_files(paths: Sequence[str], loader: Callable[[str], Any]) -> list[tuple[str, str]]:
    """(path, reason) for each file `loader` cannot read completely (every pixel decoded).

    Examples:
        >>> import tempfile, os
        >>> from torchvision.datasets.folder import pil_loader
        >>> bad = os.path.join(tempfile.mkdtemp(), "bad.png")
        >>> open(bad, "wb").write(b"not a png") and None
        >>> [(os.path.basename(p), r.split(":")[0]) for p, r in unreadable_files([bad], pil_loader)]
        [('bad.png', 'UnidentifiedImageError')]
    """
    found = []
    for path in paths:
        try:
            image = loader(path)
            load = getattr(image, "load", None)
            if callable(load):
                load()
        except Exception as err:  # noqa: BLE001 - any failure to read the file is the finding
            found.append((str(path), _reason(err)))
    return found


def _check_items(split: str, dataset: Any) -> SplitCheck:
    bad = []
    for index in range(len(dataset)):
        try:
            dataset[index]
        except Exception as err:  # noqa: BLE001 - any failure to read the item is the finding
            bad.append((f"{split}[{index}]", _reason(err)))
    return SplitCheck(split, len(dataset), tuple(bad))


def check_datamodule(datamodule: Any) -> list[SplitCheck]:
    """Read every sample of every split a DataModule has; a module with `check_files()` (the
    image folders) reads its files without decoding twice or skipping anything.

    Examples:
        >>> from robust_train.data import DigitsDataModule
        >>> checks = check_datamodule(DigitsDataModule())  # every one of the 1797 digits reads
        >>> [c.split for c in checks], sum(c.n_items for c in checks)
        (['train', 'val', 'test'], 1797)
        >>> [c.unreadable for c in checks]
        [(), (), ()]
    """
    own = getattr(datamodule, "check_files", None)
    if callable(own):
        return list(own())
    datamodule.prepare_data()
    datamodule.setup("fit")
    checks = []
    for split in ("train", "val", "test"):
        dataset = getattr(datamodule, f"{split}_set", None)
        if dataset is not None:
            checks.append(_check_items(split, dataset))
    return checks
