"""`robust-train check-data`: read every image of a fit config's data before training.

    robust-train check-data --config configs/finetune_torchvision.yaml   # every image readable?

The config (files and flags) is parsed as `robust-train fit` parses it
(`robust_train.app.lightning_cli`), then only its DataModule is built: no model, trainer, logger
or run folder.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from jsonargparse import ArgumentParser, Namespace
from pytorch_lightning import LightningDataModule

from robust_train.app.lightning_cli import (
    QuietParser,
    RobustCLI,
    RobustTrainer,
    bound_yaml_values,
)
from robust_train.app.shipped_files import lightning_arguments
from robust_train.core.lightning_noise import quiet_lightning
from robust_train.data.check import (
    SplitCheck,
    UnreadableImageError,
    check_datamodule,
    summary_table,
)
from robust_train.training.module import RobustClassifier

__all__ = ["check_data_main"]


class _DataOnlyCLI(RobustCLI):
    """Parses a fit config (files and flags) as `fit` does, then builds its DataModule alone: no
    model, trainer, logger or run folder."""

    def _parse_ckpt_path(self) -> None:
        self.resume_checkpoint = None

    def _set_seed(self) -> None:
        pass  # nothing random is drawn

    def before_instantiate_classes(self) -> None:
        pass

    def instantiate_classes(self) -> None:
        data = self.config.get("data")
        if data is None or not data.get("class_path"):
            raise ValueError("check-data needs a `data` section with a class_path in --config")
        module, _, name = str(data.class_path).rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        if not (isinstance(cls, type) and issubclass(cls, LightningDataModule)):
            raise TypeError(f"data.class_path {data.class_path!r} is not a LightningDataModule")
        init = data.get("init_args") or Namespace()
        kwargs = init.as_dict() if isinstance(init, Namespace) else dict(init)
        if any(isinstance(v, dict) and "class_path" in v for v in kwargs.values()):
            # an argument given as {class_path, init_args} (a train_transform) is built as fit
            # builds it
            parser = ArgumentParser(exit_on_error=False)
            parser.add_class_arguments(cls, "data")
            self.datamodule = parser.instantiate(parser.parse_object({"data": kwargs})).data
        else:
            self.datamodule = cls(**kwargs)

    def after_instantiate_classes(self) -> None:
        pass


def check_data_main(argv: list[str]) -> int:
    """`robust-train check-data --config CONFIG.yaml [--data.init_args.root ...]`: read every
    image (every sample) of each split of the config's data before training. Prints each split's
    size, every file that cannot be read and a table per split and class (images, formats,
    sizes, value range); exits 2 when one would stop the fit (0 when there is
    none, or when the config sets `skip_unreadable: true`, which leaves them out).
    """
    quiet_lightning()
    bound_yaml_values()
    cli = _DataOnlyCLI(
        RobustClassifier,
        LightningDataModule,
        subclass_mode_data=True,
        trainer_class=RobustTrainer,
        parser_class=QuietParser,
        args=lightning_arguments(argv),
        run=False,
        auto_configure_optimizers=False,
        seed_everything_default=False,
    )
    datamodule = cli.datamodule
    checks = check_datamodule(datamodule)
    name = type(datamodule).__name__
    for check in checks:
        print(f"{name} {check.split}: {check.n_items} items, {len(check.unreadable)} unreadable")
        for item, reason in check.unreadable:
            print(f"  unreadable: {item}: {reason}")
    if any(check.classes for check in checks):
        print("\n".join(summary_table(checks)))
    bad = sum(len(c.unreadable) for c in checks)
    total = sum(c.n_items for c in checks)
    if bad and getattr(datamodule, "hparams", {}).get("skip_unreadable"):
        print(f"{bad} of {total} unreadable; the fit skips them (skip_unreadable: true)")
    elif bad:
        raise UnreadableImageError(
            f"{bad} of {total} items of {name} cannot be read (listed above); fix or remove "
            "them, or set data.init_args.skip_unreadable: true"
        )
    else:
        print(f"all {total} items of {name} read")
    for line in low_range_notes(checks):
        print(line)
    _check_class_count(cli.config.get("model"), checks)
    return 0


# a class whose brightest value is below this reads as a dark image (a 12-bit scan in a 16-bit
# file reaches 4095 / 65535 = 0.062)
LOW_RANGE = 0.25


def low_range_notes(checks: Sequence[SplitCheck]) -> list[str]:
    """A note per class whose values stay below `LOW_RANGE` in every split: its files use a
    small part of the range their format holds (a 12-bit scan stored in 16 bits), so an attack
    budget in pixel units (8/255) is a large share of what the images vary over.

    Examples:
        >>> from robust_train.data.check import ClassTally
        >>> row = ClassTally("scan", 3, ("I;16",), ((40, 30),), 0.0, 4095 / 65535, 0)
        >>> print(low_range_notes([SplitCheck("train", 3, (), (row,))])[0][:60])
        note: class 'scan' (I;16): values reach only 0.062 of [0, 1]
    """
    highest: dict[str, float] = {}
    modes: dict[str, set[str]] = {}
    for check in checks:
        for t in check.classes:
            if t.n_items:
                highest[t.name] = max(highest.get(t.name, 0.0), t.value_max)
                modes.setdefault(t.name, set()).update(t.modes)
    return [
        f"note: class {name!r} ({','.join(sorted(modes[name]))}): values reach only {top:.3f} "
        f"of [0, 1] (files are scaled by the range their format holds: 16-bit by 65535); an "
        f"attack budget such as --epsilon 8/255 = 0.031 is {8 / 255 / max(top, 1e-12):.0%} of "
        "that range: state budgets as a share of it, or store the images at their full range"
        for name, top in highest.items()
        if 0.0 < top < LOW_RANGE
    ]


def _num_classes(section: Any, path: str = "model") -> tuple[str, int] | None:
    """The first `num_classes` set inside a config's model section, with its dotted key."""
    if isinstance(section, Namespace):
        section = section.as_dict()
    if isinstance(section, dict):
        value = section.get("num_classes")
        if isinstance(value, int) and not isinstance(value, bool):
            return f"{path}.num_classes", value
        for key, inner in section.items():
            found = _num_classes(inner, f"{path}.{key}")
            if found is not None:
                return found
    return None


def _check_class_count(model: Any, checks: Sequence[SplitCheck]) -> None:
    """Refuse a config whose model's `num_classes` differs from the data's class count (the fit
    would stop on it after building the model)."""
    found = _num_classes(model)
    names = list(dict.fromkeys(t.name for c in checks if c.split == "train" for t in c.classes))
    if found is None or not names or found[1] == len(names):
        return
    key, value = found
    raise ValueError(
        f"`{key}` is {value} but the data has {len(names)} classes {names}: set "
        f"--{key} {len(names)} (or edit the config) before the fit"
    )
