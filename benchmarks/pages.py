"""The benchmark results as data, and the page generated from them.

Each benchmark keeps one record, `benchmarks/results/NAME.json`: the latest full run of
`python -m benchmarks run NAME` (`bench_utils.Record.as_dict`: title, command, machine, device,
start, load average, seconds, its sections as printed); a run on a GPU keeps its own,
`NAME_cuda.json`, beside the CPU one. A full run replaces its benchmark's record and
rewrites `benchmarks/RESULTS.md` from all of them; `python -m benchmarks page` rewrites the page
alone. The page is the records rendered in registry order (a record whose name is not a
registered benchmark, such as a summary written by hand, follows them by name), so it is the
same bytes for the same records.
"""

from __future__ import annotations

import argparse
import datetime
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PAGE = HERE / "RESULTS.md"
RESULTS_DIR = HERE / "results"
HEADER = """# Benchmark results

Generated from the records in `results/` by `python -m benchmarks page`: do not edit it by hand.
Each benchmark keeps the record of its latest full run (`python -m benchmarks run NAME` without
`--quick`), which replaces the one before and rewrites this page; earlier runs are in the git
history. How the numbers are taken and how to read a record: [README.md](README.md).
"""


def records_dir(page: Path) -> Path:
    """The folder of records a page is generated from: `results/` beside the page."""
    return page.parent / "results"


def render_record(record: Mapping[str, Any]) -> str:
    """One record as its markdown section: heading with the start time, then the command,
    machine, load average and duration (a record written by hand, such as a summary, may leave
    them out), then its sections."""
    start = datetime.datetime.fromisoformat(record["started"])
    quick = " (quick)" if record.get("quick") else ""
    device = record.get("device", "cpu")
    where = "" if device == "cpu" else f" on {device}"
    head = [f"## {record['title']}{where}{quick} — {start:%Y-%m-%d %H:%M} UTC", ""]
    if "command" in record:
        load = record["load_average"]
        head += [
            f"- command: `{record['command']}`",
            f"- machine: {record['machine']}",
            f"- load average (1, 5, 15 min): {load['start']} at start, {load['end']} at end; "
            f"run took {record['seconds']:.0f} s",
            "",
        ]
    return "\n".join(head) + "\n" + "\n\n".join(record["sections"]) + "\n"


def read_records(folder: Path) -> dict[str, dict[str, Any]]:
    """Every record of `folder` by name (the file's stem); none when the folder is missing."""
    if not folder.is_dir():
        return {}
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def render_page(records: Mapping[str, Mapping[str, Any]], order: Sequence[str]) -> str:
    """The page: the header, the benchmarks of `order` without a record named, then one section
    per record in `page_order`."""
    names = page_order(records, order)
    missing = [n for n in order if n not in records]
    header = HEADER
    if missing:
        header += "\nNo full run recorded: " + ", ".join(f"`{n}`" for n in missing) + ".\n"
    return "\n".join([header, *(render_record(records[n]) for n in names)])


def record_name(title: str, device: str) -> str:
    """The name of a benchmark's record: its title on the CPU, `TITLE_DEVICE` on another device
    (a GPU run does not replace the CPU record)."""
    return title if device == "cpu" else f"{title}_{device}"


def registry_order() -> list[str]:
    """The registered benchmarks that record through `bench_utils.Record`, in registry order."""
    from benchmarks.registry import BENCHMARKS

    return [name for name, entry in BENCHMARKS.items() if entry.json]


def page_order(records: Mapping[str, Any], order: Sequence[str]) -> list[str]:
    """The names of `records` in page order: each name of `order` followed by its records on
    other devices, then the rest by name."""
    names = []
    for name in order:
        names += [name] if name in records else []
        names += sorted(n for n in records if n.startswith(f"{name}_") and n not in order)
    return names + sorted(n for n in records if n not in names)


def write_page(page: Path = PAGE) -> Path:
    """Rewrite `page` from the records in `records_dir(page)`; returns `page`."""
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render_page(read_records(records_dir(page)), registry_order()))
    return page


def save_record(record: Mapping[str, Any], page: Path = PAGE) -> Path:
    """Store `record` as its benchmark's record (replacing the one before) and rewrite `page`.

    Returns:
        The path of the record written.
    """
    folder = records_dir(page)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record_name(record['title'], record.get('device', 'cpu'))}.json"
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    write_page(page)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m benchmarks page [--page PATH]`: rewrite the results page from its records."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks page",
        description="rewrite benchmarks/RESULTS.md from the records in benchmarks/results/",
    )
    parser.add_argument("--page", type=Path, default=PAGE, help="the page to write")
    args = parser.parse_args(argv)
    if not records_dir(args.page).is_dir():
        parser.error(f"argument --page: no records folder {records_dir(args.page)} beside it")
    print(f"wrote {write_page(args.page)}")
    return 0
