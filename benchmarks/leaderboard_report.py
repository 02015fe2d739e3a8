"""The leaderboard's report: the table rows, the Pareto plot and LEADERBOARD.md.

Split from `leaderboard.py` (which trains and evaluates); `leaderboard.py` calls `write_report`
after a run and after `--ship`. Reads only the run's `Results` (results.json) and the method
table of `leaderboard_methods.py`, which both modules import (this one never imports
`leaderboard.py`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from benchmarks.leaderboard_methods import (
    BATCH,
    FINETUNE_LR,
    FINETUNED,
    LR,
    METHODS,
    MODEL,
    Results,
    RunResult,
    eligible,
)

COLUMNS = [  # (key in row["test"], header, digits)
    ("accuracy", "test acc", 3),
    ("sal/topk/topk_intersection", "sal top-k ∩ (attack)", 3),
    ("sal/topk/kendall", "sal Kendall", 3),
    ("sal/topk/spearman", "sal Spearman", 3),
    ("sal/random_sign/topk_intersection", "sal top-k ∩ (noise)", 3),
    ("ig/topk/topk_intersection", "IG top-k ∩ (attack)", 3),
    ("ig/topk/kendall", "IG Kendall", 3),
    ("ig/topk/spearman", "IG Spearman", 3),
    ("ig/random_sign/topk_intersection", "IG top-k ∩ (noise)", 3),
    ("fidelity/saliency", "fidelity (sal)", 3),
    ("lipschitz/saliency", "Lipschitz (sal)", 2),
]


def _stats(values: list[float]) -> tuple[float, float]:
    v = [x for x in values if isinstance(x, (int, float)) and math.isfinite(x)]
    if not v:
        return math.nan, math.nan
    mean = sum(v) / len(v)
    return mean, (max(v) - min(v)) / 2


def _fmt(values: list[float], digits: int) -> str:
    mean, half = _stats(values)
    if math.isnan(mean):
        return "n/a"
    n_finite = sum(1 for v in values if isinstance(v, (int, float)) and math.isfinite(v))
    if n_finite < len(values):  # a seed measured nothing (e.g. a collapsed model)
        return f"{mean:.{digits}f} ({n_finite} of {len(values)} seeds)"
    return f"{mean:.{digits}f} ± {half:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}"


def table_rows(results: Results) -> list[dict[str, Any]]:
    """One aggregated row per method (mean and half-range over seeds)."""
    groups: dict[str, list[RunResult]] = {}
    for r in results["rows"]:
        key = r["method"] if r["method"] != "finetune" else f"finetune ({r['base_method']})"
        groups.setdefault(key, []).append(r)
    nat = groups.get("natural", [])
    nat_time = _stats([r["seconds"] for r in nat])[0] if nat else math.nan
    nat_sal = _stats([r["test"]["sal/topk/topk_intersection"] for r in nat])[0] if nat else 0.0
    step_ms = results.get("step_ms") or {}
    plan = results["plan"]
    rows = []
    for key, runs in groups.items():
        method = runs[0]["method"] if runs[0]["method"] != "finetune" else runs[0]["base_method"]
        arg = METHODS[method].swept
        setting = f"{arg}={runs[0]['value']:g}" if runs[0].get("value") is not None else "-"
        seconds = [r["seconds"] for r in runs]
        sal = [r["test"]["sal/topk/topk_intersection"] for r in runs]
        ratio = step_ms.get(method, math.nan) / step_ms.get("natural", math.nan)
        if runs[0]["method"] == "finetune" or method in FINETUNED:
            # the natural training plus a few epochs of the method
            ratio = 1 + plan["finetune_epochs"] / plan["epochs"] * ratio
        rows.append(
            {
                "method": key,
                "setting": setting,
                "n_seeds": len(runs),
                "cells": [
                    _fmt([r["test"].get(c, math.nan) for r in runs], d) for c, _, d in COLUMNS
                ],
                "seconds": _stats(seconds)[0],
                "relative_time": _stats(seconds)[0] / nat_time,
                "step_ms": step_ms.get(method, math.nan),
                "cost": ratio,
                "gain": _stats(sal)[0] - nat_sal,
                "gain_half": _stats(sal)[1],
                "finite": all(math.isfinite(r["final_loss"]) for r in runs),
                "accuracy": _stats([r["test"]["accuracy"] for r in runs])[0],
            }
        )
    return rows


# Label offsets (points) tried in turn: right of the point, then left, above, below, further out.
_OFFSETS = [
    (5, 3, "left", "bottom"),
    (5, -3, "left", "top"),
    (-5, 3, "right", "bottom"),
    (-5, -3, "right", "top"),
    (0, 7, "center", "bottom"),
    (0, -7, "center", "top"),
    (5, 13, "left", "bottom"),
    (5, -13, "left", "top"),
    (-5, 13, "right", "bottom"),
    (-5, -13, "right", "top"),
]


def _place_labels(fig: Any, ax: Any, items: list[tuple[float, float, str]]) -> None:
    """Annotate each point with the first offset whose text box stays inside the axes and
    overlaps no label placed before it (the first offset when none does)."""
    from matplotlib.transforms import Bbox

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    taken: list[Any] = []  # label boxes, and a small box around every point
    for x, y, _ in items:
        px, py = ax.transData.transform((x, y))
        taken.append(Bbox.from_extents(px - 4, py - 4, px + 4, py + 4))

    def annotate(text: str, x: float, y: float, offset: tuple[int, int, str, str]) -> Any:
        dx, dy, ha, va = offset
        return ax.annotate(
            text, (x, y), textcoords="offset points", xytext=(dx, dy), ha=ha, va=va, fontsize=8
        )

    for x, y, text in items:
        for offset in _OFFSETS:
            label = annotate(text, x, y, offset)
            box = label.get_window_extent(renderer).expanded(1.02, 1.1)
            if (
                box.x0 >= inside.x0
                and box.x1 <= inside.x1
                and box.y0 >= inside.y0
                and box.y1 <= inside.y1
                and not any(box.overlaps(t) for t in taken)
            ):
                break
            label.remove()
        else:  # nowhere free: the first choice, overlapping
            label = annotate(text, x, y, _OFFSETS[0])
        taken.append(label.get_window_extent(renderer))


def pareto_plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Robustness gain (saliency top-k intersection over natural) against training time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for r in rows:  # the step profile when there is one, else the runs' wall time
        r["x"] = r["cost"] if math.isfinite(r["cost"]) else r["relative_time"]
    pts = [r for r in rows if math.isfinite(r["x"]) and math.isfinite(r["gain"])]
    natural_acc = next((r["accuracy"] for r in rows if r["method"] == "natural"), 0.0)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    front, best = [], -math.inf
    for r in sorted(pts, key=lambda r: r["x"]):
        if r["gain"] > best:
            front.append(r)
            best = r["gain"]
    for r in pts:
        ax.errorbar(
            r["x"],
            r["gain"],
            yerr=r["gain_half"],
            fmt="o" if r["accuracy"] >= natural_acc - 0.01 else "x",
            color="tab:red" if r in front else "tab:gray",
            capsize=3,
        )
    ax.set_xscale("log")
    ax.set_xlabel("training cost relative to natural (step profile x epochs; log)")
    ax.set_ylabel("gain in saliency top-100 intersection\nunder the RAR attack (test)")
    ax.axhline(0, color="k", lw=0.5)
    ax.set_title(
        "MNIST-5k: robustness gain vs training cost (mean ± half-range, 2 seeds)\n"
        "x: test accuracy more than 1 point below natural",
        fontsize=10,
    )
    fig.tight_layout()  # before the labels: it moves the axes, and with them every point
    _place_labels(
        fig,
        ax,
        [
            (r["x"], r["gain"], f"{r['method']} (acc {r['accuracy']:.3f})")
            for r in sorted(pts, key=lambda r: r["x"])
        ],
    )
    if front:
        ax.plot(
            [r["x"] for r in front],
            [r["gain"] for r in front],
            "--",
            color="tab:red",
            lw=1,
            label="Pareto front",
        )
        ax.legend(loc="lower right")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(results: Results, folder: Path, *, quick: bool) -> Path:
    """LEADERBOARD.md (table, sweeps, settings vs papers) and the Pareto plot in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = table_rows(results)
    png = folder / "leaderboard_pareto.png"
    pareto_plot(rows, png)
    lines = [
        *_banner_lines(results, quick),
        *_table_lines(results, rows, png),
        *_sweep_lines(results),
        *_settings_lines(results),
        *shipped_section(results.get("shipped")),
    ]
    path = folder / "LEADERBOARD.md"
    marker = hand_written_marker(results)
    kept = kept_notes(path, marker)
    lines += ["", marker, *([kept] if kept else [])]
    path.write_text("\n".join(lines).rstrip("\n") + "\n")
    return path


def _banner_lines(results: Results, quick: bool) -> list[str]:
    """The title, the quick / partial warnings and the commands that made the run."""
    plan = results["plan"]
    lines = ["# MNIST-5k attributional-robustness leaderboard", ""]
    if quick:
        lines += ["**QUICK SMOKE RUN: sizes are tiny, the numbers mean nothing.**", ""]
    if results["skipped"]:
        lines += [
            f"**PARTIAL: the time budget ran out; not run: {', '.join(results['skipped'])}.**",
            "",
        ]
    return lines + [
        "Commands: `OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.leaderboard --workers 2 "
        f"--budget-min {results.get('budget_min', 40):g} "
        f"--out {results.get('out', 'RUN_DIR')}`, then `... "
        f"-m benchmarks.leaderboard --ship {results.get('out', 'RUN_DIR')}` (step profile, "
        "shipped checkpoints). Wall "
        f"{results['wall_seconds'] / 60:.1f} min for {len(plan['seeds'])} seeds, 2 runs at a "
        "time, 1 thread each, on the 2-core CPU machine shared with other work.",
        "",
    ]


def _table_lines(results: Results, rows: list[dict[str, Any]], png: Path) -> list[str]:
    """The main table (one aggregated row per method), what its columns mean, and the plot."""
    lines = [
        "| method | setting | "
        + " | ".join(h for _, h, _ in COLUMNS)
        + " | step ms | cost × natural | run s | finite loss |",
        "|" + "---|" * (len(COLUMNS) + 6),
    ]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['setting']} | "
            + " | ".join(r["cells"])
            + f" | {r['step_ms']:.0f} | {r['cost']:.1f} | {r['seconds']:.0f} | "
            + ("yes" if r["finite"] else "NO")
            + " |"
        )
    return lines + [
        "",
        "Test acc: the whole 1,000-image test split. "
        "Mean ± half the range over seeds. Attack columns: the RAR top-k attack "
        "(attack k 200, reported k 100); noise columns: random signs of the same budget. "
        "Fidelity: AUC_LIF - AUC_MIF (higher is better); Lipschitz: local Lipschitz estimate of "
        "the max-normalised saliency map (lower is smoother). step ms: one training step of "
        "batch 64, one thread, measured one method after the other in one process "
        "(`step_profile`); cost × natural: step ms × epochs over natural's (fine-tuning: the "
        "natural training plus its epochs of the method). run s: wall time of each training "
        "run, two runs at a time on the shared 2-core machine (noisy).",
        "",
        f"![Pareto plot]({png.name})",
        "",
    ]


def _sweep_lines(results: Results) -> list[str]:
    """The weight rule in words, the picks, and one line per val sweep run."""
    plan = results["plan"]
    lines = [
        "## Weight sweeps (val split, first seed)",
        "",
        f"Natural val accuracy: {results['natural_val_accuracy']:.3f}. Rule: the value with "
        "the largest val saliency top-k intersection whose val accuracy is within 1 point "
        "of natural, up to the noise of the 500-image split (the drop may pass 1 point by "
        "1.645 standard errors of the paired per-image difference; `eligible` in "
        "leaderboard_methods.py); when none is, the best val accuracy. Best method trained "
        f"from scratch by the same rule: **{results['best']}** (the finetune row); best of all, "
        "fine-tuned methods included (the shipped robust model): "
        f"**{results.get('robust')}**. {', '.join(sorted(FINETUNED))}: the first seed's "
        f"natural model fine-tuned {plan['finetune_epochs']} epochs at lr {FINETUNE_LR} "
        "(per-step cosine decay to 0).",
        "",
        "| method | value | val acc | within the accuracy margin | val sal top-k ∩ | train s "
        "| chosen |",
        "|---|---|---|---|---|---|---|",
    ]
    chosen_ids = {r["id"] for r in results["rows"]}
    nat_acc = float(results["natural_val_accuracy"])  # type: ignore[arg-type]
    nat_correct = next(
        (
            r["val"].get("correct")
            for r in results["rows"]
            if r["method"] == "natural" and "val" in r
        ),
        None,
    )
    for name, runs in results["sweeps"].items():
        arg = METHODS[name].swept
        for r in runs:
            ok = eligible(r, nat_acc, nat_correct)
            lines.append(
                f"| {name} | {arg}={r['value']:g} | {r['val']['accuracy']:.3f} | "
                + ("yes" if ok else "no")
                + f" | {r['val']['sal/topk/topk_intersection']:.3f} | {r['seconds']:.0f} | "
                + ("**yes**" if r["id"] in chosen_ids else "")
                + " |"
            )
    return lines


def _settings_lines(results: Results) -> list[str]:
    """Model, optimiser and evaluation sizes here, and each method's settings beside its paper's."""
    plan = results["plan"]
    lines = [
        "",
        "## Settings here versus the papers",
        "",
        f"Model: MNISTConvNet(channels={MODEL['channels']}, hidden={MODEL['hidden']}) "
        f"(RAR's layout at reduced width); Adam lr {LR}, batch {BATCH}, {plan['epochs']} "
        f"epochs on the 3,500 training images (RAR: 100k steps of batch 50); fine-tuning "
        f"{plan['finetune_epochs']} epochs at lr {FINETUNE_LR} (per-step cosine decay to 0). "
        "One thread per run, runs in parallel on the 2-core machine next to other work, "
        "so times are noisy.",
        "",
        f"Evaluation: the RAR preset on the first {plan['test_images']} test images "
        f"(correctly classified ones attacked), {plan['test_steps']} steps of "
        f"{max(0.01, 0.75 / plan['test_steps']):.3g}, {plan['test_restarts']} restart(s), "
        f"IG with {plan['ig_steps']} points, Lipschitz {plan['lipschitz_samples']} samples, "
        f"fidelity {plan['fidelity_steps']} steps (paper: all 10,000 test images, 100 "
        "steps of 0.01, 3 restarts, IG 100 points). Val score: saliency top-k attack, "
        f"{plan['val_steps']} steps, first {plan['val_images']} val images.",
        "",
        "| method | here (fixed) | swept | paper |",
        "|---|---|---|---|",
    ]
    for name, m in results["methods"].items():
        lines.append(
            f"| {name} | {m['fixed'] or '-'} | {m['swept'] or '-'} {m['values'] or ''} "
            f"| {m['paper']} |"
        )
    return lines


def hand_written_marker(results: Results) -> str:
    """The line after which LEADERBOARD.md holds notes written by hand about this run."""
    return (
        f"<!-- written by hand below this line, about the run {results.get('out', 'RUN_DIR')}; "
        "kept when --report or --ship rewrites the table of the same run -->"
    )


def kept_notes(path: Path, marker: str) -> str:
    """What follows `marker` in an existing `path` (nothing for another run, or no file)."""
    if not path.is_file():
        return ""
    text = path.read_text()
    if marker not in text:
        return ""
    return text.split(marker, 1)[1].strip("\n")


def shipped_section(shipped: dict[str, dict[str, Any]] | None) -> list[str]:
    """The shipped checkpoints' table; tests/test_shipped_mnist_checkpoints.py reads it."""
    if not shipped:
        return []
    lines = [
        "",
        "## Shipped checkpoints",
        "",
        "Accuracy on the whole 1,000-image test split (the RAR columns come from the table "
        "above: first seed, first test images).",
        "",
        "| checkpoint | test acc | run | sal top-k ∩ | IG top-k ∩ | train s | size |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in shipped.items():
        lines.append(
            f"| `checkpoints/{name}.ckpt` | {s['accuracy']:.3f} | {s['run']} | "
            f"{s['sal']:.3f} | {s['ig']:.3f} | {s['seconds']:.0f} | "
            f"{s['bytes'] / 1e6:.2f} MB |"
        )
    return lines
