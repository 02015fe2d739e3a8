"""Every file the package writes goes through here: checked first, written whole or not at all.

`write_text`, `write_bytes`, `write_json` and `write_with` (for writers that take a path or a
stream: `torch.save`, `Figure.savefig`) write to a hidden temporary file in the destination's own
folder and then rename it over the destination (`os.replace`, atomic on one file system), so a
reader, or a process killed mid-write, never sees a truncated file: the destination is the old
file, the new one, or absent. The rules, checked before anything is written (and again before the
rename):

- a destination that is a symlink is refused, naming it and where it points: nothing is ever
  written through a link (not even with `overwrite=True`);
- an existing destination is refused unless `overwrite=True` (without it the new file is put in
  place with `os.link`, which fails if the name was taken meanwhile);
- a destination that is a folder, or whose folder is a file, is refused;
- a destination that exists and is not a regular file (a device node such as /dev/null, a FIFO,
  a socket) is refused, even with `overwrite=True`: it is never replaced by a file.

A write that fails (a full disk: `DiskFullError`, one line naming the destination) leaves the
destination as it was, removes its temporary file and the folders the write created.

`check_output` and `check_output_folder` run the same checks on their own, so a command can refuse
a bad `--out` before any work. Errors are `OutputError` (a FileExistsError: the console script
prints one line, exit code 2) naming the flag when one is given. A write killed by SIGKILL can
leave its temporary file (`.NAME.<pid>.<random>.partial...`) beside the destination; the next
write of that destination removes those whose process is gone.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = [
    "DiskFullError",
    "NotARegularFileError",
    "OutputError",
    "check_input",
    "check_output",
    "check_output_folder",
    "check_results_folder",
    "partial_files",
    "special_kind",
    "write_bytes",
    "write_json",
    "write_stream",
    "write_text",
    "write_with",
]

PARTIAL = ".partial"


class OutputError(FileExistsError):
    """A destination that must not be written: a symlink, an existing file without `overwrite`,
    a folder where a file goes (a user error: one line, exit code 2)."""

    user_error = True


class DiskFullError(OSError):
    """A write that found no space left on its file system (or over quota): a user condition,
    one line naming the destination, exit code 2; nothing was written."""

    user_error = True


FULL = (errno.ENOSPC, errno.EDQUOT)
SPECIAL = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
}


def special_kind(path: str | os.PathLike[str]) -> str | None:
    """What `path` is when it exists and is neither a regular file, a folder nor a symlink (the
    link itself is looked at, never followed): "a FIFO (named pipe)", "a character device", ...;
    None otherwise.

    Examples:
        >>> special_kind("/dev/null")
        'a character device'
        >>> special_kind("/no/such/file") is None
        True
    """
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
        return None
    return SPECIAL.get(stat.S_IFMT(mode), "not a regular file")


class NotARegularFileError(OSError):
    """A file to read that is a FIFO, a device node or a socket: never opened (a FIFO would
    wait for a writer forever, /dev/zero never ends); a user error, one line, exit code 2."""

    user_error = True


def check_input(path: str | os.PathLike[str], flag: str | None = None) -> Path:
    """Refuse, before opening it, a file to read that exists and is not a regular file (a
    symlink is followed: a link to a regular file is fine). A missing file or a folder is left
    to the caller's own message.

    Examples:
        >>> check_input("/dev/zero", "--config")
        Traceback (most recent call last):
        ...
        robust_train.core.files.NotARegularFileError: `--config` '/dev/zero' is a character ...
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return path
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return path
    kind = SPECIAL.get(stat.S_IFMT(mode), "not a regular file")
    raise NotARegularFileError(
        f"{_name(path, flag)} is {kind}, not a regular file; it is not opened"
    )


def _name(path: Path, flag: str | None) -> str:
    return f"`{flag}` {str(path)!r}" if flag else repr(str(path))


def check_output_folder(folder: str | os.PathLike[str], flag: str | None = None) -> Path:
    """Refuse an output folder that is a file, sits below a file, or cannot be written to; the
    folder itself need not exist (it is created when the first file is written).

    Examples:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> check_output_folder(root / "new" / "out") == root / "new" / "out"
        True
        >>> _ = (root / "f").write_text("x")
        >>> check_output_folder(root / "f", "--out")
        Traceback (most recent call last):
        ...
        robust_train.core.files.OutputError: `--out` '...f' is a file, not a folder; ...
    """
    folder = Path(folder)
    hint = f"; pick another {flag}" if flag else ""
    for candidate in (folder, *folder.parents):
        if candidate.is_dir():
            if not os.access(candidate, os.W_OK | os.X_OK):
                raise OutputError(
                    f"{_name(folder, flag)}: {str(candidate)!r} is not writable{hint}"
                )
            return folder
        if candidate.exists() or candidate.is_symlink():
            what = "is a file, not a folder" if candidate == folder else (
                f"lies below {str(candidate)!r}, which is not a folder"
            )  # fmt: skip
            raise OutputError(f"{_name(folder, flag)} {what}{hint}")
    return folder


def check_output(
    path: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    flag: str | None = None,
    replace_link: bool = False,
) -> Path:
    """Refuse a destination file that is a symlink (unless `replace_link`), a folder, a device
    node, FIFO or socket (always), or exists (unless `overwrite`); its folder is checked with
    `check_output_folder`.

    Examples:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> check_output(root / "a.json").name
        'a.json'
        >>> (root / "link.json").symlink_to(root / "a.json")
        >>> check_output(root / "link.json", overwrite=True)
        Traceback (most recent call last):
        ...
        robust_train.core.files.OutputError: '...link.json' is a symlink (to '...a.json'); ...
    """
    path = Path(path)
    check_output_folder(path.parent, flag)
    kind = special_kind(path)
    if kind is not None:
        raise OutputError(
            f"{_name(path, flag)} is {kind}, not a regular file; it is never replaced by a "
            "file (not even with --overwrite): write elsewhere"
        )
    if path.is_symlink() and replace_link and overwrite:
        return path  # the link itself is replaced by the new file (os.replace), never followed
    if path.is_symlink():
        raise OutputError(
            f"{_name(path, flag)} is a symlink (to {os.readlink(path)!r}); files are never "
            "written through a link: remove it or write elsewhere"
        )
    if path.is_dir():
        raise OutputError(f"{_name(path, flag)} is a folder, not a file")
    if path.exists() and not overwrite:
        raise _exists(path, flag)
    return path


def check_results_folder(
    out: Path,
    outputs: Sequence[str],
    *,
    overwrite: bool,
    other_run: Callable[[Any], str | None],
    flag: str = "--out",
) -> bool:
    """Check a command's output folder and the files it writes there, before any work.

    Args:
        out: the folder (checked by `check_output_folder`).
        outputs: the names of the files the command writes in it.
        overwrite: the user asked to replace what is there (`--overwrite`).
        other_run: given the JSON of an existing `out / "results.json"` (None when unreadable),
            what makes it another run's ("other checkpoints (a.ckpt)"), or None for a re-run
            of the same one.
        flag: the command-line flag of `out`, named in errors.

    Returns:
        True when the files may be replaced: `overwrite`, or a re-run of the same run.

    Raises:
        OutputError: `out` holds another run's results, files there that the command did not
            write, or a symlink or folder where a file goes.

    Examples:
        >>> import tempfile
        >>> out = Path(tempfile.mkdtemp())
        >>> check_results_folder(out, ["results.json"], overwrite=False, other_run=lambda r: None)
        False
    """
    check_output_folder(out, flag)
    previous = out / "results.json"
    replace = overwrite
    if not overwrite and previous.is_file() and not previous.is_symlink():
        try:
            held = json.loads(previous.read_text())
        except (ValueError, OSError):
            held = None
        other = other_run(held)
        if other is not None:
            raise OutputError(
                f"`{flag}` {str(out)!r} holds the results of {other}; pick another {flag} or "
                "pass --overwrite"
            )
        replace = True
    for name in outputs:
        check_output(out / name, overwrite=replace, flag=flag)
    return replace


def _exists(path: Path, flag: str | None) -> OutputError:
    how = "pass --overwrite to replace it" if flag else "overwrite=True replaces it"
    return OutputError(f"{_name(path, flag)} exists; {how}")


def partial_files(path: str | os.PathLike[str]) -> list[Path]:
    """The temporary files writes of `path` left beside it (a write killed mid-way).

    Examples:
        >>> import tempfile
        >>> partial_files(Path(tempfile.mkdtemp()) / "results.json")
        []
    """
    path = Path(path)
    if not path.parent.is_dir():
        return []
    return sorted(path.parent.glob(f".{path.name}.*{PARTIAL}*"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, another user's
        return True
    return True


def _remove_stale(path: Path) -> None:
    for stale in partial_files(path):
        pid = stale.name[len(path.name) + 2 :].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                stale.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _place(
    tmp: Path, path: Path, overwrite: bool, flag: str | None, replace_link: bool = False
) -> None:
    """Put the finished `tmp` at `path` (checked again: a link or file may have appeared)."""
    check_output(path, overwrite=overwrite, flag=flag, replace_link=replace_link)
    if overwrite:
        os.replace(tmp, path)  # replaces a name, never writes through a link
        return
    try:
        os.link(tmp, path)  # fails if `path` was created meanwhile: nothing is clobbered
    except FileExistsError:
        raise _exists(path, flag) from None
    except OSError:  # no hard links on this file system
        os.replace(tmp, path)
    else:
        tmp.unlink()


def write_with(
    path: str | os.PathLike[str],
    writer: Callable[[Path], Any],
    *,
    overwrite: bool = False,
    flag: str | None = None,
    replace_link: bool = False,
) -> Path | None:
    """Call `writer(tmp)` to write a temporary file beside `path` (same suffix, so writers that
    pick a format by suffix, such as `Figure.savefig`, work), then put it in place atomically.

    Args:
        path: the destination.
        writer: writes the whole file to the path it is given; returning None (or False) means
            it had nothing to write: nothing is put in place.
        overwrite: replace an existing destination (never a symlink, a device node or a FIFO).
        flag: the command-line flag that named the destination, for errors.
        replace_link: with `overwrite`, a symlink at `path` is replaced by the new file (the
            link itself: its target is never written); for folders the package owns.

    Returns:
        `path`, or None when `writer` wrote nothing.

    Raises:
        OutputError: see `check_output`; nothing was written.
        DiskFullError: no space left (an OSError): the destination is as it was, and the
            temporary file and the folders this call created are removed.

    Examples:
        >>> import tempfile
        >>> dst = Path(tempfile.mkdtemp()) / "x.txt"
        >>> _ = write_with(dst, lambda tmp: tmp.write_text("hi"))
        >>> dst.read_text(), partial_files(dst)
        ('hi', [])
        >>> write_with(dst.with_name("none.txt"), lambda tmp: None) is None
        True
    """
    path = check_output(path, overwrite=overwrite, flag=flag, replace_link=replace_link)
    created = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(path)
        fd, name = tempfile.mkstemp(
            prefix=f".{path.name}.{os.getpid()}.", suffix=f"{PARTIAL}{path.suffix}",
            dir=path.parent,
        )  # fmt: skip
        os.close(fd)
    except BaseException:
        _remove_empty(created)
        raise
    tmp = Path(name)
    placed = False
    try:
        if writer(tmp) in (None, False):
            return None
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        _place(tmp, path, overwrite, flag, replace_link)
        placed = True
    except OSError as err:
        if getattr(err, "errno", None) in FULL:
            raise _disk_full(path, flag, err) from err
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if not placed:
            _remove_empty(created)
    return path


def _remove_empty(created: list[Path]) -> None:
    """Remove the folders a failed write created (deepest first), if they are empty."""
    for folder in created:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _disk_full(path: Path, flag: str | None, err: OSError) -> DiskFullError:
    try:
        info = os.statvfs(path.parent)
        free = f" ({info.f_bavail * info.f_frsize} bytes free)"
    except (OSError, AttributeError):  # no statvfs on Windows
        free = ""
    reason = os.strerror(err.errno).lower() if err.errno else "no space left"
    return DiskFullError(
        err.errno,
        f"cannot write {_name(path, flag)}: {reason} on its file system{free}; nothing was "
        "written: free some space or write elsewhere",
    )


def write_stream(
    path: str | os.PathLike[str],
    fill: Callable[[IO[bytes]], Any],
    *,
    overwrite: bool = False,
    flag: str | None = None,
    replace_link: bool = False,
) -> Path:
    """`write_with` for writers that take an open binary stream (`torch.save(obj, stream)`): a
    full disk then surfaces as the OSError it is (`DiskFullError`).

    Examples:
        >>> import tempfile
        >>> dst = Path(tempfile.mkdtemp()) / "x.bin"
        >>> write_stream(dst, lambda handle: handle.write(b"42")).read_bytes()
        b'42'
    """
    written = write_with(
        path, _stream_writer(fill), overwrite=overwrite, flag=flag, replace_link=replace_link
    )
    assert written is not None  # the stream writer always writes
    return written


class _Stream:
    """A binary stream that remembers the first OSError a write raised: a writer that calls
    `write` from C++ (`torch.save`) reports a failed write as its own RuntimeError."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self.handle.write(data)
        except OSError as err:
            self.error = self.error or err
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)


def _stream_writer(fill: Callable[[IO[bytes]], Any]) -> Callable[[Path], Path]:
    def writer(tmp: Path) -> Path:
        with open(tmp, "wb") as handle:
            stream = _Stream(handle)
            try:
                fill(stream)  # type: ignore[arg-type]
            except Exception as err:
                if stream.error is not None and stream.error is not err:
                    raise stream.error from err
                raise
        return tmp

    return writer


def write_bytes(
    path: str | os.PathLike[str], data: bytes, *, overwrite: bool = False, flag: str | None = None
) -> Path:
    """`write_with` for bytes."""
    return write_stream(path, lambda h: h.write(data), overwrite=overwrite, flag=flag)


def write_text(
    path: str | os.PathLike[str], text: str, *, overwrite: bool = False, flag: str | None = None
) -> Path:
    """`write_with` for text (UTF-8).

    Examples:
        >>> import tempfile
        >>> dst = Path(tempfile.mkdtemp()) / "summary.md"
        >>> _ = write_text(dst, "# one")
        >>> write_text(dst, "# two")
        Traceback (most recent call last):
        ...
        robust_train.core.files.OutputError: '...summary.md' exists; overwrite=True replaces it
        >>> _ = write_text(dst, "# two", overwrite=True); dst.read_text()
        '# two'
    """
    return write_bytes(path, text.encode("utf-8"), overwrite=overwrite, flag=flag)


def write_json(
    path: str | os.PathLike[str], obj: Any, *, overwrite: bool = False, flag: str | None = None
) -> Path:
    """`write_text` of `json.dumps(obj, indent=2)`."""
    return write_text(path, json.dumps(obj, indent=2), overwrite=overwrite, flag=flag)
