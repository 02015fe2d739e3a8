"""One runner for a registry of scripts: `list`, `run NAME [flags]` and (for studies) `page NAME`.

`python -m benchmarks` and `python -m experiments` are this runner over their own registries
(`benchmarks.registry.BENCHMARKS`, `experiments.registry.EXPERIMENTS`). `run` passes every flag
after NAME to the script's `main(argv)` unchanged, so each script keeps the flags it parses;
`json` entries are given `--json runs/<package>/NAME.json` (their results as data) unless the
flags name another file or ask not to write.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Entry:
    """One registered script.

    Attributes:
        module: dotted name of the module whose `main(argv)` runs it.
        summary: one line for `list`.
        page: the page it writes or feeds (a file beside the module), if any.
        write_page: "module:function" that writes the page from its results and prose files,
            called with `page`; None when the page is written by hand.
        json: whether `run` gives it `--json runs/<package>/NAME.json`.
    """

    module: str
    summary: str
    page: str | None = None
    write_page: str | None = None
    json: bool = False


def _call(target: str, page: str) -> Any:
    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)(page)


def _parser(prog: str, pages: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every registered name with its summary")
    # no -h of its own: `run NAME --help` is the script's help
    run = sub.add_parser(
        "run", help="run NAME; the flags after it go to the script", add_help=False
    )
    run.add_argument("name")
    if pages:
        page = sub.add_parser("page", help="write NAME's page from its results and prose")
        page.add_argument("name")
    return parser


def _listing(entries: Mapping[str, Entry]) -> str:
    width = max(map(len, entries))
    rows = []
    for name, entry in entries.items():
        page = f" [{entry.page}{', generated' if entry.write_page else ''}]" if entry.page else ""
        rows.append(f"{name:<{width}}  {entry.summary}{page}")
    return "\n".join(rows)


def json_flags(package: str, name: str, flags: Sequence[str]) -> list[str]:
    """`flags` plus `--json runs/<package>/<name>.json` unless they already say where or not to
    write."""
    if any(f in ("--json", "--no-write", "-h", "--help") or f.startswith("--json=") for f in flags):
        return list(flags)
    return [*flags, "--json", str(Path("runs") / package / f"{name}.json")]


def main(prog: str, entries: Mapping[str, Entry], argv: Sequence[str] | None = None) -> int:
    """The command line of a registry: `list`, `run NAME [flags]`, `page NAME`.

    Raises:
        SystemExit: an unknown name (code 2, naming it and the known ones).
    """
    pages = any(e.page for e in entries.values())
    args, rest = _parser(prog, pages).parse_known_args(argv)
    if args.command == "list":
        print(_listing(entries))
        return 0
    if args.name not in entries:
        known = ", ".join(entries)
        _parser(prog, pages).error(f"argument name: {args.name!r} is not registered ({known})")
    entry = entries[args.name]
    if args.command == "page":
        if rest:
            _parser(prog, pages).error(f"page takes no flags, got {' '.join(rest)}")
        return _page(args.name, entry, Path(importlib.import_module(entry.module).__file__ or ""))
    flags = json_flags(prog.split()[-1], args.name, rest) if entry.json else rest
    runner: Callable[[list[str]], Any] = importlib.import_module(entry.module).main
    result = runner(flags)
    return result if isinstance(result, int) else 0


def _page(name: str, entry: Entry, module_file: Path) -> int:
    if entry.page is None:
        print(f"{name} has no page")
        return 0
    if entry.write_page is None:
        where = module_file.parent / entry.page
        print(f"{where.relative_to(Path.cwd()) if where.is_relative_to(Path.cwd()) else where}"
              " is written by hand: it has no results file to be generated from")  # fmt: skip
        return 0
    print(f"wrote {_call(entry.write_page, entry.page)}")
    return 0
