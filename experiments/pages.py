"""Pages of the experiments, generated from their results with the prose kept in a file of its own.

A page `experiments/<PAGE>.md` is written from two files:

- the experiment's results under `experiments/results/` (JSON, gzip-compressed when large), and
- its prose, `experiments/prose/<PAGE>.md`, written by hand: the words around the numbers.

The prose file is cut into named blocks by lines `<!-- prose: NAME -->` (`read_prose`), which a
page writer places where it wants them (the leaderboard: "run", "shipped", "notes"), and a line
`<!-- table: KEY -->` stands where the results table KEY goes (`render_tables`; `tables_page`
writes such a page). A results table is `{"columns": [...], "align": "|---|---|", "rows":
[[cell, ...], ...]}`, its cells as they are printed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from experiments.support import read_text

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
PROSE = HERE / "prose"
IMAGES = ROOT / "docs" / "images"
PROSE_MARK = re.compile(r"^<!-- prose: (\w+) -->\n", re.M)
TABLE_MARK = re.compile(r"^<!-- table: ([\w-]+) -->$", re.M)


def read_prose(path: Path) -> dict[str, str]:
    """The blocks of a prose file by name (the text after each `<!-- prose: NAME -->` line, up
    to the next one, without its surrounding blank lines)."""
    parts = PROSE_MARK.split(path.read_text())
    return {name: text.strip("\n") for name, text in zip(parts[1::2], parts[2::2], strict=True)}


def markdown_table(table: dict[str, Any]) -> str:
    """The markdown of one results table."""
    lines = ["| " + " | ".join(table["columns"]) + " |", table["align"]]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in table["rows"]]
    return "\n".join(lines)


def render_tables(prose: str, tables: dict[str, dict[str, Any]]) -> str:
    """`prose` with every `<!-- table: KEY -->` line replaced by the table KEY of `tables`.

    Raises:
        KeyError: a marker names a table the results do not hold.
    """

    def table(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in tables:
            raise KeyError(f"the prose asks for table {key!r}; the results hold {sorted(tables)}")
        return markdown_table(tables[key])

    return TABLE_MARK.sub(table, prose)


def tables_page(page: str) -> Path:
    """Write `experiments/<page>` from its prose `experiments/prose/<page>` and the tables of
    `experiments/results/<page stem, lower case>.json` (a JSON object with a "tables" member)."""
    data = json.loads(read_text(RESULTS / f"{Path(page).stem.lower()}.json"))
    text = render_tables((PROSE / page).read_text(), data["tables"])
    path = HERE / page
    path.write_text(text)
    return path


def store_page(page: str, text: str) -> Path:
    """Keep a page's full markdown `text` as its prose and its results (`split_tables`), then
    write the page from them (`tables_page`): how a study that composes its page as markdown (or
    adds a section to it) stores it, so the page stays generated. Other members of the results
    file are kept."""
    prose, tables = split_tables(text)
    results = RESULTS / f"{Path(page).stem.lower()}.json"
    data = json.loads(read_text(results)) if results.is_file() else {}
    data["tables"] = tables
    results.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    (PROSE / page).write_text(prose)
    return tables_page(page)


def page_text(page: str) -> str:
    """The page as its prose and results give it (empty when it has neither yet)."""
    if not (PROSE / page).is_file():
        return ""
    data = json.loads(read_text(RESULTS / f"{Path(page).stem.lower()}.json"))
    return render_tables((PROSE / page).read_text(), data["tables"])


def _slug(heading: str, most: int = 32) -> str:
    """A table's key from the heading above it: its first words, joined by "-"."""
    words, key = re.findall(r"[a-z0-9]+", heading.lower()), ""
    for word in words:
        if key and len(key) + 1 + len(word) > most:
            break
        key = f"{key}-{word}" if key else word
    return key or "top"


def split_tables(page: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """A written page cut into its prose (each table replaced by a marker, keyed by the heading
    above it) and its tables: how a hand-written page becomes prose + results. Only tables that
    `markdown_table` writes back unchanged are taken out; the others stay in the prose."""
    prose: list[str] = []
    tables: dict[str, dict[str, Any]] = {}
    heading, lines, i = "top", page.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if not (line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|-")):
            prose.append(line)
            i += 1
            continue
        end = i + 2
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        block = lines[i:end]
        table = {"columns": block[0][2:-2].split(" | "), "align": block[1],
                 "rows": [row[2:-2].split(" | ") for row in block[2:]]}  # fmt: skip
        key, n = _slug(heading), 2
        while key in tables:
            key, n = f"{_slug(heading)}-{n}", n + 1
        if markdown_table(table) == "\n".join(block):
            tables[key] = table
            prose.append(f"<!-- table: {key} -->")
        else:
            prose.extend(block)
        i = end
    return "\n".join(prose), tables
