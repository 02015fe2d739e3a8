"""The documentation's shell blocks, run as a reader runs them, a pytest plugin (registered in
tests/conftest.py).

Each page's ```bash blocks run in order in one working folder, each in `bash -e -u` (a failing
command fails the block, as mktestdocs runs them), with `robust-train` on PATH as the warm console
script (tests/support/warm_console.py) and one torch thread. What each block printed is kept, so
that a page's run is evidence for more than one test: tests/docs/test_docs_code.py checks that
every block exits 0, and tests/app/test_demo.py reads the output of the getting-started page's
`robust-train demo --quick` instead of running the demo a second time.

`docs_shell_run(page)` (fixture) runs a page once per test run, shared by the pytest-xdist
workers (`tests.support.artifacts.shared_artifact`), and returns its `PageRun`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from mktestdocs import grab_code_blocks

from tests.support.artifacts import shared_artifact
from tests.support.console import Console
from tests.support.paths import ROOT

DOCS = ROOT / "docs"


@dataclass(frozen=True)
class BlockRun:
    """One shell block: its source, exit code and what it printed."""

    source: str
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class PageRun:
    """A page's shell blocks, run in order in `work` until the first that fails."""

    page: str
    work: Path
    blocks: list[BlockRun]

    def failure(self) -> str | None:
        """None when every block exited 0, else the failing block, its exit code and output."""
        for block in self.blocks:
            if block.returncode != 0:
                return (
                    f"{self.page}: a shell block exited {block.returncode}\n{block.source}\n"
                    f"--- stdout\n{block.stdout[-3000:]}\n--- stderr\n{block.stderr[-3000:]}"
                )
        return None

    def block_running(self, command: str) -> BlockRun:
        """The one block whose source holds `command`."""
        found = [b for b in self.blocks if command in b.source]
        assert len(found) == 1, f"{self.page} has {len(found)} shell blocks running {command!r}"
        return found[0]


def shell_blocks(page: Path) -> list[str]:
    """The page's ```bash blocks, in order."""
    return grab_code_blocks(page.read_text(), lang="bash")


def run_page(page: Path, folder: Path, console: Console) -> PageRun:
    """Run the page's shell blocks in `folder/work` (see the module docstring)."""
    shim = console.shim(folder / ".bin").parent
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join([str(shim), str(Path(sys.executable).parent), os.environ["PATH"]])
    env = {**os.environ, "PATH": path, "OMP_NUM_THREADS": "1"}
    blocks = []
    for source in shell_blocks(page):
        done = subprocess.run(
            ["bash", "-e", "-u", "-c", source], cwd=work, env=env, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        blocks.append(BlockRun(source, done.returncode, done.stdout, done.stderr))
        if done.returncode != 0:
            break
    return PageRun(page.relative_to(DOCS).as_posix(), work, blocks)


@pytest.fixture(scope="session")
def docs_shell_run(
    tmp_path_factory: pytest.TempPathFactory, shared_console: Console
) -> Callable[[str], PageRun]:
    """`docs_shell_run("getting-started.md")` -> the page's `PageRun`, run once per test run."""

    def run(name: str) -> PageRun:
        page = DOCS / name

        def build(folder: Path) -> None:
            done = run_page(page, folder, shared_console)
            record = [vars(block) for block in done.blocks]
            (folder / "blocks.json").write_text(json.dumps({"page": done.page, "blocks": record}))

        key = "docs-shell-" + name.replace("/", "-").removesuffix(".md")
        folder = shared_artifact(tmp_path_factory, key, build)
        record = json.loads((folder / "blocks.json").read_text())
        blocks = [BlockRun(**block) for block in record["blocks"]]
        return PageRun(record["page"], folder / "work", blocks)

    return run
