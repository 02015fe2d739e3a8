"""experiments/certify_curves.py: a run of `robust-train certify` becomes a section of CERTIFY.md
whose tables go to the results file (the page stays generated), without the command's title and
legend (the page's prose says them once)."""

from __future__ import annotations

import argparse
import json

import pytest

from experiments import certify_curves, pages

SUMMARY = """# Certified top-98 overlap of smoothed saliency

| L2 radius | a certified | a attack (UCB) | a random |
|---|---|---|---|
| 0 | 0.900 | - | - |
| 0.125 | 0.500 | 0.950 (1.000) | 0.970 |

| model | images | radius certifying half of the top-k | s per image |
|---|---|---|---|
| a | 2 | 0.1250 | 0.50 |

Settings: explainer=saliency, sigma=0.25.

## How to read it

- **certified** (lower bound): ...
"""


def test_a_run_is_a_section_whose_tables_go_to_the_results(tmp_path, monkeypatch) -> None:
    args = argparse.Namespace(models=["a", "b"], n_images=2, noise_samples=40, quick=True, extra=[])
    argv = certify_curves.certify_argv(args, tmp_path / "out")
    assert argv[:4] == ["certify", "--ckpt", "mnist5k_a", "mnist5k_b"]
    assert argv[argv.index("--noise-samples") + 1] == "40" and "--attack-steps" in argv
    text = certify_curves.section(SUMMARY, argv, 12.3)
    assert text.startswith("## robust-train certify on the shipped MNIST-5k models — ")
    assert f"- command: `robust-train {' '.join(argv)}`" in text and "run took 12 s" in text
    assert "# Certified top-98" not in text and "How to read it" not in text
    assert text.endswith("Settings: explainer=saliency, sigma=0.25.\n")
    for name, folder in (("HERE", tmp_path), ("PROSE", tmp_path / "p"), ("RESULTS", tmp_path)):
        folder.mkdir(exist_ok=True)
        monkeypatch.setattr(pages, name, folder)
    page = "# Certify\n\nwords\n\n" + text
    assert pages.store_page("CERTIFY.md", page).read_text() == page
    prose = (tmp_path / "p" / "CERTIFY.md").read_text()
    assert "\n|---" not in prose and "0.1250" not in prose  # every number in the results
    tables = json.loads((tmp_path / "certify.json").read_text())["tables"]
    assert [row[0] for row in tables["robust-train-certify-on-the"]["rows"]] == ["0", "0.125"]


def test_a_bad_flag_of_the_command_is_its_one_line_error(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    code = certify_curves.main(["--quick", "--no-write", "--out", str(out), "--", "--sigma", "0"])
    assert code == 2 and not out.exists()
    assert "`--sigma` must be > 0, got 0.0" in capsys.readouterr().err


@pytest.mark.heavy  # a study's quick run: the command on the shipped MNIST-5k pair
def test_a_quick_run_prints_its_section_and_leaves_the_page(tmp_path, capsys) -> None:
    page = (pages.HERE / "CERTIFY.md").read_text()
    assert certify_curves.main(["--quick", "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "| L2 radius | baseline certified |" in printed and "| robust | 2 |" in printed
    assert (pages.HERE / "CERTIFY.md").read_text() == page
