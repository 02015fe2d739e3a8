"""Robustness report: a markdown summary with PNG plots, from `evaluate_classifier` results.

`write_report({"baseline": r1, "robust": r2}, "runs/demo")` writes report.md, results.json and
plots: MIF/LIF fidelity curves, example maps before/after the top-k attack, and (when training
histories are given) robustness per epoch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

from robust_train.attacks import OBJECTIVES, FragilityObjective

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

Row = tuple[str, tuple[str, ...], str]

HEAD_ROWS: tuple[Row, ...] = (
    ("test accuracy (whole split)", ("accuracy",), "{:.3f}"),
    ("images attacked (correctly classified)", ("n_attacked",), "{:d}"),
)
METRIC_LABELS = {
    "topk_intersection": ("top-k intersection", "{:.3f}"),
    "spearman": ("Spearman", "{:.3f}"),
    "kendall": ("Kendall", "{:.3f}"),
    "center_shift": ("center shift (px)", "{:.3f}"),
    "region_mass": ("map mass in target region", "{:.3f}"),
    "n_unmeasured": ("images not measured (attack could not move them)", "{:d}"),
}


def attack_rows(results: Mapping[str, Mapping[str, Any]]) -> list[Row]:
    """Rows of every attack in the results, with the metrics its objective class reports.

    The attacks and explainers come from the results (`attacks_by_explainer`, else `attacks`);
    the metrics of each attack from `robust_train.attacks.OBJECTIVES[attack].report_metrics`.
    With several attacked explainers each row names its explainer.

    Example:
        >>> attack_rows({"m": {"attacks": {"topk": {}}}})[0]
        ('topk: top-k intersection', ('attacks', 'topk', 'topk_intersection'), '{:.3f}')
    """
    blocks: dict[str, list[str]] = {}
    for r in results.values():
        by_explainer = _get(r, ("attacks_by_explainer",)) or {"": _get(r, ("attacks",)) or {}}
        for explainer, attacks in by_explainer.items():
            names = blocks.setdefault(explainer, [])
            names += [a for a in attacks if a not in names]
    several = len(blocks) > 1
    rows: list[Row] = []
    for explainer, attacks in blocks.items():
        for attack in attacks:
            prefix = f"{explainer} / {attack}" if several else attack
            base = ("attacks_by_explainer", explainer) if several else ("attacks",)
            for metric in (*_report_metrics(attack), "n_unmeasured"):
                label, fmt = METRIC_LABELS.get(metric, (metric, "{:.3f}"))
                rows.append((f"{prefix}: {label}", (*base, attack, metric), fmt))
    return rows


def _report_metrics(attack: str) -> tuple[str, ...]:
    return OBJECTIVES.get(attack, FragilityObjective).report_metrics


def _get(result: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = result
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def _fmt(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt.format(value)


def summary_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """Side-by-side markdown table: one column per model, one row per metric.

    Example:
        >>> print(summary_table({"a": {"accuracy": 0.5}}).splitlines()[2])
        | test accuracy (whole split) | 0.500 |
    """
    names = list(results)
    lines = ["| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    rows = [*HEAD_ROWS, *attack_rows(results)]
    explainers: list[str] = []
    for r in results.values():
        explainers += [e for e in _get(r, ("lipschitz",)) or {} if e not in explainers]
    for e in explainers:
        rows.append((f"Lipschitz estimate: {e}", ("lipschitz", e, "mean"), "{:.3f}"))
    for e in explainers:
        rows.append((f"fidelity estimate: {e}", ("fidelity", e, "estimate", "mean"), "{:.3f}"))
    rows.append(("training seconds (until this checkpoint)", ("training_seconds",), "{:.1f}"))
    rows.append(("share of training time in the monitors", ("monitor_share",), "{:.1%}"))
    for label, path, fmt in rows:
        cells = [_fmt(_get(r, path), fmt) for r in results.values()]
        if all(c == "-" for c in cells) or (path[-1] == "n_unmeasured" and _all_zero(cells)):
            continue
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _all_zero(cells: list[str]) -> bool:
    return all(c in ("-", "0") for c in cells)


def plot_fidelity(
    results: Mapping[str, Mapping[str, Any]], path: Path, explainer: str = "saliency"
) -> Path | None:
    """Mean MIF (dashed) and LIF (solid) curves of one explainer, one colour per model."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    drawn = False
    for i, (name, r) in enumerate(results.items()):
        f = _get(r, ("fidelity", explainer))
        if not f:
            continue
        color = f"C{i}"
        ax.plot(f["fractions"], f["lif"], color=color, label=f"{name} LIF")
        ax.plot(f["fractions"], f["mif"], color=color, linestyle="--", label=f"{name} MIF")
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("fraction of pixels replaced")
    ax.set_ylabel("score of the predicted class (normalised)")
    ax.set_title(f"Fidelity curves ({explainer}); area between = fidelity")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_examples(results: Mapping[str, Mapping[str, Any]], path: Path) -> Path | None:
    """Input, clean map, attacked input, attacked map for a few images; a block of rows per
    model."""
    blocks = [(name, r["_examples"]) for name, r in results.items() if r.get("_examples")]
    if not blocks:
        return None
    n_img = min(len(ex["inputs"]) for _, ex in blocks)
    titles = ("input", "clean map", "attacked input", "attacked map")
    fig, axes = plt.subplots(
        len(blocks) * n_img, 4, figsize=(6.4, 1.6 * len(blocks) * n_img), squeeze=False
    )
    for b, (name, ex) in enumerate(blocks):
        for i in range(n_img):
            row = axes[b * n_img + i]
            images = (
                ex["inputs"][i],
                ex["clean_map"][i],
                ex["adversarial"][i],
                ex["attacked_map"][i],
            )
            for j, (ax, img) in enumerate(zip(row, images, strict=True)):
                img = img.permute(1, 2, 0).squeeze(-1) if img.dim() == 3 else img
                ax.imshow(img.numpy(), cmap="gray" if j % 2 == 0 else "hot")
                ax.set_xticks([])
                ax.set_yticks([])
                if b * n_img + i == 0:
                    ax.set_title(titles[j], fontsize=8)
            row[0].set_ylabel(name, fontsize=8)
    fig.suptitle("Top-k attack on the saliency map", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_history(
    histories: Mapping[str, Mapping[str, list[tuple[int, float]]]], path: Path
) -> Path | None:
    """Robustness metrics per epoch: a grid of labelled panels, one line per model.

    Drawn by `robust_train.callbacks._figures.history_figure` (readable titles, higher/lower-is-
    better y labels, whole-epoch ticks, one legend), the same figure the demo writes.
    """
    from robust_train.callbacks._figures import history_figure

    plain = {name: dict(h) for name, h in histories.items()}
    keys = {
        k
        for h in plain.values()
        for k in h
        if not k.startswith(("robustness/seconds", "robustness/share"))
    }
    if not keys:
        return None
    fig = history_figure(plain)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def to_json(results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Drop the private (tensor) entries so results can be written as JSON."""
    return {
        name: {k: v for k, v in r.items() if not k.startswith("_")} for name, r in results.items()
    }


def write_report(
    results: Mapping[str, Mapping[str, Any]],
    out_dir: str | Path,
    histories: Mapping[str, Mapping[str, list[tuple[int, float]]]] | None = None,
    title: str = "Robustness of explanations",
) -> Path:
    """Write report.md, results.json and the PNG plots into `out_dir`; return the report path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(to_json(results), indent=2))
    parts = [f"# {title}", "", summary_table(results), ""]
    settings = next(iter(results.values())).get("settings", {})
    if settings:
        parts += ["Settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()), ""]
    parts += [
        "Top-k intersection and Spearman: higher is more robust (1 = the map did not move). "
        "Center shift: lower is more robust. Lipschitz estimate: lower is smoother. "
        "Fidelity estimate (AUC_LIF - AUC_MIF): higher is more faithful; "
        "a random map scores about 0.",
        "",
    ]
    for name, fn in (
        ("robustness_per_epoch.png", lambda p: plot_history(histories or {}, p)),
        ("fidelity_curves.png", lambda p: plot_fidelity(results, p)),
        ("attack_examples.png", lambda p: plot_examples(results, p)),
    ):
        if fn(out / name) is not None:
            parts += [f"![{name}]({name})", ""]
    path = out / "report.md"
    path.write_text("\n".join(parts))
    return path
