"""Expensive artifacts built once per test run, a pytest plugin (registered in tests/conftest.py).

`shared_artifact(factory, name, build)` builds a folder once per run, even across pytest-xdist
workers; the fixture `trained_digits` is the run's small trained digits model, built that way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.support.helpers import TinyCNN, train_digits_cnn


def shared_artifact(
    factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]
) -> Path:
    """`build(folder)` once per test run, shared by every pytest-xdist worker: the first worker
    to ask builds it under a file lock, the others wait and reuse it. Returns the folder."""
    from filelock import FileLock

    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's base folder, shared by the workers
    folder = root / f"shared-{name}"
    with FileLock(str(folder) + ".lock"):
        done = folder / ".built.json"
        if not done.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            build(folder)
            done.write_text(json.dumps({"name": name}))
    return folder


@pytest.fixture(scope="session")
def trained_digits(tmp_path_factory: pytest.TempPathFactory):
    """(model, x_test, y_test): a TinyCNN trained a few seconds on digits, shared by the session:
    trained once per run (`shared_artifact`), each test process rebuilding the same model (its
    weights and the .grad its last step left, in eval mode) from the saved copy."""

    def build(folder: Path) -> None:
        model, x, y = train_digits_cnn()
        grads = {name: p.grad for name, p in model.named_parameters()}
        torch.save({"state": model.state_dict(), "grads": grads, "x": x, "y": y}, folder / "m.pt")

    saved = torch.load(shared_artifact(tmp_path_factory, "trained-digits", build) / "m.pt")
    model = TinyCNN(seed=0)  # what train_digits_cnn builds
    model.load_state_dict(saved["state"])
    for name, p in model.named_parameters():
        p.grad = saved["grads"][name]
    return model.eval(), saved["x"], saved["y"]
