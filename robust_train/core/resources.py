"""The configs and checkpoints that ship inside the package, found by name.

The package carries them as package data (read with `importlib.resources`) in its `assets`
folder, laid out as a repository checkout lays them out at its top level:

    assets/configs/<name>.yaml        one LightningCLI config per experiment
    assets/checkpoints/<name>.ckpt    small exported checkpoints (`robust-train export`)

A shipped file is named by its path under that folder (`configs/mnist5k_baseline.yaml`), by its
file name (`mnist5k_baseline.yaml`) or by its stem (`mnist5k_robust`; a stem that a config and a
checkpoint share needs the kind: `shipped_config("mnist5k_baseline")`).
`list_shipped()` lists them; `shipped_config(name)` and `shipped_checkpoint(name)` give the path
of one; `copy_shipped(name, dest)` copies one out (to edit a config, say).

Every command applies one rule to a file the user names (`resolve_file`): a path that exists
(relative to the working folder) is used as it is, so a local file wins over a shipped one of the
same name; otherwise a name of a shipped file resolves to the packaged file, and one line on
stderr says so; anything else is left as it is (the command's "does not exist" error follows).
Relative paths inside a shipped config name files relative to the assets folder
(`init_checkpoint: checkpoints/mnist5k_baseline.ckpt`), never the working folder:
`shipped_overrides(config)` gives them as absolute paths.

Examples:
    >>> "checkpoints/mnist5k_robust.ckpt" in list_shipped()
    True
    >>> shipped_checkpoint("mnist5k_robust") == shipped_path("checkpoints/mnist5k_robust.ckpt")
    True
    >>> shipped_name(shipped_config("digits_baseline.yaml"))
    'configs/digits_baseline.yaml'
"""

from __future__ import annotations

import atexit
import contextlib
import difflib
import functools
import os
import sys
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "KINDS",
    "UnknownShippedFile",
    "assets_dir",
    "copy_shipped",
    "list_shipped",
    "resolve_file",
    "shipped_checkpoint",
    "shipped_config",
    "shipped_name",
    "shipped_overrides",
    "shipped_path",
]

# kind (the folder under assets/) -> the suffix of its files
KINDS: dict[str, str] = {"configs": ".yaml", "checkpoints": ".ckpt"}
NOUNS = {"configs": "config", "checkpoints": "checkpoint"}


class UnknownShippedFile(LookupError):
    """A name that names no shipped file (or more than one); the message lists the close ones."""

    user_error = True  # robust_train.app.cli: one line, exit code 2


@functools.cache
def assets_dir() -> Path:
    """The folder of the shipped files on the file system (extracted first, for the rest of the
    process, when the package is imported from an archive)."""
    stack = contextlib.ExitStack()
    atexit.register(stack.close)
    return Path(stack.enter_context(resources.as_file(resources.files("robust_train") / "assets")))


def list_shipped(kind: str | None = None) -> list[str]:
    """The names of the shipped files (`configs/x.yaml`, `checkpoints/y.ckpt`), sorted; only
    those of one kind when `kind` is "configs" or "checkpoints".

    Examples:
        >>> list_shipped("checkpoints")[2:4]
        ['checkpoints/digits_baseline.ckpt', 'checkpoints/digits_robust.ckpt']
    """
    kinds = KINDS if kind is None else {_check_kind(kind): KINDS[kind]}
    root = assets_dir()
    return sorted(
        f"{folder}/{file.name}"
        for folder, suffix in kinds.items()
        if (root / folder).is_dir()
        for file in (root / folder).iterdir()
        if file.suffix == suffix and file.is_file()
    )


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {sorted(KINDS)}, got {kind!r}")
    return kind


def _candidates(value: str | os.PathLike[str], kind: str | None) -> list[str]:
    """The shipped names `value` could mean: `[kind/]name[.suffix]` (no other folder, not
    absolute); [] when it has another form."""
    path = Path(value)
    if path.is_absolute() or not path.parts or len(path.parts) > 2:
        return []
    if len(path.parts) == 2:
        if path.parts[0] not in KINDS or kind not in (None, path.parts[0]):
            return []
        kind = path.parts[0]
    kinds = list(KINDS) if kind is None else [kind]
    name = path.name
    return [
        f"{k}/{name if Path(name).suffix else name + KINDS[k]}"
        for k in kinds
        if Path(name).suffix in ("", KINDS[k])
    ]


def _find(value: str | os.PathLike[str], kind: str | None) -> list[str]:
    shipped = set(list_shipped())
    return [name for name in _candidates(value, kind) if name in shipped]


def shipped_path(name: str | os.PathLike[str], kind: str | None = None) -> Path:
    """The path of the shipped file `name` (`configs/x.yaml`, `x.yaml`, or `x` with `kind`).

    Raises:
        UnknownShippedFile: (a LookupError) no shipped file of that name, or a stem that names
            both a config and a checkpoint; the message names the close names.

    Examples:
        >>> shipped_path("mnist5k_baseline")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        robust_train.core.resources.UnknownShippedFile: 'mnist5k_baseline' names both ...
    """
    if kind is not None:
        _check_kind(kind)
    found = _find(name, kind)
    if len(found) == 1:
        return assets_dir() / found[0]
    if found:
        raise UnknownShippedFile(
            f"{str(name)!r} names both {' and '.join(found)}; give the file name "
            f"({' or '.join(Path(f).name for f in found)})"
        )
    names = list_shipped(kind)
    close = difflib.get_close_matches(str(name), names + [Path(n).stem for n in names], n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    what = f"shipped {NOUNS[kind]}" if kind else "shipped file"
    raise UnknownShippedFile(
        f"no {what} {str(name)!r}{hint} (`robust-train assets list` lists them)"
    )


def shipped_config(name: str | os.PathLike[str]) -> Path:
    """The path of a shipped config: `shipped_config("mnist5k_baseline")`."""
    return shipped_path(name, "configs")


def shipped_checkpoint(name: str | os.PathLike[str]) -> Path:
    """The path of a shipped checkpoint: `shipped_checkpoint("mnist5k_robust")`."""
    return shipped_path(name, "checkpoints")


def shipped_name(path: str | os.PathLike[str]) -> str | None:
    """The shipped name of a file that lies in the assets folder (through a symlink, too), else
    None.

    Examples:
        >>> shipped_name("no/such/file.yaml") is None
        True
    """
    try:
        rel = Path(path).resolve().relative_to(assets_dir().resolve())
    except ValueError:
        return None
    name = rel.as_posix()
    return name if name in list_shipped() else None


def _stderr(message: str) -> None:
    print(f"robust-train: {message}", file=sys.stderr)


def resolve_file(
    value: str | os.PathLike[str],
    kind: str,
    *,
    what: str = "the file",
    announce: Callable[[str], None] | None = _stderr,
) -> str:
    """The file a user means by `value`: `value` itself when that path exists, else a local
    `value` + the kind's suffix (`mnist5k_baseline` -> ./mnist5k_baseline.yaml, as `robust-train
    assets copy` leaves it), else the shipped file it names (`announce` is told so, in one
    line), else `value` unchanged.

    Args:
        value: what the user gave (a path, or a shipped name such as `mnist5k_robust`).
        kind: "configs" or "checkpoints": what a bare stem names.
        what: how the message names the argument (e.g. "`--ckpt`").
        announce: called with the one-line message when a shipped file is used (default: print
            it on stderr); None says nothing.

    Examples:
        >>> resolve_file("mnist5k_robust", "checkpoints", announce=None) == str(
        ...     shipped_checkpoint("mnist5k_robust"))
        True
        >>> resolve_file("no_such.ckpt", "checkpoints")
        'no_such.ckpt'
    """
    _check_kind(kind)
    text = os.fspath(value)
    if os.path.exists(text):
        return text
    local = text + KINDS[kind]
    if not Path(text).suffix and os.path.isfile(local):
        return local
    found = _find(text, kind)
    if len(found) != 1:
        return text
    path = str(assets_dir() / found[0])
    if announce is not None:
        announce(f"{what} {text!r}: using the shipped {NOUNS[kind]} {path} (no such file here)")
    return path


def copy_shipped(
    name: str | os.PathLike[str], dest: str | os.PathLike[str] = ".", *, overwrite: bool = False
) -> Path:
    """Copy the shipped file `name` to `dest` (a folder, or the new file's path); return the copy.

    The copy is written like every file the package writes (`robust_train.core.files`): whole or
    not at all, never through a symlink (not even a dangling one, nor with `overwrite`), never
    over a device node or a FIFO.

    Raises:
        UnknownShippedFile: no such shipped file.
        FileExistsError: (`robust_train.core.files.OutputError`) the copy's path exists and
            `overwrite` is False, or it is a symlink, a folder or not a regular file.
    """
    from robust_train.core.files import write_bytes

    src = shipped_path(name)
    target = Path(dest)
    if target.is_dir() or os.fspath(dest).endswith(("/", os.sep)):
        target = target / src.name
    return write_bytes(target, src.read_bytes(), overwrite=overwrite, flag="dest")


def shipped_overrides(config: str | os.PathLike[str]) -> dict[str, str]:
    """The relative paths of a shipped config that name shipped files, as absolute paths, by
    dotted key (`{"model.init_checkpoint": "/.../assets/checkpoints/x.ckpt"}`); {} for a config
    that is not shipped. Lists are not searched.

    Examples:
        >>> found = shipped_overrides(shipped_config("mnist5k_finetune_lga"))
        >>> Path(found["model.init_checkpoint"]) == shipped_checkpoint("mnist5k_baseline")
        True
    """
    import yaml

    if shipped_name(config) is None:
        return {}
    content = yaml.safe_load(Path(config).read_text())
    return dict(_shipped_values(content, "")) if isinstance(content, Mapping) else {}


def _shipped_values(node: Mapping[str, Any], prefix: str) -> list[tuple[str, str]]:
    found = []
    for key, value in node.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            found += _shipped_values(value, dotted + ".")
        elif isinstance(value, str) and value and not Path(value).is_absolute():
            if shipped_name(assets_dir() / value) is not None:
                found.append((dotted, str(assets_dir() / value)))
    return found
