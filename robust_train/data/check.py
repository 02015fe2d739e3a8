"""Read every sample of a DataModule before training: which files (or items) cannot be read.

`robust-train check-data --config CONFIG.yaml` runs `check_datamodule` on the config's data
section and prints `summary_table`: per split and class, the number of images, their file formats
(Pillow modes; "tensor" for data held as tensors), sizes (width x height) and value range in
[0, 1] after decoding, so a 16-bit scan read as all 1.0 or a class of blank images shows.
`ImageFolderDataModule(verify=True)` runs it when the fit sets up, and
`skip_unreadable=True` drops what it finds (with a printed count) instead of refusing. An image
folder whose `train/` has a class folder without images is refused before any file is read
(`robust_train.data.image_folder.EmptyClassFolderError`), by check-data as by `fit`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from math import inf
from typing import Any

__all__ = [
    "ClassTally",
    "SplitCheck",
    "UnreadableImageError",
    "check_datamodule",
    "summary_table",
    "tally_images",
    "unreadable_files",
]


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
class ClassTally:
    """The readable images of one class in one split: how many, their formats (Pillow modes, or
    "tensor"), their distinct sizes (width, height), the lowest and highest value over all of
    them (in [0, 1], as decoded) and how many are a single value throughout."""

    name: str
    n_items: int
    modes: tuple[str, ...]
    sizes: tuple[tuple[int, int], ...]
    value_min: float
    value_max: float
    n_constant: int


@dataclasses.dataclass(frozen=True)
class SplitCheck:
    """What `check_datamodule` found in one split: its size, the (name, reason) of each
    sample that could not be read (a file path for image folders, `split[index]` otherwise) and
    a `ClassTally` per class of what could."""

    split: str
    n_items: int
    unreadable: tuple[tuple[str, str], ...]
    classes: tuple[ClassTally, ...] = ()


class _Tally:
    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}

    def add(self, name: str, mode: str, pixels: Any) -> None:
        row = self.rows.setdefault(
            name, {"n": 0, "modes": set(), "sizes": set(), "lo": inf, "hi": -inf, "flat": 0}
        )
        low, high = float(pixels.min()), float(pixels.max())
        row["n"] += 1
        row["modes"].add(mode)
        row["sizes"].add((int(pixels.shape[-1]), int(pixels.shape[-2])))
        row["lo"], row["hi"] = min(row["lo"], low), max(row["hi"], high)
        row["flat"] += int(low == high)

    def classes(self, order: Sequence[str] = ()) -> tuple[ClassTally, ...]:
        names = [n for n in order if n in self.rows] + sorted(set(self.rows) - set(order))
        return tuple(
            ClassTally(
                n,
                self.rows[n]["n"],
                tuple(sorted(self.rows[n]["modes"])),
                tuple(sorted(self.rows[n]["sizes"])),
                self.rows[n]["lo"],
                self.rows[n]["hi"],
                self.rows[n]["flat"],
            )
            for n in names
        )


def tally_images(
    paths: Sequence[str], class_names: Sequence[str], decode: Callable[[str], Any]
) -> tuple[list[tuple[str, str]], tuple[ClassTally, ...]]:
    """Decode every file once: the (path, reason) of each that fails, and a `ClassTally` per
    class (in the order first met) of those that read. `decode(path)` returns an object with
    `pixels` (a (C, H, W) tensor) and `mode` (such as `robust_train.data.images.decode_image`).

    Examples:
        >>> import tempfile, os, functools
        >>> from PIL import Image
        >>> from robust_train.data.images import decode_image
        >>> folder = tempfile.mkdtemp()
        >>> paths = [os.path.join(folder, n) for n in ("a.png", "b.png", "c.png")]
        >>> Image.new("RGB", (6, 4), (255, 0, 0)).save(paths[0])
        >>> Image.new("L", (5, 5), 0).save(paths[1])
        >>> open(paths[2], "wb").write(b"not a png") and None
        >>> bad, (red, black) = tally_images(paths, ["red", "black", "black"], decode_image)
        >>> [os.path.basename(p) for p, _ in bad]
        ['c.png']
        >>> red.modes, red.sizes, (red.value_min, red.value_max), black.n_constant
        (('RGB',), ((6, 4),), (0.0, 1.0), 1)
    """
    bad, tally = [], _Tally()
    for path, name in zip(paths, class_names, strict=True):
        try:
            image = decode(path)
        except Exception as err:  # noqa: BLE001 - any failure to read the file is the finding
            bad.append((str(path), _reason(err)))
            continue
        tally.add(name, image.mode, image.pixels)
    return bad, tally.classes(list(dict.fromkeys(class_names)))


def _sizes(sizes: Sequence[tuple[int, int]]) -> str:
    if len(sizes) == 1:
        return f"{sizes[0][0]}x{sizes[0][1]}"
    widths, heights = [w for w, _ in sizes], [h for _, h in sizes]
    return f"{min(widths)}-{max(widths)} x {min(heights)}-{max(heights)} ({len(sizes)} sizes)"


def summary_table(checks: Sequence[SplitCheck]) -> list[str]:
    """The lines of one table, a row per split and class: images, formats, sizes (width x
    height), value range, and images that are a single value throughout (when any).

    Examples:
        >>> row = ClassTally("cat", 3, ("I;16",), ((40, 30),), 0.0, 0.0625, 0)
        >>> print("\\n".join(summary_table([SplitCheck("train", 3, (), (row,))])))
        split  class  images  formats  sizes (w x h)  values
        train  cat         3  I;16     40x30          0.000-0.062
    """
    rows: list[tuple[str, ...]] = [
        ("split", "class", "images", "formats", "sizes (w x h)", "values")
    ]
    constant = any(t.n_constant for c in checks for t in c.classes)
    for check in checks:
        for t in check.classes:
            row = (
                check.split,
                t.name,
                str(t.n_items),
                ",".join(t.modes),
                _sizes(t.sizes),
                f"{t.value_min:.3f}-{t.value_max:.3f}",
            )
            rows.append(row + ((str(t.n_constant),) if constant else ()))
    if constant:
        rows[0] += ("single-valued",)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {2}  # counts align right
    return [
        "  ".join(
            (cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]))
            for i, cell in enumerate(r)
        ).rstrip()
        for r in rows
    ]


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


def _check_items(split: str, dataset: Any, names: Sequence[str]) -> SplitCheck:
    bad, tally = [], _Tally()
    for index in range(len(dataset)):
        try:
            item = dataset[index]
        except Exception as err:  # noqa: BLE001 - any failure to read the item is the finding
            bad.append((f"{split}[{index}]", _reason(err)))
            continue
        if isinstance(item, (tuple, list)) and len(item) >= 2 and hasattr(item[0], "shape"):
            label = int(item[1])
            name = names[label] if 0 <= label < len(names) else str(label)
            tally.add(name, "tensor", item[0])
    return SplitCheck(split, len(dataset), tuple(bad), tally.classes(names))


def _class_names(datamodule: Any) -> list[str]:
    try:
        return [str(name) for name in datamodule.class_names]
    except Exception:  # noqa: BLE001 - a module that does not name its classes: labels are used
        return []


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
    checks, names = [], _class_names(datamodule)
    for split in ("train", "val", "test"):
        dataset = getattr(datamodule, f"{split}_set", None)
        if dataset is not None:
            checks.append(_check_items(split, dataset, names))
    return checks
