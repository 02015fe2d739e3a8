"""The documentation site: it builds with warnings as errors, and every page renders in a real
headless browser (Debian's chromium, driven by Playwright) without console errors, with its
images loaded, and the site's search finds the API pages."""

from __future__ import annotations

import functools
import http.server
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

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """`mkdocs build --strict` into a temporary folder (what `make docs` runs)."""
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


def pages(site: Path) -> list[str]:
    return sorted(
        p.relative_to(site).as_posix()
        for p in site.rglob("index.html")
        if "assets" not in p.relative_to(site).parts
    )


def test_the_site_holds_every_section(site: Path) -> None:
    found = set(pages(site))
    for page in (
        "index.html", "getting-started/index.html", "reference/cli/index.html",
        "reference/api/robust_train.explain/index.html", "benchmarks/index.html",
        "concepts/threat-model/index.html", "tutorials/train-a-robust-model/index.html",
    ):  # fmt: skip
        assert page in found, page


def test_every_page_renders_without_console_errors_and_loads_its_images(
    site: Path, served: str, browser
) -> None:
    problems: list[str] = []
    page = browser.new_page()
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    # A request the next page's navigation cancels (the search worker, the favicon) is aborted,
    # not failed; any other failure is a problem.
    page.on(
        "requestfailed",
        lambda r: (
            "ERR_ABORTED" not in (r.failure or "")
            and problems.append(f"request failed: {r.url} ({r.failure})")
        ),
    )
    page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))
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
    page = browser.new_page()
    page.goto(f"{served}/index.html", wait_until="load")
    page.keyboard.press("/")  # Material's shortcut that focuses the search box
    page.locator("input.md-search__input").fill("fragility_attack")
    result = page.locator(".md-search-result__link").first
    result.wait_for(timeout=30_000)
    links = page.eval_on_selector_all(".md-search-result__link", "els => els.map(e => e.href)")
    page.close()
    assert any("reference/api/robust_train.attacks" in link for link in links), links
