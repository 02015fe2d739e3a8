"""The one registry (`robust_train.core.registry`): registration, clashes, lookups, discovery."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from robust_train.attacks.objectives.base import OBJECTIVES
from robust_train.core.registry import Registry, discover
from robust_train.evaluation.parts import PARTS
from robust_train.explain import EXPLAINERS
from robust_train.regularizers import PENALTIES


def test_every_registry_of_the_package_is_the_one_class() -> None:
    for registry in (EXPLAINERS, PENALTIES, OBJECTIVES, PARTS):
        assert type(registry) is Registry


def test_a_second_definition_of_a_name_is_refused_a_reimport_is_not() -> None:
    registry: Registry[type] = Registry("THINGS", "thing")

    class A:
        pass

    registry.add("a", A)
    registry.add("a", A)  # the same definition again: no clash
    B = type("A", (), {"__module__": "elsewhere"})
    with pytest.raises(ValueError, match="thing 'a' is already registered"):
        registry.add("a", B)
    with pytest.raises(ValueError, match="identifier"):
        registry.add("not a name", A)
    with pytest.raises(ValueError, match=r"Unknown `thing` 'b'; expected one of \['a'\]"):
        registry.lookup("b", "thing")


def test_discovery_registers_a_new_file_without_any_other_edit(tmp_path: Path, monkeypatch) -> None:
    package = tmp_path / "plugin_pkg"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text(
        textwrap.dedent(
            """
            from robust_train.core.registry import Registry, discover
            THINGS = Registry("THINGS", "thing")
            discover(__name__)
            """
        )
    )
    for path, name in ((package / "b_file.py", "b"), (package / "inner" / "a_file.py", "a")):
        path.write_text(f"from plugin_pkg import THINGS\nTHINGS.add({name!r}, {name!r})\n")
    (package / "inner" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import plugin_pkg  # type: ignore[import-not-found]

        assert list(plugin_pkg.THINGS) == ["b", "a"]  # sorted module names: b_file, inner.a_file
        assert "plugin_pkg.inner.a_file" in discover("plugin_pkg")
    finally:
        for name in [m for m in sys.modules if m.startswith("plugin_pkg")]:
            del sys.modules[name]


def test_add_all_registers_in_order_and_refuses_a_clash():
    things: Registry[int] = Registry("THINGS", "thing")
    things.add_all({"b": 2, "a": 1})
    assert list(things) == ["b", "a"] and things.lookup("a", "thing") == 1
    with pytest.raises(ValueError, match="'a' is already registered"):
        things.add_all({"c": 3, "a": 4})
