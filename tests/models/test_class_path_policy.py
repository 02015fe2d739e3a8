"""The class-path policy: a class path recorded in a checkpoint imports only a module of the
allow-list's packages (robust_train, torch, torchvision), installed outside the working folder. A
module of the working folder, of a PYTHONPATH folder or any other loose file is refused before it
is imported (its code never runs), naming the class path, where the module is and the opt-in;
a class path the user wrote keeps working from the working folder."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
import uuid
from pathlib import Path

import pytest
import torch
from torch import nn

from robust_train.core.trust import (
    UntrustedClassPathError,
    check_recorded_import,
    resolve_class,
)
from robust_train.models import load_classifier

MODULE = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1))
"""


@pytest.fixture
def loose_module(tmp_path: Path, monkeypatch):
    """(name, folder, marker): a module file whose import writes `marker`; sys.path, sys.modules
    and the working folder are restored afterwards."""
    name = f"loose_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "code"
    folder.mkdir()
    marker = tmp_path / "MARKER"
    (folder / f"{name}.py").write_text(MODULE.format(marker=str(marker)))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    importlib.invalidate_caches()
    yield name, folder, marker
    sys.modules.pop(name, None)


def test_a_module_of_the_working_folder_is_refused_unimported(loose_module, monkeypatch):
    name, folder, marker = loose_module
    monkeypatch.chdir(folder)
    sys.path.insert(0, str(folder))  # as `python -m` or PYTHONPATH=. would put it first
    importlib.invalidate_caches()
    with pytest.raises(UntrustedClassPathError) as info:
        resolve_class(f"{name}.Net", nn.Module, "the model recorded in 'x.ckpt'", recorded=True,
                      opt_in="pass --trust-class-path")  # fmt: skip
    message = str(info.value)
    assert f"'{name}.Net'" in message and "x.ckpt" in message and "--trust-class-path" in message
    assert "in the working folder" in message and "\n" not in message
    assert not marker.exists() and name not in sys.modules


def test_a_module_on_pythonpath_outside_the_installed_packages_is_refused(loose_module):
    name, folder, marker = loose_module
    sys.path.append(str(folder))
    importlib.invalidate_caches()
    with pytest.raises(UntrustedClassPathError, match="outside the installed packages"):
        check_recorded_import(f"{name}.Net", "the model recorded in 'x.ckpt'")
    assert not marker.exists()


def test_the_user_s_own_class_path_still_imports_from_the_working_folder(loose_module, monkeypatch):
    name, folder, marker = loose_module
    monkeypatch.chdir(folder)
    cls = resolve_class(f"{name}.Net", nn.Module, "`--model`")  # written by the user
    assert cls.__name__ == "Net" and marker.exists()
    # imported now (the user's choice ran it), yet a recorded path to it still needs the opt-in
    with pytest.raises(UntrustedClassPathError, match="in the working folder"):
        check_recorded_import(f"{name}.Net", "x")


def _installed_not_imported() -> str:
    installed = sorted(
        n for n in importlib.metadata.packages_distributions()
        if n.isidentifier() and not n.startswith("_") and n not in sys.modules
        and importlib.util.find_spec(n) is not None
    )  # fmt: skip
    assert installed, "no installed, not yet imported top-level package to try"
    return installed[0]


def test_allowed_packages_pass_and_other_installed_packages_are_refused_unimported(monkeypatch):
    check_recorded_import("torch.nn.Linear", "x")  # on the allow-list, imported already
    check_recorded_import("robust_train.models.SmallCNN", "x")
    name = _installed_not_imported()
    with pytest.raises(UntrustedClassPathError, match="not one of the packages"):
        check_recorded_import(f"{name}.Anything", "x")  # installed, but not on the allow-list
    check_recorded_import(f"{name}.Anything", "x", packages=(name,))  # allowed: where it is
    assert name not in sys.modules  # checked where it is, not imported
    # a virtual environment inside the working folder (a project's .venv) is still installed
    site_packages = Path(importlib.util.find_spec(name).origin).resolve()
    while site_packages.name != "site-packages":
        site_packages = site_packages.parent
    monkeypatch.chdir(site_packages.parents[2])
    check_recorded_import(f"{name}.Anything", "x", packages=(name,))


def test_a_file_shadowing_an_installed_package_from_the_working_folder_is_refused(
    tmp_path: Path, monkeypatch
):
    name = _installed_not_imported()
    (tmp_path / f"{name}.py").write_text("raise SystemExit('shadow imported')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    importlib.invalidate_caches()
    with pytest.raises(UntrustedClassPathError, match="in the working folder"):
        check_recorded_import(f"{name}.Net", "x", packages=(name,))


def test_stdlib_modules_not_imported_are_refused():
    assert "antigravity" not in sys.modules
    with pytest.raises(UntrustedClassPathError, match="'antigravity.Fly'"):
        resolve_class("antigravity.Fly", nn.Module, "x", recorded=True)
    assert "antigravity" not in sys.modules


def test_load_classifier_refuses_a_recorded_loose_class_unless_trusted(
    loose_module, tmp_path: Path
):
    name, folder, marker = loose_module
    config = {"class_path": f"{name}.Net", "init_args": {"num_classes": 10}}
    torch.save(
        {
            "state_dict": {"model.fc.weight": torch.zeros(10, 64), "model.fc.bias": torch.ones(10)},
            "robust_train": {"model": config},
        },
        tmp_path / "loose.ckpt",
    )
    sys.path.append(str(folder))
    importlib.invalidate_caches()
    with pytest.raises(UntrustedClassPathError, match="trust_class_path=True"):
        load_classifier(tmp_path / "loose.ckpt")
    assert not marker.exists()
    model = load_classifier(tmp_path / "loose.ckpt", trust_class_path=True)
    assert marker.exists() and torch.equal(model(torch.zeros(1, 1, 8, 8)), torch.ones(1, 10))
