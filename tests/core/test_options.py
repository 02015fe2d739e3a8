"""`takes_options`: a callable's keyword options come from one dataclass; decorating a subclass
never changes its base class (the IGSumNorm -> IGNorm regression: IGNorm accepted `beta`, then
refused it when the config parser passed the default on)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from robust_train.core.options import build_options, takes_options


@dataclasses.dataclass(frozen=True)
class BaseOptions:
    steps: int = 3


@dataclasses.dataclass(frozen=True)
class MoreOptions(BaseOptions):
    beta: float = 0.5


@takes_options(BaseOptions)
class Base:
    options_class = BaseOptions

    def __init__(self, weight: float = 1.0, **options):
        self.weight = weight
        self.options = build_options(self.options_class, options, where=type(self).__name__)


@takes_options(MoreOptions)
class Child(Base):
    options_class = MoreOptions


def test_subclass_signature_adds_its_fields_and_base_keeps_its_own():
    assert list(inspect.signature(Base).parameters) == ["weight", "steps"]
    assert list(inspect.signature(Child).parameters) == ["weight", "steps", "beta"]
    assert Child(2.0, beta=0.1, steps=4).options == MoreOptions(steps=4, beta=0.1)
    assert Child(2.0).weight == 2.0
    with pytest.raises(TypeError, match="beta"):
        Base(beta=0.1)


def test_ig_norm_does_not_take_ig_sum_norms_beta():
    from robust_train.regularizers import IGNorm, IGSumNorm

    assert "beta" not in inspect.signature(IGNorm).parameters
    assert inspect.signature(IGSumNorm).parameters["beta"].default == 0.1
    assert IGSumNorm(beta=0.2).options.beta == 0.2
