"""The benchmarks and experiments packages import no underscore module or name of robust_train,
as no package of robust_train imports another's (`test_architecture`): what they share is public.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.package.test_architecture import BENCHMARKS, EXPERIMENTS, private_imports


def test_a_script_importing_a_private_module_is_seen(tmp_path: Path) -> None:
    source = tmp_path / "bench_x.py"
    source.write_text(
        "def step():\n    from robust_train.attacks import _loop\n"
        "    from robust_train.attacks.fragility import _context, fragility_attack\n"
    )
    assert [f.split(" ")[1] for f in private_imports(source, "")] == [
        "robust_train.attacks._loop",
        "robust_train.attacks.fragility._context",
    ]


@pytest.mark.parametrize("folder", [BENCHMARKS, EXPERIMENTS], ids=lambda p: p.name)
def test_no_script_imports_a_private_module_of_robust_train(folder: Path) -> None:
    found = [f for path in sorted(folder.rglob("*.py")) for f in private_imports(path, "")]
    assert found == [], "make what is shared public"
