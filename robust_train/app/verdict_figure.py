"""The compact verdict figure of `robust-train evaluate` and `compare`: one row per explainer
(per model and explainer for `compare`): the input, its clean map, the attacked map, and the
score with its verdict (`robust_train.evaluation.verdict`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

from robust_train.evaluation.verdict import Verdict, verdicts

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["verdict_rows", "write_verdict_figure"]


def verdict_rows(results: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, Verdict, Any]]:
    """(row label, verdict, example grid or None) for every model and attacked explainer; the
    grid is that of the attack the verdict rests on.

    Examples:
        >>> m = {"attack/saliency/topk/topk_intersection": 0.5}
        >>> [(label, v.verdict) for label, v, _ in verdict_rows({"a": {"measures": m}})]
        [('saliency', 'robust')]
    """
    rows = []
    for model, result in results.items():
        examples = result.get("_examples") or {}
        for verdict in verdicts(dict(result)):
            grid = examples.get(f"attack/{verdict.explainer}/{verdict.attack}/examples")
            label = verdict.explainer if len(results) == 1 else f"{model}: {verdict.explainer}"
            rows.append((label, verdict, grid))
    return rows


def write_verdict_figure(results: Mapping[str, Mapping[str, Any]], path: Path) -> Path | None:
    """Write the figure to `path` (a PNG); None when there is no attacked explainer."""
    rows = verdict_rows(results)
    if not rows:
        return None
    fig, axes = plt.subplots(len(rows), 4, figsize=(8.0, 1.9 * len(rows)), squeeze=False)
    titles = ("input", "clean map", "attacked map", "score")
    for r, (label, verdict, grid) in enumerate(rows):
        ax_row = axes[r]
        images = [] if grid is None else [grid.inputs[0], grid.clean_maps[0], grid.attacked_maps[0]]
        for j in range(3):
            ax = ax_row[j]
            ax.set_xticks([])
            ax.set_yticks([])
            if j < len(images):
                img = images[j]
                img = img.permute(1, 2, 0).squeeze(-1) if img.dim() == 3 else img
                ax.imshow(img.float().numpy(), cmap="gray" if j == 0 else "hot")
            if r == 0:
                ax.set_title(titles[j], fontsize=9)
        ax_row[0].set_ylabel(label, fontsize=8)
        text = ax_row[3]
        text.axis("off")
        if r == 0:
            text.set_title(titles[3], fontsize=9)
        lines = [verdict.verdict]
        if verdict.attack is not None:
            lines += [f"top-k {verdict.score:.3f} ({verdict.attack})"]
            lines += [f"map = input {verdict.reference:.3f}", f"noise {verdict.noise:.3f}"]
        text.text(0.0, 0.5, "\n".join(lines), fontsize=8, va="center")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
