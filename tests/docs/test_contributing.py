"""Every Python block of CONTRIBUTING.md runs (each in a fresh namespace), so the examples of how
to add a penalty, an objective, an explainer and an evaluation part stay true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TEXT = (Path(__file__).resolve().parents[2] / "CONTRIBUTING.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)
NAMES = {"penalty": "saliency_norm", "objective": "spread", "explainer": "gradient_sign"}


def test_there_is_one_example_per_extension_point() -> None:
    assert len(BLOCKS) == 4


@pytest.fixture
def clean_registries():
    from robust_train.attacks import OBJECTIVES
    from robust_train.evaluation import MEASURES, PARTS
    from robust_train.explain import EXPLAINERS
    from robust_train.regularizers import PENALTIES

    registries = (PENALTIES, OBJECTIVES, EXPLAINERS, PARTS, MEASURES)
    before = [set(r) for r in registries]
    yield
    for registry, names in zip(registries, before, strict=True):
        for name in set(registry) - names:
            registry.pop(name)


@pytest.mark.parametrize(
    "index", range(len(BLOCKS)), ids=["penalty", "objective", "explainer", "part"]
)
def test_example_runs(index: int, clean_registries) -> None:
    exec(compile(BLOCKS[index], f"CONTRIBUTING.md block {index}", "exec"), {"__name__": "doc"})
