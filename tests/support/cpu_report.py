"""Each test's CPU seconds, a pytest plugin (registered in tests/conftest.py).

With ROBUST_TRAIN_TEST_CPU_REPORT=FILE, each test's CPU seconds (this process, the subprocesses
it waited for, its warm console's commands) are appended to FILE as JSON lines: what sizes the
tiers, whatever else shares the machine.
"""

from __future__ import annotations

import json
import os
import resource
import time

import pytest

from tests.support.warm_console import cpu_seconds

_REPORT = os.environ.get("ROBUST_TRAIN_TEST_CPU_REPORT")


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """One JSON line per test: its id, CPU and wall seconds, tier, worker and end time."""
    if not _REPORT:
        yield
        return
    start, wall = _cpu(), time.perf_counter()
    yield
    record = {"test": item.nodeid, "cpu_s": _cpu() - start, "wall_s": time.perf_counter() - wall}
    record["slow"] = item.get_closest_marker("slow") is not None
    record["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "")  # when and where: the schedule
    record["end"] = time.time()
    with open(_REPORT, "a") as out:
        out.write(json.dumps(record) + "\n")
