"""Per-field checks declared once on an option set (`option(..., check=...)`, `check_options`)."""

from __future__ import annotations

import dataclasses

import pytest

from robust_train.core.options import check_options, option
from robust_train.core.validation import check_positive
from robust_train.regularizers._inner import PGDOptions


@dataclasses.dataclass(frozen=True)
class _Two:
    first: float = option(1.0, "help of first", check=check_positive)
    second: float = option(2.0, check=check_positive)
    free: object = option(None)

    def __post_init__(self) -> None:
        check_options(self)


def test_checks_run_in_field_order_and_name_the_field():
    assert _Two().first == 1.0
    with pytest.raises(ValueError, match=r"`first` must be > 0, got -1"):
        _Two(first=-1, second=-2)
    with pytest.raises(ValueError, match=r"`second` must be > 0, got 0"):
        _Two(second=0)
    _Two(free="anything")  # a field without a check takes any value


def test_help_is_kept_and_optional():
    meta = {f.name: dict(f.metadata) for f in dataclasses.fields(_Two)}
    assert meta["first"]["help"] == "help of first"
    assert "help" not in meta["second"] and "check" not in meta["free"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epsilon": 1.0}, "`epsilon` is an L_inf budget"),
        ({"step_size": 0.0}, "`step_size` must be > 0, got 0.0"),
        ({"n_steps": 1.5}, "`n_steps`"),
        ({"n_steps": -1}, "`n_steps` must be >= 0, got -1"),
        ({"random_start": 1}, "`random_start` must be a bool, got 1"),
    ],
)
def test_pgd_options_refuse_each_bad_field(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        PGDOptions(**kwargs)
    assert PGDOptions(n_steps=0).n_steps == 0
