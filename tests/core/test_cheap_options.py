"""The tests' table of cheap options (tests/support/cheap_options.py) covers every registered
explainer and penalty, names only options each one takes, and says what to add for a new unit."""

from __future__ import annotations

import inspect

import pytest

from robust_train.explain import EXPLAINERS, explainer_spec
from robust_train.regularizers import PENALTIES
from tests.support.cheap_options import (
    EXPLAINER_OPTIONS,
    PENALTY_OPTIONS,
    explainer_options,
    penalty_options,
)


def _takes(fn, options) -> list[str]:
    """The names in `options` that `fn` does not take (none when it takes **kwargs)."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return []
    names = {p.name for p in params}
    return sorted(set(options) - names)


def _shipped(registry, defined_in) -> set[str]:
    """The names a robust_train module registers (not a unit a test registers for a while)."""
    return {n for n, unit in registry.items() if defined_in(unit).startswith("robust_train.")}


def test_every_shipped_unit_has_an_entry_and_no_entry_is_stale():
    assert set(EXPLAINER_OPTIONS) == _shipped(EXPLAINERS, lambda s: s.function.__module__)
    assert set(PENALTY_OPTIONS) == _shipped(PENALTIES, lambda cls: cls.__module__)


@pytest.mark.parametrize("name", sorted(EXPLAINER_OPTIONS))
def test_explainer_entries_name_options_the_explainer_takes(name):
    assert _takes(explainer_spec(name).function, explainer_options(name)) == []


@pytest.mark.parametrize("name", sorted(PENALTY_OPTIONS))
def test_penalty_entries_name_options_the_penalty_takes(name):
    assert _takes(PENALTIES[name], penalty_options(name)) == []


def test_a_unit_without_an_entry_is_told_what_to_add():
    with pytest.raises(KeyError, match=r"explainer 'new_map' has no entry.*EXPLAINER_OPTIONS"):
        explainer_options("new_map")
    with pytest.raises(KeyError, match=r"'new_term': \{\} if its defaults are cheap"):
        penalty_options("new_term")


def test_the_options_are_copies():
    penalty_options("ig_norm")["n_steps"] = 1000
    assert PENALTY_OPTIONS["ig_norm"]["n_steps"] == 2
