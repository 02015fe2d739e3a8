"""Pages of the documentation site generated at build time (mkdocs-gen-files).

- `reference/cli.md`: every command's `--help`, read from the parsers themselves (each command
  run in this process with `--help`), so the page cannot drift from the code.
- `reference/api/<package>.md`: one page per public package, rendered by mkdocstrings from the
  docstrings (`::: robust_train.<package>`).
- `benchmarks/*.md` and `experiments/*.md`: the repository's benchmark and experiment pages,
  copied as they are (each README.md becomes its section's index; links to the figures in
  docs/images/ are made relative to the site).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[1]

API_PACKAGES = {
    "robust_train": "The top level: `RobustClassifier` and the version.",
    "robust_train.explain": "Differentiable explainers and importance maps.",
    "robust_train.attacks": "Fragility attacks on explanations.",
    "robust_train.regularizers": "Penalties on explanations (training loss terms).",
    "robust_train.metrics": "torchmetrics classes of the robustness measures.",
    "robust_train.metrics.functional": "The measures as pure batched functions.",
    "robust_train.certify": "Randomized-smoothing certificates of explanation robustness.",
    "robust_train.evaluation": "The evaluation engine: settings, measures, parts, protocols.",
    "robust_train.callbacks": "Lightning callbacks that measure robustness while a model trains.",
    "robust_train.training": "The LightningModule, its precision checks, run folders, loggers.",
    "robust_train.models": "Classifiers, the softplus surrogate and checkpoint loading.",
    "robust_train.data": "DataModules.",
    "robust_train.lightning": "The same classes for `import lightning as L`.",
}


def command_help(name: str) -> str:
    """`robust-train <name> --help`, captured in this process."""
    from robust_train.app.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            main([name, "--help"])
        except SystemExit:
            pass
    return out.getvalue().rstrip()


def write_cli_page() -> None:
    from robust_train.app.cli import COMMANDS, help_text

    os.environ.setdefault("COLUMNS", "100")
    lines = [
        "# Command line",
        "",
        "Generated from the parsers of `robust-train` when this site was built.",
        "",
        "```text",
        help_text(),
        "```",
        "",
    ]
    for name, (description, _) in COMMANDS.items():
        lines += [
            f"## `robust-train {name}`",
            "",
            description[:1].upper() + description[1:] + ".",
            "",
        ]
        lines += ["```text", command_help(name), "```", ""]
    with mkdocs_gen_files.open("reference/cli.md", "w") as page:
        page.write("\n".join(lines))


def write_api_pages() -> None:
    index = ["# Python API", "", "One page per package, generated from the docstrings.", ""]
    for package, summary in API_PACKAGES.items():
        path = f"reference/api/{package}.md"
        with mkdocs_gen_files.open(path, "w") as page:
            page.write(f"# `{package}`\n\n::: {package}\n")
        index.append(f"- [`{package}`]({package}.md): {summary}")
    with mkdocs_gen_files.open("reference/api/index.md", "w") as page:
        page.write("\n".join(index) + "\n")


def write_measures_page() -> None:
    """Every registered measure with its direction, unit and meaning (read from the registry)."""
    from robust_train.evaluation import MEASURES

    lines = [
        "# Measures",
        "",
        "Every number the evaluation engine reports ends in one of these measure names",
        "(`attack/<explainer>/<objective>/<measure>`, `<part>/<explainer>/<measure>`). Generated",
        "from `robust_train.evaluation.MEASURES` when this site was built.",
        "",
        "| measure | label | direction | unit | over images | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in MEASURES.items():
        meaning = m.meaning.replace("|", "\\|")
        lines.append(
            f"| `{name}` | {m.label} | {m.direction or '-'} | {m.unit or '-'} | {m.reduce} | "
            f"{meaning} |"
        )
    with mkdocs_gen_files.open("reference/measures.md", "w") as page:
        page.write("\n".join(lines) + "\n")


def copy_pages(folder: str) -> None:
    for source in sorted((ROOT / folder).glob("*.md")):
        name = "index.md" if source.name == "README.md" else source.name
        text = re.sub(r"\]\((\.\./\w+/)?README\.md", r"](\1index.md", source.read_text())
        text = text.replace("](../docs/images/", "](../images/")
        with mkdocs_gen_files.open(f"{folder}/{name}", "w") as page:
            page.write(text)


write_cli_page()
write_measures_page()
write_api_pages()
copy_pages("benchmarks")
copy_pages("experiments")
