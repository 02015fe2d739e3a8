"""The configs' comments say what a config trains and why, not where the lab notebook is: no path
of a benchmark, experiment or test file, no page name and no date (the pages are on the
documentation site; figures and dated findings live there and in the design notes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.test_docstrings import FORBIDDEN

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def comment_offences(text: str) -> list[str]:
    """'line N: what (the match)' for every forbidden reference in the comments of `text`."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        comment = line.partition("#")[2] if "#" in line else ""
        for what, pattern in FORBIDDEN.items():
            found += [f"line {number}: {what} ({m.group(0)!r})" for m in pattern.finditer(comment)]
    return found


def test_the_check_sees_page_paths_and_dates_in_comments() -> None:
    assert comment_offences("# chosen on benchmarks/LEADERBOARD.md\nmodel: 1\n")
    assert comment_offences("trainer:  # until 2026-12-03 the ReLU network\n")
    assert comment_offences("# see experiments/every_map.py\n")
    assert comment_offences("# the leaderboard page; Chen et al. 2019\nlr: 0.001\n") == []


@pytest.mark.parametrize("path", sorted(CONFIGS.rglob("*.yaml")), ids=lambda p: p.name)
def test_config_comments_cite_no_page_path_or_date(path: Path) -> None:
    assert comment_offences(path.read_text()) == []
