"""The documentation site: it builds with warnings as errors, and every page renders in a real
headless browser (Debian's chromium, driven by Playwright) without console errors, with its
images loaded, and the site's search finds the API pages."""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BROWSER_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip

pytestmark = pytest.mark.heavy  # the built site in a headless browser


# What the site is built from: a build older than any of these files is stale.
SOURCES = (
    "docs",
    "benchmarks",
    "experiments",
    "robust_train",
    "mkdocs.yml",
    "README.md",
    "CHANGELOG.md",
)
STRICT_MARKER = ".strict-build"  # written by `make docs` after `mkdocs build --strict` passed


def _newest_source() -> float:
    """The newest modification time of a source file (bytecode caches, which a test run may
    write after the build, are not sources)."""
    newest = 0.0
    for name in SOURCES:
        path = ROOT / name
        files = path.rglob("*") if path.is_dir() else [path]
        times = (f.stat().st_mtime for f in files if f.is_file() and "__pycache__" not in f.parts)
        newest = max([newest, *times])
    return newest


def fresh_strict_build(folder: Path) -> bool:
    """Whether `folder` holds a whole `make docs` build (mkdocs --strict passed, the marker it
    writes after) whose every file is newer than every source file."""
    marker = folder / STRICT_MARKER
    if not (marker.is_file() and (folder / "index.html").is_file()):
        return False
    oldest = min(f.stat().st_mtime for f in folder.rglob("*") if f.is_file())
    return oldest > _newest_source()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as `make docs` builds it (`mkdocs build --strict`): its site/ folder when that
    build is fresh (`fresh_strict_build`: CI runs `make docs` before the tests), else a build
    into a temporary folder."""
    if fresh_strict_build(ROOT / "site"):
        return ROOT / "site"
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def served(site: Path):
    """The built site on a loopback port, as a reader's browser sees it."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).is_file():
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        yield chromium
        chromium.close()


def watch_for_problems(page, problems: list[str]) -> None:
    """Append the page's console errors, uncaught errors, failed requests and HTTP errors to
    `problems`. A request the next page's navigation cancels (the search worker, the favicon)
    is aborted, not failed; any other failure is a problem."""
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on(
        "requestfailed",
        lambda r: (
            "ERR_ABORTED" not in (r.failure or "")
            and problems.append(f"request failed: {r.url} ({r.failure})")
        ),
    )
    page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))


def pages(site: Path) -> list[str]:
    return sorted(
        p.relative_to(site).as_posix()
        for p in site.rglob("index.html")
        if "assets" not in p.relative_to(site).parts
    )


def test_only_a_fresh_strict_build_is_reused(tmp_path: Path) -> None:
    build = tmp_path / "site"
    (build / "search").mkdir(parents=True)
    (build / "index.html").write_text("<h1>x</h1>")
    assert not fresh_strict_build(build)  # no marker: not known to be strict
    (build / STRICT_MARKER).touch()
    newest = _newest_source()
    for path in build.rglob("*"):
        os.utime(path, (newest - 10, newest - 10))
    assert not fresh_strict_build(build)  # older than a source file
    for path in build.rglob("*"):
        os.utime(path, (newest + 10, newest + 10))
    assert fresh_strict_build(build)
    (build / "search" / "late.json").touch()
    os.utime(build / "search" / "late.json", (newest - 1, newest - 1))
    assert not fresh_strict_build(build)  # one file older than a source: a partial rebuild


def test_the_site_holds_every_section(site: Path) -> None:
    found = set(pages(site))
    for page in (
        "index.html", "getting-started/index.html", "reference/cli/index.html",
        "reference/api/robust_train.explain/index.html", "benchmarks/index.html",
        "experiments/index.html",
        "concepts/threat-model/index.html", "tutorials/train-a-robust-model/index.html",
    ):  # fmt: skip
        assert page in found, page


def test_every_page_renders_without_console_errors_and_loads_its_images(
    site: Path, served: str, browser
) -> None:
    problems: list[str] = []
    page = browser.new_page()
    # Every page starts the search worker, which indexes the whole site's search index (1 MB):
    # here it gets the real index's config with one document, so the loop renders pages rather
    # than rebuilding that index 40 times (test_search_... loads the real one).
    index = json.loads((site / "search" / "search_index.json").read_text())
    small = json.dumps({"config": index["config"], "docs": index["docs"][:1]})
    page.route(
        "**/search/search_index.json",
        lambda route: route.fulfill(status=200, content_type="application/json", body=small),
    )
    watch_for_problems(page, problems)
    images = 0
    for path in pages(site):
        before = len(problems)
        page.goto(f"{served}/{path}", wait_until="load")
        assert page.locator("h1").count() >= 1, f"{path} has no title"
        broken = page.evaluate(
            "Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0))"
            ".map(i => i.src)"
        )
        images += page.evaluate("document.images.length")
        problems += [f"{path}: image did not load: {src}" for src in broken]
        problems[before:] = [
            f"{path}: {p}" if not p.startswith(path) else p for p in problems[before:]
        ]
    page.close()
    assert problems == []
    assert images > 0, "no page showed a figure"


def test_search_finds_the_api_pages(served: str, browser) -> None:
    """With the site's real search index, without console errors."""
    problems: list[str] = []
    page = browser.new_page()
    watch_for_problems(page, problems)
    page.goto(f"{served}/index.html", wait_until="load")
    page.keyboard.press("/")  # Material's shortcut that focuses the search box
    page.locator("input.md-search__input").fill("fragility_attack")
    result = page.locator(".md-search-result__link").first
    result.wait_for(timeout=30_000)
    links = page.eval_on_selector_all(".md-search-result__link", "els => els.map(e => e.href)")
    page.close()
    assert any("reference/api/robust_train.attacks" in link for link in links), links
    assert problems == []
