"""A documentation page whose code imports a package robust_train does not install names the
extra that installs it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a package the code blocks import -> the extra of pyproject.toml that installs it
EXTRAS = {"captum": "captum", "lightning": "lightning"}
IMPORT = re.compile(r"^\s*(?:from|import)\s+(\w+)", re.MULTILINE)


def _imports(page: Path) -> set[str]:
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.DOTALL)
    return {name for block in blocks for name in IMPORT.findall(block)}


def test_pages_that_import_an_extra_say_how_to_install_it():
    pyproject = (ROOT / "pyproject.toml").read_text()
    required = re.search(r"^dependencies = \[(.*?)\]", pyproject, re.MULTILINE | re.DOTALL)
    assert required is not None
    checked = 0
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for package in sorted(_imports(page) & set(EXTRAS)):
            assert f'"{package}' not in required.group(1)  # not installed with the package
            extra = EXTRAS[package]
            assert re.search(rf'^{extra} = \["{package}[<>=]', pyproject, re.MULTILINE), extra
            assert f'pip install "robust-train[{extra}]"' in page.read_text(), (page, package)
            checked += 1
    assert checked >= 2  # the Grad-CAM/DeepLIFT page (Captum) and the training page (lightning)
