"""`robust-train`: one entry point that dispatches to every command.

    robust-train --help                        every command, one line each
    robust-train fit --config configs/digits_smoothness.yaml
    robust-train fit --config configs/digits_smoothness.yaml --ckpt_path last    # resume
    robust-train evaluate --ckpt checkpoints/digits_smoothness/latest/best.ckpt

fit/validate/test/predict are LightningCLI subcommands (robust_train.app.lightning_cli); demo,
evaluate, compare and export are plain commands. This module only dispatches: each command's
module is imported when that command runs. A user error (a bad value, a missing file, a corrupt or
mismatched checkpoint) prints one line `robust-train: error: ...` on stderr and exits with 2; the
traceback is shown with `--debug` (anywhere on the command line) or ROBUST_TRAIN_DEBUG=1.

The working folder is searched (last, after the installed packages) for the class paths a user
writes in a config (`fit --config`, `check-data`): `class_path: mynet.Net` finds ./mynet.py, as
`python -m` would. A class path recorded in a checkpoint never imports from there without
`--trust-class-path` (robust_train.core.trust.check_recorded_import).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

PROG = "robust-train"
LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")
USER_CONFIG_COMMANDS = (
    *LIGHTNING_COMMANDS,
    "check-data",
)  # class paths come from the user's config
# name -> (one-line description, "module:function" taking argv and returning an exit code)
COMMANDS: dict[str, tuple[str, str]] = {
    "fit": (
        "train a model from a config (LightningCLI; --ckpt_path last resumes)",
        "robust_train.app.lightning_cli:run_subcommand",
    ),
    "validate": (
        "one pass over the validation set of a checkpoint",
        "robust_train.app.lightning_cli:run_subcommand",
    ),
    "test": (
        "one pass over the test set of a checkpoint",
        "robust_train.app.lightning_cli:run_subcommand",
    ),
    "predict": (
        "class probabilities for the predict set",
        "robust_train.app.lightning_cli:run_subcommand",
    ),
    "demo": (
        "train a natural model on MNIST-5k, fine-tune it robust, attack both, write a report",
        "robust_train.app.demo:main",
    ),
    "evaluate": (
        "robustness suite (attacks, Lipschitz, fidelity) on one checkpoint or --model/--weights",
        "robust_train.app.commands:evaluate_main",
    ),
    "compare": (
        "the same suite on two or more checkpoints, side by side, with plots",
        "robust_train.app.commands:compare_main",
    ),
    "export": (
        "strip a fit checkpoint to weights and metadata for sharing",
        "robust_train.app.commands:export_main",
    ),
    "check-data": (
        "read every image of a config's data before training; list the files that cannot be read",
        "robust_train.app.check_data:check_data_main",
    ),
    "certify": (
        "certified explanation robustness (randomized smoothing) beside the L2 attack",
        "robust_train.app.certify_command:certify_main",
    ),
    "assets": (
        "the configs and checkpoints shipped with the package: list, path, copy",
        "robust_train.app.assets_command:assets_main",
    ),
}
# Exceptions that mean "the input is wrong" (exit 2); anything else is an internal error (exit 1).
USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    LookupError,
    OSError,
    FloatingPointError,
    argparse.ArgumentError,
)


def help_text() -> str:
    """The top-level help: every command with its one-line description.

    Examples:
        >>> all(name in help_text() for name in COMMANDS)
        True
    """
    width = max(map(len, COMMANDS)) + 2
    lines = [
        f"usage: {PROG} <command> [options]     ({PROG} <command> --help: that command's options)",
        "",
        "Train image classifiers with robust explanations, and measure that robustness.",
        "",
        "commands:",
    ]
    lines += [f"  {name:<{width}}{description}" for name, (description, _) in COMMANDS.items()]
    lines += [
        "",
        "options:",
        "  -h, --help  show this help and exit",
        "  --debug     show the full traceback of an error (also ROBUST_TRAIN_DEBUG=1)",
    ]
    return "\n".join(lines)


def suggest(word: str) -> str:
    """'unknown command' message with the closest commands.

    Examples:
        >>> suggest("exprot")
        "unknown command 'exprot'; did you mean 'export'?"
    """
    if word.startswith("-"):
        return (
            f"the command comes first: {PROG} <command> [options] (got {word!r}; see {PROG} --help)"
        )
    close = difflib.get_close_matches(word, list(COMMANDS), n=2, cutoff=0.6)
    if close:
        return (
            f"unknown command {word!r}; did you mean " + " or ".join(repr(c) for c in close) + "?"
        )
    return f"unknown command {word!r}; choose from {', '.join(COMMANDS)}"


def one_line(err: BaseException) -> str:
    """The most specific one-line message of an exception and its causes.

    Wrappers (jsonargparse's "Does not validate against any of the Union subtypes" and the like)
    span several lines; the error they wrap (say "`weight` must be >= 0, got -1.0") is one line.

    Examples:
        >>> try:
        ...     try:
        ...         raise ValueError("`weight` must be >= 0, got -1.0")
        ...     except ValueError as inner:
        ...         raise ValueError("Does not validate\\nErrors:\\n  - ...") from inner
        ... except ValueError as outer:
        ...     one_line(outer)
        '`weight` must be >= 0, got -1.0'
    """
    chain: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    for candidate in chain:
        text = str(candidate).strip()
        if text and "\n" not in text:
            return (
                text
                if isinstance(candidate, USER_ERRORS)
                or candidate is err
                or getattr(candidate, "user_error", False)
                else f"{type(candidate).__name__}: {text}"
            )
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def _target(name: str) -> Callable[[list[str]], Any]:
    module_name, _, function = COMMANDS[name][1].partition(":")
    return getattr(importlib.import_module(module_name), function)


def _run(name: str, argv: list[str], debug: bool) -> int:
    try:
        if name in LIGHTNING_COMMANDS:
            return int(_target(name)([name, *argv]) or 0)
        return int(_target(name)(argv) or 0)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if debug:
            raise
        user = (
            isinstance(err, USER_ERRORS)
            or getattr(err, "user_error", False)
            or _is_jsonargparse_error(err)
        )
        suffix = "" if user else " (internal error; rerun with --debug for the traceback)"
        print(f"{PROG}: error: {one_line(err)}{suffix}", file=sys.stderr)
        return 2 if user else 1


def _is_jsonargparse_error(err: BaseException) -> bool:
    return type(err).__module__.startswith(("jsonargparse", "yaml"))  # a config that does not parse


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `robust-train` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("ROBUST_TRAIN_DEBUG", "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    if argv[:1] and argv[0] in USER_CONFIG_COMMANDS and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())  # last: installed packages are never shadowed
    if not argv:
        print(help_text(), file=sys.stderr)
        print(f"{PROG}: error: a command is required", file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print(help_text())
        return 0
    if argv[0] not in COMMANDS:
        print(f"{PROG}: error: {suggest(argv[0])}", file=sys.stderr)
        return 2
    return _run(argv[0], argv[1:], debug)


if __name__ == "__main__":
    raise SystemExit(main())
