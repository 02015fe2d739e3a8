"""The one device of an evaluation, from Lightning's `accelerator` / `devices` values.

`resolve_device(accelerator, devices)` turns the names a Lightning Trainer takes into the one
`torch.device` that `robust-train evaluate`, `compare`, `certify` and the monitors run on:

- `accelerator`: "auto" (CUDA when available, else Apple's MPS when available, else the CPU),
  "cpu", "gpu" or "cuda" (an NVIDIA GPU), "mps" (Apple silicon).
- `devices`: "auto" or 1 (the first device of the accelerator), a count of devices (an
  evaluation runs on one device, so a count above 1 is refused), or which device in Lightning's
  index forms: "1," (the device with index 1), "[1]", or a list `[1]`; "-1" (every device) is
  refused for the same reason as a count above 1.

An accelerator asked for by name that this machine lacks is refused with one line naming the
flag (`robust-train` turns it into exit code 2); "auto" never fails. Availability is read from
`torch.cuda` and `torch.backends.mps` at call time, so tests can patch them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["ACCELERATORS", "check_device_choice", "parse_devices", "resolve_device"]

ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")


def _cuda_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def parse_devices(devices: object, flag: str = "devices") -> int | None:
    """The device index `devices` asks for, or None for "the first one" ("auto", 1).

    Examples:
        >>> parse_devices("auto"), parse_devices(1), parse_devices("1"), parse_devices("1,")
        (None, None, None, 1)
        >>> parse_devices("[2]"), parse_devices([0])
        (2, 0)
        >>> parse_devices(2)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `devices` 2 asks for 2 devices; an evaluation runs on one: ...
    """
    if devices is None or devices == "auto":
        return None
    if isinstance(devices, Sequence) and not isinstance(devices, str):
        items = list(devices)
    elif isinstance(devices, int) and not isinstance(devices, bool):
        return None if devices == 1 else _refuse_count(devices, flag)
    elif isinstance(devices, str):
        text = devices.strip().strip("[]").strip()
        if "," not in devices and "[" not in devices:
            try:
                count = int(text)
            except ValueError:
                raise ValueError(
                    f"`{flag}` must be 'auto', 1, or one device index such as '1,' or '[1]', "
                    f"got {devices!r}"
                ) from None
            return None if count == 1 else _refuse_count(devices, flag)
        items = [part for part in text.split(",") if part.strip()]
    else:
        raise TypeError(f"`{flag}` must be 'auto', an int, or a list of indices, got {devices!r}")
    try:
        indices = [int(i) for i in items]
    except (TypeError, ValueError):
        raise ValueError(f"`{flag}` holds a non-index value: {devices!r}") from None
    if len(indices) != 1 or indices[0] < 0:
        raise ValueError(
            f"`{flag}` {devices!r} names {len(indices)} devices; an evaluation runs on one: give "
            "one index such as '1,'"
        )
    return indices[0]


def _refuse_count(devices: object, flag: str) -> int:
    what = "every device" if str(devices).strip() == "-1" else f"{devices} devices"
    raise ValueError(
        f"`{flag}` {devices!r} asks for {what}; an evaluation runs on one: give 1 (the first) "
        "or one index such as '1,'"
    )


def check_device_choice(accelerator: object, flag: str = "accelerator") -> str:
    """The accelerator name, lower-cased, or a ValueError naming `flag` and the value.

    Examples:
        >>> check_device_choice("GPU")
        'gpu'
    """
    name = str(accelerator).strip().lower()
    if name not in ACCELERATORS:
        raise ValueError(f"`{flag}` must be one of {', '.join(ACCELERATORS)}, got {accelerator!r}")
    return name


def resolve_device(
    accelerator: str = "auto",
    devices: object = "auto",
    *,
    flags: tuple[str, str] = ("accelerator", "devices"),
) -> torch.device:
    """The torch.device that `accelerator` and `devices` name on this machine.

    Args:
        accelerator: "auto", "cpu", "gpu"/"cuda" or "mps" (Lightning's names).
        devices: "auto", 1, or one index ("1,", "[1]", [1]); see the module docstring.
        flags: the names the two values had where the user gave them, for errors
            (("--accelerator", "--devices") on the command line).

    Returns:
        The device to run on.

    Raises:
        ValueError: an unknown name, more than one device, an accelerator this machine does
            not have, or an index beyond its devices.

    Example:
        >>> resolve_device("cpu")
        device(type='cpu')
    """
    name = check_device_choice(accelerator, flags[0])
    index = parse_devices(devices, flags[1])
    if name == "auto":
        name = "cuda" if _cuda_count() else "mps" if _mps_available() else "cpu"
    if name == "cpu":
        if index not in (None, 0):
            raise ValueError(f"`{flags[1]}` {devices!r}: the CPU accelerator has one device (0)")
        return torch.device("cpu")
    if name == "mps":
        if not _mps_available():
            raise ValueError(
                f"`{flags[0]}` {accelerator!r}: MPS is not available on this machine; use "
                f"`{flags[0]} cpu` or 'auto'"
            )
        return torch.device("mps")
    count = _cuda_count()
    if count == 0:
        raise ValueError(
            f"`{flags[0]}` {accelerator!r}: no CUDA GPU is available on this machine (torch "
            f"{torch.__version__}); use `{flags[0]} cpu` or 'auto'"
        )
    if index is not None and index >= count:
        raise ValueError(
            f"`{flags[1]}` {devices!r}: this machine has {count} CUDA device(s) (0..{count - 1})"
        )
    return torch.device("cuda", 0 if index is None else index)
