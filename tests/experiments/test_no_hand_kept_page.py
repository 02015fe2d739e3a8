"""Every page of benchmarks/ and experiments/ is generated from its results: benchmarks/ holds its
overview and RESULTS.md (written from benchmarks/results/), and each page of experiments/ is the
page of a registered study with a `write_page`. A page written by hand (a record appended to a
markdown file) has no place to go."""

from __future__ import annotations

from pathlib import Path

from benchmarks import pages as benchmark_pages
from experiments.registry import EXPERIMENTS

ROOT = Path(__file__).resolve().parents[2]


def test_every_page_is_generated_from_results() -> None:
    benchmarks = {p.name for p in (ROOT / "benchmarks").glob("*.md")}
    assert benchmarks == {"README.md", benchmark_pages.PAGE.name}
    generated = {e.page for e in EXPERIMENTS.values() if e.page and e.write_page}
    studies = {p.name for p in (ROOT / "experiments").glob("*.md")} - {"README.md"}
    assert studies - generated == set(), "register the study that writes it, with its write_page"
    for page in generated:
        assert (ROOT / "experiments" / page).is_file(), page
