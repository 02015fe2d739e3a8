"""Every docstring example in `robust_train` runs and prints what it shows.

pytest's `--doctest-modules` collects only `testpaths` (tests/). Pointing it at `robust_train/`
under `--import-mode=importlib` would import each module a second time, and a module with state
(`robust_train.explain.clamp`'s context variable) would then exist twice. The examples run here
instead, with `doctest` on the modules exactly as the package imports them.
"""

from __future__ import annotations

import doctest
import importlib
import io
import pkgutil

import pytest

import robust_train

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _examples(name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(name)
    return [t for t in doctest.DocTestFinder().find(module, name) if t.examples]


MODULES = [
    info.name
    for info in pkgutil.walk_packages(robust_train.__path__, "robust_train.")
    if _examples(info.name)
]


def test_the_examples_are_found() -> None:
    """The finder sees the package: the modules whose examples the docs lean on are collected."""
    assert {"robust_train.explain.similarity", "robust_train.models.softplus"} <= set(MODULES)
    assert sum(len(t.examples) for name in MODULES for t in _examples(name)) > 500


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    report = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in _examples(name):
        runner.run(test, out=report.write)
    assert runner.failures == 0, report.getvalue()
