"""`robust_train.core.files`: every file the package writes is written whole (temporary file in
the same folder, then a rename), never through a symlink, and never over an existing file
without `overwrite`."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from robust_train.core.files import (
    OutputError,
    check_output,
    check_output_folder,
    partial_files,
    write_json,
    write_text,
    write_with,
)


def test_existing_files_are_replaced_only_with_overwrite(tmp_path: Path):
    dst = tmp_path / "deep" / "summary.md"
    write_text(dst, "one")  # the folders are created
    with pytest.raises(OutputError, match="summary.md' exists"):
        write_text(dst, "two")
    assert dst.read_text() == "one"
    write_text(dst, "two", overwrite=True)
    assert dst.read_text() == "two" and partial_files(dst) == []


@pytest.mark.parametrize("dangling", [False, True])
def test_a_symlink_destination_is_refused_even_with_overwrite(tmp_path: Path, dangling: bool):
    target = tmp_path / "precious.txt"
    if not dangling:
        target.write_text("keep me")
    link = tmp_path / "results.json"
    link.symlink_to(target)
    for overwrite in (False, True):
        with pytest.raises(OutputError, match=r"results\.json' is a symlink .*precious\.txt"):
            write_json(link, {"a": 1}, overwrite=overwrite, flag="--out")
    assert link.is_symlink()
    assert (target.read_text() == "keep me") if not dangling else not target.exists()


def test_folders_and_files_in_the_wrong_place_are_refused_naming_the_flag(tmp_path: Path):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(OutputError, match=r"`--out` '.*a_file' is a file, not a folder"):
        check_output_folder(tmp_path / "a_file", "--out")
    with pytest.raises(OutputError, match=r"lies below '.*a_file', which is not a folder"):
        check_output_folder(tmp_path / "a_file" / "sub", "--out")
    (tmp_path / "adir").mkdir()
    with pytest.raises(OutputError, match="is a folder, not a file"):
        check_output(tmp_path / "adir", overwrite=True)
    assert check_output(tmp_path / "new" / "x.json") == tmp_path / "new" / "x.json"


def test_the_destination_holds_the_old_file_until_the_new_one_is_complete(tmp_path: Path):
    dst = tmp_path / "results.json"
    write_text(dst, "old")
    seen = {}

    def writer(tmp: Path) -> Path:
        tmp.write_text("new, half written")
        seen["during"] = dst.read_text()
        seen["partials"] = [p.name for p in partial_files(dst)]
        return tmp

    write_with(dst, writer, overwrite=True)
    assert seen["during"] == "old" and len(seen["partials"]) == 1
    assert seen["partials"][0].startswith(f".results.json.{os.getpid()}.")
    assert dst.read_text() == "new, half written" and partial_files(dst) == []


def test_a_failing_writer_leaves_the_old_file_and_no_partial(tmp_path: Path):
    dst = tmp_path / "report.md"
    write_text(dst, "old")

    def failing(tmp: Path) -> Path:
        tmp.write_text("garbage")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_with(dst, failing, overwrite=True)
    assert dst.read_text() == "old" and partial_files(dst) == []


def test_a_file_that_appears_meanwhile_is_not_clobbered(tmp_path: Path):
    dst = tmp_path / "certify.png"

    def racing(tmp: Path) -> Path:
        dst.write_text("someone else's")  # created between the check and the rename
        tmp.write_text("ours")
        return tmp

    with pytest.raises(OutputError, match="exists"):
        write_with(dst, racing)
    assert dst.read_text() == "someone else's" and partial_files(dst) == []


def test_stale_partials_of_dead_processes_are_removed(tmp_path: Path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    dst = tmp_path / "small.ckpt"
    stale = tmp_path / f".small.ckpt.{dead.pid}.abc123.partial.ckpt"
    stale.write_bytes(b"truncated")
    mine = tmp_path / f".small.ckpt.{os.getpid()}.zzz.partial.ckpt"  # a live writer's: kept
    mine.write_bytes(b"in progress")
    write_text(dst, "done")
    assert not stale.exists() and mine.exists() and dst.read_text() == "done"


def test_written_files_have_ordinary_permissions(tmp_path: Path):
    dst = write_text(tmp_path / "x.txt", "x")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(dst.stat().st_mode) == 0o666 & ~mask
    assert json.loads(write_json(tmp_path / "y.json", {"k": [1]}).read_text()) == {"k": [1]}
