"""A study that composes its page as markdown stores it as prose + results, and the page written
back from them is the same text (`experiments.pages.store_page`)."""

from __future__ import annotations

import json

from experiments import pages

PAGE = "# Study\n\nwords 0.5\n\n## run 1\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nmore\n"


def test_a_stored_page_is_written_back_unchanged_and_sections_add_up(tmp_path, monkeypatch):
    for name, folder in (
        ("HERE", tmp_path),
        ("PROSE", tmp_path / "p"),
        ("RESULTS", tmp_path / "r"),
    ):
        folder.mkdir(exist_ok=True)
        monkeypatch.setattr(pages, name, folder)
    (tmp_path / "r" / "study.json").write_text(json.dumps({"meta": 1}))
    assert pages.page_text("STUDY.md") == ""
    assert pages.store_page("STUDY.md", PAGE).read_text() == PAGE
    stored = json.loads((tmp_path / "r" / "study.json").read_text())
    assert stored["meta"] == 1 and stored["tables"]["run-1"]["rows"] == [["1", "2"]]
    assert "| 1 | 2 |" not in (tmp_path / "p" / "STUDY.md").read_text()
    added = "\n## run 1\n\n| a | b |\n|---|---|\n| 3 | 4 |\n"
    pages.store_page("STUDY.md", pages.page_text("STUDY.md") + added)
    assert (tmp_path / "STUDY.md").read_text() == PAGE + added
    assert set(json.loads((tmp_path / "r" / "study.json").read_text())["tables"]) == {
        "run-1",
        "run-1-2",
    }
