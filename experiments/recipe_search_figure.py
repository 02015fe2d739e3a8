"""The front of experiments/RECIPE_SEARCH.md: every candidate's test accuracy against its proxy
level on each proxy map and their mean, the shipped model marked, the targets as lines.

Reads only the finished candidates (`recipe_search.load_search`); imported by `recipe_search`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

# Issue targets under the ensemble on each proxy map, and the accuracy the recipe may not go
# below (0.5 points under the natural model's 0.971 test accuracy).
TARGETS = {"saliency": 0.65, "grad_cam": 0.50, "deeplift": 0.75}
ACCURACY_FLOOR = 0.966
LABELS = {"saliency": "saliency", "grad_cam": "Grad-CAM", "deeplift": "DeepLIFT"}
SHIPPED = ("shipped_before", 0)
# Markers: the model shipped before the search (a red star), the config fit shipped now (an
# orange diamond, named), the natural model's file (a grey square); every other point a dot.
STYLES = {
    "shipped_before": ("*", "tab:red", 140, "shipped before"),
    "corner_gcp2_r04_config": ("D", "tab:orange", 70, "shipped now (corner_gcp2_r04)"),
    "natural_file": ("s", "grey", 50, "natural (shipped)"),
}


def points(found: dict[tuple[str, int], dict[str, Any]], maps: tuple[str, ...]) -> dict[
    str, dict[str, tuple[float, float]]
]:  # fmt: skip
    """Per panel (each map and "mean"), per candidate "name sS": (test accuracy, proxy level).

    Examples:
        >>> row = {"test_acc": 0.97, "proxy": {"saliency": 0.6, "grad_cam": 0.2}}
        >>> points({("a", 0): row, ("natural", 0): {"test_acc": 0.98}}, ("saliency", "grad_cam"))
        {'saliency': {'a s0': (0.97, 0.6)}, 'grad_cam': {'a s0': (0.97, 0.2)}, 'mean': {'a s0': (0.97, 0.4)}}
    """  # noqa: E501
    out: dict[str, dict[str, tuple[float, float]]] = {m: {} for m in (*maps, "mean")}
    for (name, seed), r in sorted(found.items()):
        if "proxy" not in r:
            continue
        tag = f"{name} s{seed}"
        for m in maps:
            out[m][tag] = (r["test_acc"], r["proxy"][m])
        levels = [r["proxy"][m] for m in maps if r["proxy"][m] == r["proxy"][m]]
        out["mean"][tag] = (r["test_acc"], sum(levels) / len(levels) if levels else math.nan)
    return out


def draw_front(
    found: dict[tuple[str, int], dict[str, Any]], png: Path, maps: tuple[str, ...]
) -> Path:
    """Four panels (three proxy maps and their mean): test accuracy (x) against the proxy's
    top-100 intersection (y) of every candidate and seed, the Pareto-optimal ones joined and
    named; the model shipped before as a red star, the model shipped now as an orange diamond
    (named), the natural model's file as a grey square (`STYLES`), the targets (horizontal)
    and the accuracy floor (vertical) as dotted lines. Returns `png`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.every_map import pareto

    panels = points(found, maps)
    fig, grid = plt.subplots(2, 2, figsize=(11, 9), sharex=True)
    axes = list(grid.flat)
    for ax, (panel, pts) in zip(axes, panels.items(), strict=True):
        front = pareto({t: p for t, p in pts.items() if p[1] == p[1]})
        ax.plot(*zip(*(pts[t] for t in front), strict=True), color="tab:blue", lw=0.8,
                alpha=0.6, label="front")  # fmt: skip
        for tag, (acc, level) in pts.items():
            name = tag.rsplit(" s", 1)[0]
            marker, colour, size, label = STYLES.get(name, ("o", "tab:blue", 25, None))
            ax.scatter([acc], [level], marker=marker, color=colour, s=size, zorder=3,
                       label=label)  # fmt: skip
            if name not in STYLES and tag in front:
                ax.annotate(tag, (acc, level), textcoords="offset points", xytext=(3, 3),
                            fontsize=6)  # fmt: skip
            elif label and name != "natural_file":
                ax.annotate(label, (acc, level), textcoords="offset points", xytext=(4, -9),
                            fontsize=7, color=colour)  # fmt: skip
        if panel in TARGETS:
            ax.axhline(TARGETS[panel], color="tab:red", ls=":", lw=1, label="target")
        ax.axvline(ACCURACY_FLOOR, color="tab:green", ls=":", lw=1, label="accuracy floor")
        ax.set_title(LABELS.get(panel, "mean of the three maps"), fontsize=10)
        ax.set_xlabel("test accuracy")
        ax.set_ylabel("top-100 intersection under the proxy ensemble")
    axes[0].legend(loc="lower left", fontsize=7)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return png
