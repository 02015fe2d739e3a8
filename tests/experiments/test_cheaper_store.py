"""cheaper_robustness.store_summary: a written run's summary table becomes a table of CHEAPER.md's
results and the page is written from its prose (no fit: the run's file is given)."""

from __future__ import annotations

import json

import pytest

from experiments import cheaper_robustness as cr
from experiments import pages

RUN = """| variant | seeds | saliency top-100 under attack (range over seeds) | random map top-100 ∩ (no attack) |
|---|---|---|---|
| natural | 2 | 0.192 (0.187-0.197) | 0.129 |
| every_map (the recipe shipped now) | 2 | 0.790 (0.780-0.800) | 0.128 |

Per run:

| variant | seed | other |
|---|---|---|
| natural | 0 | x |

Natural epoch: 1.30 CPU s.
"""  # noqa: E501


@pytest.fixture
def page_folder(tmp_path, monkeypatch):
    for name in ("results", "prose"):
        (tmp_path / name).mkdir()
    monkeypatch.setattr(pages, "HERE", tmp_path)
    monkeypatch.setattr(pages, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(pages, "PROSE", tmp_path / "prose")
    old = {"columns": ["a"], "align": "|---|", "rows": [["stale"]]}
    keep = {"columns": ["b"], "align": "|---|", "rows": [["kept"]]}
    (tmp_path / "results" / "cheaper.json").write_text(
        json.dumps({"tables": {"new": old, "other": keep}})
    )
    (tmp_path / "prose" / "CHEAPER.md").write_text(
        "# Page\n\n<!-- table: other -->\n\n<!-- table: new -->\n"
    )
    return tmp_path


def test_the_summary_table_replaces_the_stored_one_and_the_page_is_written(page_folder):
    run = page_folder / "run.md"
    run.write_text(RUN)
    page = cr.store_summary(run, "new")
    text = page.read_text()
    summary = RUN.split("\n\n")[0]
    assert summary in text and "stale" not in text and "| kept |" in text
    assert "| natural | 0 | x |" not in text  # only the first table: the summary
    stored = json.loads((page_folder / "results" / "cheaper.json").read_text())["tables"]["new"]
    assert stored["rows"][1] == ["every_map (the recipe shipped now)", "2", "0.790 (0.780-0.800)",
                                 "0.128"]  # fmt: skip
    assert pages.markdown_table(stored) == summary


def test_a_file_without_a_table_or_missing_is_refused(page_folder, capsys):
    empty = page_folder / "empty.md"
    empty.write_text("no table here\n")
    with pytest.raises(ValueError, match="no table"):
        cr.store_summary(empty, "new")
    with pytest.raises(SystemExit) as exit_:
        cr.main(["--store", str(page_folder / "nope.md"), "new"])
    assert exit_.value.code == 2 and "nope.md" in capsys.readouterr().err
