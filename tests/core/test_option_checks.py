"""Per-field checks declared once on an option set (`option(..., check=...)`, `check_options`)."""

from __future__ import annotations

import dataclasses

import pytest

from robust_train.certify.attack import BallSearchOptions
from robust_train.core.options import check_options, option
from robust_train.core.validation import check_positive
from robust_train.metrics.functional import RemovalOptions
from robust_train.regularizers._inner import PGDOptions
from robust_train.regularizers.lga import LGAOptions


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


DECLARED = [PGDOptions, LGAOptions, BallSearchOptions, RemovalOptions]


@pytest.mark.parametrize("options_cls", DECLARED, ids=lambda c: c.__name__)
def test_every_declared_check_refuses_a_bad_value_naming_its_field(options_cls):
    required = {"radius": 0.1} if options_cls is BallSearchOptions else {}
    checked = [f.name for f in dataclasses.fields(options_cls) if "check" in f.metadata]
    assert checked, "the option set declares its checks"
    for name in checked:
        with pytest.raises((TypeError, ValueError), match=f"`{name}`"):
            options_cls(**{**required, name: -1})
    options_cls(**required)  # the defaults pass their own checks


def test_pgd_options_keep_their_messages():
    with pytest.raises(ValueError, match="`epsilon` is an L_inf budget"):
        PGDOptions(epsilon=1.0)
    with pytest.raises(ValueError, match="`n_steps` must be >= 0, got -1"):
        PGDOptions(n_steps=-1)
    assert PGDOptions(n_steps=0).n_steps == 0
