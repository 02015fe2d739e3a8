"""The leaderboard's trade-off plots: every swept setting of every method (CV numbers), the
chosen one marked, against CV accuracy and against training cost; one figure per explainer
(saliency: leaderboard_pareto.png, IG: leaderboard_pareto_ig.png).

Reads only the run's results (results.json) and the method table; imported by
`leaderboard_report.py`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from experiments.leaderboard_methods import ACCURACY_MARGIN, METHODS, SHORT


def fit_cpu_s(results: dict[str, Any], name: str) -> float:
    """Mean CPU seconds of the method's final fits (over the seeds that finished); NaN if none."""
    cpu = [
        float(r["cpu_s"])
        for r in results.get("jobs", [])
        if r.get("kind") == "fit" and r.get("method") == name and "failed" not in r
        and isinstance(r.get("cpu_s"), (int, float))
    ]  # fmt: skip
    return sum(cpu) / len(cpu) if cpu else math.nan


def method_cost(results: dict[str, Any], name: str) -> float:
    """Training cost relative to natural: the CPU seconds of the method's final fits over
    natural's (means over seeds; a fine-tune: the natural fit plus its own), the whole-fit
    measure the sweeps and `CHEAPER.md` use. Without fit records (a run stopped before its fits):
    the step profile's ms ratio x epochs ratio; NaN without either."""
    if name == "natural":
        return 1.0
    tuned = METHODS[name].finetuned
    natural, own = fit_cpu_s(results, "natural"), fit_cpu_s(results, name)
    if math.isfinite(natural) and math.isfinite(own):
        return 1 + own / natural if tuned else own / natural
    step = results.get("step_ms") or {}
    plan = results["plan"]
    ratio = step.get(name, math.nan) / step.get("natural", math.nan)
    if tuned:
        return 1 + plan["finetune_epochs"] / plan["epochs"] * ratio
    return ratio


def sweep_points(results: dict[str, Any], explainer: str) -> list[dict[str, Any]]:
    """One point per (method, setting): CV accuracy, CV top-k under the val attack on
    `explainer`, cost, chosen or not."""
    points = []
    for name, settings in results.get("summaries", {}).items():
        chosen = results["chosen"].get(name)
        for value, s in settings.items():
            y = s.get(explainer, math.nan)
            if not isinstance(y, (int, float)) or not math.isfinite(y):
                continue
            points.append(
                {
                    "method": name,
                    "value": float(value),
                    "accuracy": s["accuracy"],
                    "robustness": y,
                    "cost": method_cost(results, name),
                    "chosen": chosen is not None and float(value) == float(chosen),
                }
            )
    return points


def tradeoff_plot(results: dict[str, Any], explainer: str, path: Path) -> Path:
    """Two panels: CV accuracy vs CV robustness, and cost vs CV robustness; a line per method
    through its settings (in grid order), a star on the chosen one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    points = sweep_points(results, explainer)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.2), sharey=True)
    cmap = plt.get_cmap("tab20")
    names = sorted({p["method"] for p in points}, key=list(METHODS).index)
    for i, name in enumerate(names):
        pts = sorted((p for p in points if p["method"] == name), key=lambda p: p["value"])
        color = cmap(i % 20)
        for ax, xkey in ((left, "accuracy"), (right, "cost")):
            xs = [p[xkey] for p in pts]
            ax.plot(xs, [p["robustness"] for p in pts], "o-", color=color, ms=4, lw=1,
                    label=name if ax is left else None)  # fmt: skip
            for p in pts:
                if p["chosen"]:
                    ax.plot(p[xkey], p["robustness"], "*", color=color, ms=15, mec="k")
    _natural_reference(results, explainer, points, left, right)
    label = SHORT[explainer]
    left.set_xlabel("CV accuracy (4,000 held-out predictions)")
    left.set_ylabel(f"CV {label} top-100 intersection under the val attack")
    if any(p["cost"] > 0 for p in points):  # log scale needs a positive cost
        right.set_xscale("log")
        right.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        right.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        right.set_xticks([1, 2, 3, 5, 10, 20, 40])
    right.set_xlabel("training cost relative to natural (step profile x epochs; log)")
    fig.suptitle(
        f"MNIST-5k: every setting of every method ({label}); star: the chosen setting; "
        "dotted: natural",
        fontsize=10,
    )
    handles, labels = left.get_legend_handles_labels()
    right.legend(handles, labels, fontsize=7, loc="upper right", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _natural_reference(
    results: dict[str, Any], explainer: str, points: list[dict[str, Any]], left: Any, right: Any
) -> None:
    """The natural model's CV accuracy, the rule's margin and robustness as reference lines;
    the accuracy axis clipped at natural - 8 points, naming the settings it leaves out."""
    nat = results.get("natural_cv") or {}
    if "accuracy" in nat:
        left.axvline(nat["accuracy"], color="k", lw=0.8, label="natural CV accuracy")
        left.axvline(nat["accuracy"] - ACCURACY_MARGIN, color="k", ls="--", lw=0.8,
                     label="natural - 1 point (rule)")  # fmt: skip
        if math.isfinite(nat.get(explainer, math.nan)):
            for ax in (left, right):
                ax.axhline(nat[explainer], color="gray", ls=":", lw=0.8)
    if "accuracy" in nat:  # collapsed settings would squash the rest: clip, and say so
        low = nat["accuracy"] - 0.08
        off = sorted({p["method"] for p in points if p["accuracy"] < low})
        left.set_xlim(low, max(p["accuracy"] for p in points) + 0.005)
        if off:
            left.text(
                0.01,
                0.01,
                "off the left edge (CV accuracy < natural - 8 points): " + ", ".join(off),
                transform=left.transAxes,
                fontsize=7,
                va="bottom",
            )
