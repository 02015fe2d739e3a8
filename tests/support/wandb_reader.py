"""Read an offline W&B run back from disk (test helper; no network, no wandb API).

An offline run stores every record in `run-<id>.wandb`, a LevelDB-style log: a 7-byte file header
(b":W&B", magic 0xBEE1 little-endian, version 0), then 32 KiB blocks of chunks. Each chunk has a
7-byte header (CRC-32 of type byte + data, little-endian uint32; data length uint16; type uint8:
1 full, 2 first, 3 middle, 4 last) followed by its data; a block tail shorter than a chunk
header is zero padding. A whole record is a serialized `wandb_internal_pb2.Record`.

wandb 0.31 writes this file from its Go core and no longer ships the Python reader
(`wandb.sdk.internal.datastore`), hence this small parser.
"""

from __future__ import annotations

import json
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2

_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
_BLOCK = 32768
_CHUNK_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    """What a run wrote: history rows (dicts key -> decoded value), summary, config, files dir."""

    path: Path
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    record_types: list[str] = field(default_factory=list)

    @property
    def files_dir(self) -> Path:
        return self.path.parent / "files"

    def column(self, key: str) -> list[Any]:
        """Values of `key` in the history rows that have it, in order."""
        return [row[key] for row in self.history if key in row]


def read_records(path: str | Path) -> list[bytes]:
    """The raw records of a .wandb file, checking the header and every chunk's CRC."""
    data = Path(path).read_bytes()
    if len(data) < len(_HEADER):
        return []  # created, header not written yet
    if data[: len(_HEADER)] != _HEADER:
        raise ValueError(f"{path}: not a W&B log (header {data[:7]!r})")
    records: list[bytes] = []
    pending: bytearray | None = None
    pos = len(_HEADER)
    while pos < len(data):
        left_in_block = _BLOCK - pos % _BLOCK
        if left_in_block < _CHUNK_HEADER:
            pos += left_in_block  # zero padding at the end of a block
            continue
        if pos + _CHUNK_HEADER > len(data):
            break
        checksum, length, kind = struct.unpack("<IHB", data[pos : pos + _CHUNK_HEADER])
        if checksum == 0 and length == 0 and kind == 0:
            pos += left_in_block  # zeroed tail of a block (a writer that padded the block)
            continue
        start = pos + _CHUNK_HEADER
        chunk = data[start : start + length]
        if len(chunk) < length:
            break  # truncated last record (a run still writing)
        expected = zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF
        if expected != checksum:
            raise ValueError(f"{path}: bad checksum at byte {pos}")
        pos = start + length
        if kind == _FULL:
            records.append(bytes(chunk))
        elif kind == _FIRST:
            pending = bytearray(chunk)
        elif kind == _MIDDLE and pending is not None:
            pending += chunk
        elif kind == _LAST and pending is not None:
            pending += chunk
            records.append(bytes(pending))
            pending = None
        else:
            raise ValueError(f"{path}: unexpected chunk type {kind} at byte {pos}")
    return records


def _items(items: Any) -> dict[str, Any]:
    out = {}
    for item in items:
        key = "/".join(item.nested_key) if item.nested_key else item.key
        out[key] = json.loads(item.value_json)
    return out


def read_run(run_dir_or_file: str | Path, *, timeout: float = 30.0) -> OfflineRun:
    """Parse an offline run: a `run-*.wandb` file, an `offline-run-*` folder, or a save_dir
    holding exactly one run (searched recursively).

    wandb's core process may still be writing the file when `finish()` returns, so this waits
    (up to `timeout` seconds) for the run's closing `exit` record; a run still open after that
    is returned as far as it was written.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            run = _parse_run(run_dir_or_file)
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise
        else:
            if "exit" in run.record_types or time.monotonic() > deadline:
                return run
        time.sleep(0.2)


def _parse_run(run_dir_or_file: str | Path) -> OfflineRun:
    path = Path(run_dir_or_file)
    if path.is_dir():
        found = sorted(path.rglob("run-*.wandb"))
        if len(found) != 1:
            raise FileNotFoundError(f"expected one run-*.wandb under {path}, found {found}")
        path = found[0]
    run = OfflineRun(path=path)
    for raw in read_records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        run.record_types.append(kind or "")
        if kind == "history":
            run.history.append(_items(record.history.item))
        elif kind == "summary":
            run.summary.update(_items(record.summary.update))
            for item in record.summary.remove:
                run.summary.pop("/".join(item.nested_key) if item.nested_key else item.key, None)
        elif kind == "config":
            run.config.update(_items(record.config.update))
    return run
