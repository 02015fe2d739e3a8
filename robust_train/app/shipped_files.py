"""Shipped names on the command line: every argument that names a file accepts a shipped one.

`file_argument(kind, what)` is the argparse `type` of such an argument (`--ckpt`, `--data-config`,
`--natural`, ...). It applies `robust_train.core.resources.resolve_file`: a file that exists
here wins; a path that does not exist here but names a shipped file
(`checkpoints/mnist5k_robust.ckpt`, `mnist5k_robust.ckpt`, `mnist5k_robust`) is the packaged
file, and one line on stderr says so; anything else is left for the command's own error.

`lightning_arguments(argv)` does the same for the LightningCLI commands' `--config` / `-c` and
`--ckpt_path` (refusing, before anything opens them, a FIFO or device node and a config whose YAML
aliases would expand beyond a small bound), and follows each shipped config with the flags that
point its relative paths into the package
(`--model.init_checkpoint=<assets>/checkpoints/mnist5k_baseline.ckpt`), so a shipped fine-tune
starts from the shipped checkpoint whatever the working folder holds. Flags and configs given
after it still override those values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from robust_train.core.files import check_input
from robust_train.core.resources import resolve_file, shipped_overrides
from robust_train.core.yaml_bounds import check_yaml_aliases

__all__ = ["LIGHTNING_FILE_FLAGS", "file_argument", "lightning_arguments"]

# LightningCLI flags that name a file -> the kind of shipped file a name there means
LIGHTNING_FILE_FLAGS = {"--config": "configs", "-c": "configs", "--ckpt_path": "checkpoints"}
SUBCOMMANDS = ("fit", "validate", "test", "predict")


def file_argument(kind: str, what: str) -> Callable[[str], str]:
    """An argparse `type`: the value as `resolve_file(value, kind, what=what)` gives it.

    Examples:
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> _ = parser.add_argument("--ckpt", type=file_argument("checkpoints", "`--ckpt`"))
        >>> parser.parse_args(["--ckpt", "mine.ckpt"]).ckpt
        'mine.ckpt'
    """

    def shipped_or_local(value: str) -> str:
        return resolve_file(value, kind, what=what)

    return shipped_or_local


def _check_file(value: str, flag: str, kind: str) -> None:
    """Refuse, before LightningCLI opens it, a `--config` or `--ckpt_path` that is a FIFO, a
    device node or a socket (a FIFO would wait forever), and a config whose YAML aliases expand
    beyond the bound (robust_train.core.yaml_bounds); a value that names no file is left to
    LightningCLI (a `--config` may be YAML text)."""
    path = check_input(value, flag)
    if kind != "configs":
        return
    if path.is_file():
        text = path.read_text(errors="replace")
        check_yaml_aliases(text, f"`{flag}` {value!r}")
    elif not path.exists():
        check_yaml_aliases(value, f"`{flag}`")


def lightning_arguments(argv: Sequence[str]) -> list[str]:
    """LightningCLI arguments with shipped names resolved and shipped configs' relative paths
    pointed into the package. With a subcommand first (`fit ...`), only its arguments are read.

    Examples:
        >>> args = lightning_arguments(["fit", "--config", "configs/mnist5k_finetune_lga.yaml"])
        >>> args[3].startswith("--model.init_checkpoint=") and args[3].endswith(
        ...     "assets/checkpoints/mnist5k_baseline.ckpt")
        True
        >>> lightning_arguments(["fit", "--ckpt_path", "last", "--trainer.max_epochs=1"])
        ['fit', '--ckpt_path', 'last', '--trainer.max_epochs=1']
    """
    args = list(argv)
    start = 1 if args and args[0] in SUBCOMMANDS else 0
    out, i = args[:start], start
    while i < len(args):
        flag, equals, value = args[i].partition("=")
        kind = LIGHTNING_FILE_FLAGS.get(flag)
        if kind is None or (not equals and i + 1 == len(args)):
            out.append(args[i])
            i += 1
            continue
        if not equals:
            value = args[i + 1]
        resolved = resolve_file(value, kind, what=f"`{flag}`")
        _check_file(resolved, flag, kind)
        out += [f"{flag}={resolved}"] if equals else [flag, resolved]
        if kind == "configs":
            out += [f"--{key}={path}" for key, path in shipped_overrides(resolved).items()]
        i += 1 if equals else 2
    return out
