"""`robust-train assets`: the configs and checkpoints that ship with the package.

    robust-train assets list                                   every shipped file
    robust-train assets path mnist5k_robust.ckpt               its path (for scripts)
    robust-train assets copy configs/mnist5k_baseline.yaml .   a copy to edit

A shipped file is named by its path in the list (`configs/mnist5k_baseline.yaml`), by its file
name (`mnist5k_baseline.yaml`) or by its stem where only one file has it (`mnist5k_robust`).
Every command takes these names where it takes a file (`fit --config mnist5k_baseline`,
`evaluate --ckpt mnist5k_robust`); a local file of the same name wins over the shipped one
(`robust_train.core.resources`, which is also the Python interface: `list_shipped()`,
`shipped_config(name)`, `shipped_checkpoint(name)`, `copy_shipped(name, dest)`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from robust_train.core.resources import (
    KINDS,
    assets_dir,
    copy_shipped,
    list_shipped,
    shipped_path,
)

__all__ = ["assets_main", "listing"]

USES = {
    "configs": "robust-train fit --config NAME; `robust-train assets copy NAME .` to edit one",
    "checkpoints": "robust-train evaluate --ckpt NAME; load_classifier(NAME) in Python",
}


class _Parser(argparse.ArgumentParser):
    """argparse whose errors raise one line (robust_train.app.cli prints it, exit code 2); unlike
    robust_train.app.settings_flags.CommandParser it imports no PyTorch, so the command starts in
    a fraction of a second."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        raise ValueError(f"{message} (see `{self.prog} --help`)")


def _size(path: Path) -> str:
    size = path.stat().st_size
    return f"{size / 1024:.1f} KiB" if size < 1024**2 else f"{size / 1024**2:.2f} MiB"


def _summary(path: Path) -> str:
    """The first comment line of a config (what it trains), else ''."""
    if path.suffix != ".yaml":
        return ""
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            text = line.lstrip("# ").strip()
            return text if len(text) <= 70 else text[:67] + "..."
        if line.strip():
            break
    return ""


def listing() -> str:
    """The text of `robust-train assets list`: each kind, then its files with size and summary.

    Examples:
        >>> "checkpoints/mnist5k_robust.ckpt" in listing()
        True
    """
    lines = []
    for kind in KINDS:
        names = list_shipped(kind)
        width = max(map(len, names), default=0)
        lines.append(f"{kind} ({USES[kind]}):")
        for name in names:
            path = assets_dir() / name
            lines.append(f"  {name:<{width}}  {_size(path):>9}  {_summary(path)}".rstrip())
        lines.append("")
    lines.append(f"folder: {assets_dir()}")
    return "\n".join(lines)


def _parser() -> _Parser:
    parser = _Parser(
        prog="robust-train assets",
        description="The configs and checkpoints that ship with the package: list, locate, copy.",
    )
    sub = parser.add_subparsers(dest="action", required=True, metavar="{list,path,copy}")
    sub.add_parser("list", help="every shipped config and checkpoint, with size and summary")
    path = sub.add_parser("path", help="the path of a shipped file")
    path.add_argument("name", help="e.g. mnist5k_robust.ckpt or configs/mnist5k_baseline.yaml")
    copy = sub.add_parser("copy", help="copy a shipped file (to edit a config, say)")
    copy.add_argument("name", help="e.g. configs/mnist5k_baseline.yaml")
    copy.add_argument("dest", nargs="?", default=".", help="a folder or a file path (default .)")
    copy.add_argument("--overwrite", action="store_true", help="replace an existing file")
    return parser


def assets_main(argv: list[str]) -> int:
    """`robust-train assets list|path|copy ...`; returns the exit code."""
    args = _parser().parse_args(argv)
    if args.action == "list":
        print(listing())
    elif args.action == "path":
        print(shipped_path(args.name))
    else:
        target = copy_shipped(args.name, args.dest, overwrite=args.overwrite)
        print(f"wrote {target}")
    return 0
