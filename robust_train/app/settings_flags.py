"""The `robust-train evaluate`/`compare`/`certify` flags, derived from `EvaluationSettings`.

Every field of `robust_train.evaluation.EvaluationSettings` (its `help` metadata) is one flag
(`lipschitz_samples` -> `--lipschitz-samples`); flags left unset keep the preset's value
(`--protocol rar`) or the default. Adding an evaluation option is one field there.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

import torch

from robust_train.app.shipped_files import file_argument
from robust_train.attacks.options import AttackOptions
from robust_train.core.devices import ACCELERATORS, resolve_device
from robust_train.evaluation import PROTOCOLS, EvaluationSettings

__all__ = [
    "CommandParser",
    "add_device_arguments",
    "add_settings_arguments",
    "device_from",
    "fraction",
    "flags_in_errors",
    "settings_from",
    "setting_flags",
]


class CommandParser(argparse.ArgumentParser):
    """argparse that raises a one-line ValueError (robust_train.app.cli prints it, exit code 2) and
    never takes a prefix of a flag for the flag (`--n-step` is refused, not read as --n-steps)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise ValueError(f"{message}{self._did_you_mean(message)} (see `{self.prog} --help`)")

    def _did_you_mean(self, message: str) -> str:
        """'; did you mean --explainers?' for an unrecognized flag close to a known one."""
        if not message.startswith("unrecognized arguments:"):
            return ""
        known = [o for action in self._actions for o in action.option_strings]
        for word in message.split(":", 1)[1].split():
            flag = word.split("=", 1)[0]
            if flag.startswith("--"):
                close = difflib.get_close_matches(flag, known, n=1, cutoff=0.7)
                if close:
                    return f"; did you mean {close[0]}?"
        return ""


def _kind(annotation: object) -> tuple[type, bool]:
    """(scalar type, is a tuple) of a field annotation such as `int | None`, `tuple[str, ...]`."""
    hint = annotation
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = args[0]
    if typing.get_origin(hint) is tuple:
        return typing.get_args(hint)[0], True
    return hint if isinstance(hint, type) else str, False  # type: ignore[return-value]


def setting_flags() -> dict[str, tuple[type, bool]]:
    """Field name -> (type, is a tuple) of every evaluation setting that is a flag.

    Examples:
        >>> setting_flags()["explainers"], setting_flags()["n_steps"]
        ((<class 'str'>, True), (<class 'int'>, False))
    """
    hints = {
        **typing.get_type_hints(AttackOptions),
        **typing.get_type_hints(EvaluationSettings),
    }
    return {
        f.name: _kind(hints[f.name])
        for f in EvaluationSettings.option_fields()
        if f.metadata.get("cli", True)
    }


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """`--protocol`, `--data-config`, `--split`, one flag per evaluation setting, and the
    run options (`--no-progress`, `--no-wandb`, `--threads`)."""
    default = EvaluationSettings()
    parser.add_argument(
        "--protocol",
        choices=sorted(PROTOCOLS),
        default=None,
        help="a preset (default: the settings' defaults, every gradient attack run as the attack "
        "ensemble; ensemble: the demo's maps and budget under the ensemble; fast: the defaults "
        "with one attack per objective; rar: Chen et al. 2019, the RAR/ART protocol; demo: RAR "
        "at the demo's size, 100 images, 20 steps, one attack); flags given beside it override "
        "its fields",
    )
    parser.add_argument(
        "--data-config",
        type=file_argument("configs", "`--data-config`"),
        help="LightningCLI YAML whose `data:` section gives the held-out data (default: the "
        "datamodule stored in the checkpoint)",
    )
    parser.add_argument("--split", choices=("test", "val"), default="test")
    fields = {f.name: f for f in EvaluationSettings.option_fields()}
    for name, (kind, many) in setting_flags().items():
        value = getattr(default, name)
        shown = " ".join(map(str, value)) if many else value
        help_text = f"{fields[name].metadata.get('help', name)} ({shown})"
        flag = "--" + name.replace("_", "-")
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, help=help_text)
        else:
            kind = fraction if kind is float else kind  # type: ignore[assignment]
            parser.add_argument(flag, type=kind, nargs="+" if many else None, help=help_text)
    add_device_arguments(parser)
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--no-wandb",
        action="store_true",
        help="do not add the numbers to the W&B run the checkpoint was trained in",
    )
    parser.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        help="torch CPU threads (default: 1 for models under a million parameters, where "
        "one thread is fastest, else torch's default)",
    )


def add_device_arguments(parser: argparse.ArgumentParser) -> None:
    """`--accelerator` and `--devices`, Lightning's names and value forms (default "auto")."""
    parser.add_argument(
        "--accelerator",
        default="auto",
        type=str.lower,
        help=f"where the model and the attacks run: {', '.join(ACCELERATORS)} (auto: a CUDA GPU "
        "when there is one, else Apple's MPS, else the CPU)",
    )
    parser.add_argument(
        "--devices",
        default="auto",
        help="which device of the accelerator: auto or 1 (the first), or an index such as 1, "
        "or [1] (one device)",
    )


def device_from(args: argparse.Namespace) -> torch.device:
    """The device `--accelerator` / `--devices` name here; a ValueError naming the flag when
    this machine lacks it (checked before any work).

    Examples:
        >>> parser = CommandParser()
        >>> add_device_arguments(parser)
        >>> device_from(parser.parse_args(["--accelerator", "cpu"]))
        device(type='cpu')
    """
    return resolve_device(args.accelerator, args.devices, flags=("--accelerator", "--devices"))


@contextlib.contextmanager
def flags_in_errors(flags: Mapping[str, str]) -> Iterator[None]:
    """Re-raise a ValueError / TypeError of the block with each field it names in backticks
    (`` `n_samples` ``) replaced by its flag (`` `--n-samples` ``): on the command line errors name
    the flags the user typed.

    Examples:
        >>> try:
        ...     with flags_in_errors({"n_samples": "--n-samples"}):
        ...         raise ValueError("`n_samples` must be > 0, got 0")
        ... except ValueError as err:
        ...     print(err)
        `--n-samples` must be > 0, got 0
    """
    try:
        yield
    except (ValueError, TypeError) as err:
        text = str(err)
        renamed = re.sub(
            r"`([A-Za-z_][A-Za-z0-9_]*)`", lambda m: f"`{flags.get(m[1], m[1])}`", text
        )
        if renamed == text:
            raise
        raise type(err)(renamed) from err


def fraction(text: str) -> float:
    """A float flag's value: a number, or a fraction "A/B" (budgets in pixel levels: 8/255).

    Examples:
        >>> fraction("8/255") == 8 / 255, fraction("0.1"), fraction("1e-3")
        (True, 0.1, 0.001)
    """
    top, slash, bottom = text.partition("/")
    try:
        if not slash:
            return float(text)
        denominator = float(bottom)
        if denominator == 0:
            raise ValueError
        return float(top) / denominator
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number or a fraction such as 8/255, got {text!r}"
        ) from None


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def settings_from(args: argparse.Namespace) -> EvaluationSettings:
    """The preset of `--protocol` (or the defaults) with the flags given on top, checked now
    (an error names the setting and the value).

    Examples:
        >>> parser = CommandParser()
        >>> add_settings_arguments(parser)
        >>> s = settings_from(parser.parse_args(["--protocol", "rar", "--n-samples", "10"]))
        >>> s.n_samples, s.epsilon
        (10, 0.3)
    """
    base = PROTOCOLS[args.protocol] if getattr(args, "protocol", None) else EvaluationSettings()
    given: dict[str, Any] = {}
    for name, (_, many) in setting_flags().items():
        value = getattr(args, name, None)
        if value is not None:
            given[name] = tuple(value) if many else value
    flags = {name: "--" + name.replace("_", "-") for name in setting_flags()}
    with flags_in_errors(flags):
        settings = dataclasses.replace(base, **given)
        settings.resolved(1024, 1024)  # names, counts and budgets now; `k` again at the size
    return settings
