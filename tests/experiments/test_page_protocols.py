"""Every experiment page that reports attack numbers says in its first lines which protocol made
them: the attack ensemble (the default of `robust-train evaluate`), or an "Attack protocol"
banner naming the weaker attack and where the ensemble's numbers are."""

from __future__ import annotations

import re

import pytest

from tests.support.paths import ROOT

PAGES = ROOT / "experiments"
HEAD_LINES = 15
ATTACK_NUMBERS = re.compile(r"top-k attack|attack k|top-100|topk|∩")
STATED = re.compile(
    r"under the attack ensemble|`ensemble` protocol|^> \*\*Attack protocol\.\*\*", re.M
)


def _pages() -> list[str]:
    return sorted(
        p.name
        for p in PAGES.glob("*.md")
        if p.name != "README.md" and ATTACK_NUMBERS.search(p.read_text())
    )


def stated(text: str) -> bool:
    """Whether the first `HEAD_LINES` lines of a page name the protocol of its attack numbers.

    Examples:
        >>> stated("# T\\n\\n> **Attack protocol.** One top-k attack per map, weaker than ...")
        True
        >>> stated("# T\\n\\n" + "words\\n" * 20 + "under the attack ensemble")
        False
    """
    return bool(STATED.search("\n".join(text.splitlines()[:HEAD_LINES])))


def test_the_pages_with_attack_numbers_are_found() -> None:
    assert {"EVERY_MAP.md", "LEADERBOARD.md", "ENSEMBLE_MAPS.md", "SANITY.md"} <= set(_pages())


@pytest.mark.parametrize("page", _pages())
def test_a_page_states_its_attack_protocol_in_its_first_lines(page: str) -> None:
    assert stated((PAGES / page).read_text()), page
