"""The longest test modules first, a pytest plugin (registered in tests/conftest.py).

`make test` hands whole modules to the pytest-xdist workers in collection order (`--dist
loadscope --no-loadscope-reorder`). A long module that starts last leaves one worker busy while
the others idle, so the modules are sorted longest first, each module's tests in their own order.

A module's length is what the last run of the same tier measured (its tests' setup, call and
teardown seconds, kept in pytest's cache under `robust_train/module_seconds/<-m expression>`,
rewritten at the end of each run that selected no tests by `-k`: each tier, `make test`'s
"not heavy" among them, keeps its own table). A module the cache does not know (a fresh
checkout, a new module) is estimated from its markers: `slow` marks a test over about 3 s, so
SLOW_SECONDS for each slow test and FAST_SECONDS for each other. Stale figures only cost time,
never a result.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

CACHE_KEY = "robust_train/module_seconds"
SLOW_SECONDS = 3.0
FAST_SECONDS = 0.1

_measured: defaultdict[str, float] = defaultdict(float)


def module_of(nodeid: str) -> str:
    """'tests/a/test_b.py::test_c[x]' -> 'tests/a/test_b.py'."""
    return nodeid.partition("::")[0]


def cache_key(config: pytest.Config) -> str:
    """The cache entry of this run's tier: one per `-m` expression (a tier measures its own part
    of each module)."""
    expression = config.getoption("markexpr", "") or "all"
    return f"{CACHE_KEY}/{expression.replace(' ', '_')}"


def estimated_seconds(items: list[pytest.Item], cached: dict[str, float]) -> dict[str, float]:
    """Each module's seconds: the cached measurement, else the estimate from its markers."""
    estimate: defaultdict[str, float] = defaultdict(float)
    for item in items:
        slow = item.get_closest_marker("slow") is not None
        estimate[module_of(item.nodeid)] += SLOW_SECONDS if slow else FAST_SECONDS
    return {module: cached.get(module, seconds) for module, seconds in estimate.items()}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest modules first (a stable sort: each module's tests keep their order)."""
    cache = getattr(config, "cache", None)
    cached = cache.get(cache_key(config), {}) if cache is not None else {}
    seconds = estimated_seconds(items, cached if isinstance(cached, dict) else {})
    items.sort(key=lambda item: -seconds[module_of(item.nodeid)])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Sum each module's setup, call and teardown seconds (in xdist's controller: the workers'
    reports)."""
    _measured[module_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Store the modules' measured seconds, merged into the cached ones, after a full run."""
    config = session.config
    cache = getattr(config, "cache", None)
    if cache is None or os.environ.get("PYTEST_XDIST_WORKER") or not _measured:
        return
    if config.getoption("keyword", ""):
        return  # a selection by name measures parts of modules
    key = cache_key(config)
    cached = cache.get(key, {})
    merged = {**(cached if isinstance(cached, dict) else {})}
    merged.update({module: round(s, 2) for module, s in sorted(_measured.items())})
    cache.set(key, merged)
