"""mkdocs hook: the Benchmarks and Experiments sections of the navigation list their pages.

docs/gen_pages.py copies each benchmarks/*.md and experiments/*.md into the site; this hook names
each one in the navigation by its title (the page's first `# ` heading, up to a colon), the
folder's README.md first as the section's overview, so a new page appears without editing
mkdocs.yml.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = {"Benchmarks": "benchmarks", "Experiments": "experiments"}


def page_title(path: Path) -> str:
    """The page's first level-1 heading, cut at its first colon; the file name without one."""
    match = re.search(r"^# (.+)$", path.read_text(), flags=re.M)
    if not match:
        return path.stem.replace("_", " ").capitalize()
    return match.group(1).split(":")[0].strip()


def section_nav(folder: str) -> list[dict[str, str]]:
    pages = sorted((ROOT / folder).glob("*.md"))
    entries = [{page_title(p): f"{folder}/{p.name}"} for p in pages if p.name != "README.md"]
    entries.sort(key=lambda entry: next(iter(entry)).lower())
    return [{"Overview": f"{folder}/index.md"}, *entries]


def on_config(config: Any, **_: Any) -> Any:
    for entry in config["nav"]:
        if isinstance(entry, dict):
            for section, folder in SECTIONS.items():
                if section in entry:
                    entry[section] = section_nav(folder)
    return config
