"""The trade-off front of the cluttered benchmark (CLUTTERED.md), from its stored results.

    .venv/bin/python -m experiments run cluttered table --out runs/cluttered ...   # first
    .venv/bin/python -m experiments run cluttered_front

Reads the results that `experiments.cluttered`'s `table` stored (experiments/results/
cluttered.json) and writes docs/images/cluttered_front.png: one column of panels per architecture
of `experiments.cluttered.FAMILIES` (small CNN, VGG-BN with the max head, ResNet-18 after 12
natural epochs), every fine-tune and seed a point, from the row its targets' verdicts come from
(`experiments.cluttered.main_pairs`: the page's budget, the fast protocol on the most images).
Top row: the accuracy lost against the fine-tune's own natural model (percentage points, x)
against the top-k under attack gained over it (y), saliency and Grad-CAM in two colours, the seed
by marker, the natural model a cross, the shipped config and the soft anchor ringed and named,
each map's Pareto front (least accuracy lost, most gain) joined, the targets (gain 0.25, 1
point) dotted. Bottom row:
the whole-fit cost ((natural + fine-tune) / natural fit CPU seconds, x) against the same gains,
the cost target (2x) dotted. Nothing is measured here: the figure follows from the stored
numbers alone.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from experiments.cluttered import (
    EXPLAINERS,
    FAMILIES,
    MAP_NAMES,
    TARGET_GAIN,
    family_of,
    main_pairs,
    natural_key,
)
from experiments.every_map import pareto
from experiments.pages import IMAGES, RESULTS
from experiments.support import read_text

ACCURACY_TARGET = 1.0  # percentage points lost at most
COST_TARGET = 2.0  # whole fit, x natural
COLOURS = {"saliency": "tab:blue", "grad_cam": "tab:orange"}
SEED_MARKERS = {0: "o", 1: "s", 2: "^"}  # another seed: "D"
# Configs (fine-tune labels without their seed) ringed and named in the figure.
HIGHLIGHT = {"cnn/em_w3_r8_e16": "shipped config", "cnn/em_w3_r8_soft_w1_e12": "soft anchor"}


def config_of(label: str) -> str:
    """A label without its seed suffix: the fine-tune's config.

    Examples:
        >>> config_of("cnn/em_w3_r8_e16_s2"), config_of("cnn/em_w3_r8_e16")
        ('cnn/em_w3_r8_e16', 'cnn/em_w3_r8_e16')
    """
    return re.sub(r"_s\d+$", "", label)


def _gain(r: dict[str, Any], natural: dict[str, Any], e: str) -> float | None:
    key = f"attack/{e}/topk/topk_intersection"
    a, b = r.get(key), natural.get(key)
    return None if a is None or b is None or a != a or b != b else float(a) - float(b)


def front_points(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per fine-tune of `main_pairs(results)`, sorted by label: its label, family,
    seed, config, accuracy lost against its natural model ("lost", percentage points), cost
    (x natural, None when unknown) and each map's top-k under attack gain over natural ("gain",
    None when either value is missing)."""
    points = []
    for r, natural in main_pairs(results):
        points.append({
            "label": r["label"], "family": family_of(r["label"]),
            "seed": natural_key(r["label"])[1], "config": config_of(r["label"]),
            "lost": 100 * (natural["accuracy"] - r["accuracy"]), "cost": r.get("cost"),
            "gain": {e: _gain(r, natural, e) for e in EXPLAINERS},
        })  # fmt: skip
    return sorted(points, key=lambda p: p["label"])


def front(points: list[dict[str, Any]], e: str, x: str = "lost") -> list[str]:
    """The labels of the points no other point beats on both the smaller `x` ("lost" or "cost")
    and the larger gain of map `e` (points missing either left out), by increasing `x`.

    Examples:
        >>> pts = [{"label": n, "lost": a, "gain": {"saliency": g}}
        ...        for n, a, g in (("a", 0.5, 0.3), ("b", 2.0, 0.5), ("c", 1.0, 0.2))]
        >>> front(pts, "saliency")
        ['a', 'b']
    """
    known = {
        p["label"]: (-float(p[x]), float(p["gain"][e]))
        for p in points
        if p.get(x) is not None and p["gain"].get(e) is not None
    }
    return sorted(pareto(known), key=lambda t: (-known[t][0], known[t][1]))


def _panel(ax: Any, points: list[dict[str, Any]], x: str) -> None:
    """One architecture's points against `x`, each map's front joined."""
    for e in EXPLAINERS:
        colour, by_label = COLOURS[e], {p["label"]: p for p in points}
        optimal = front(points, e, x)
        if optimal:
            xs = [by_label[t][x] for t in optimal]
            ax.plot(xs, [by_label[t]["gain"][e] for t in optimal], color=colour, lw=1, alpha=0.7)
        for p in points:
            if p[x] is None or p["gain"][e] is None:
                continue
            marker = SEED_MARKERS.get(p["seed"], "D")
            ax.scatter([p[x]], [p["gain"][e]], color=colour, marker=marker, s=28, zorder=3,
                       alpha=0.85, edgecolors="none")  # fmt: skip
            if p["config"] in HIGHLIGHT:
                ax.scatter([p[x]], [p["gain"][e]], facecolors="none", edgecolors="black",
                           s=110, lw=1, zorder=4, marker=marker)  # fmt: skip
                if e == "saliency" and p["seed"] == 0:
                    ax.annotate(HIGHLIGHT[p["config"]], (p[x], p["gain"][e]), fontsize=7,
                                textcoords="offset points", xytext=(8, -3))  # fmt: skip
    ax.scatter([0.0 if x == "lost" else 1.0], [0.0], marker="x", color="black", s=30, zorder=3)
    ax.axhline(TARGET_GAIN, color="grey", ls=":", lw=1)
    ax.axvline(ACCURACY_TARGET if x == "lost" else COST_TARGET, color="grey", ls=":", lw=1)
    ax.grid(alpha=0.2)


def _legend(fig: Any) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, lw=1, marker="o", label=f"{MAP_NAMES[e]} (front joined)")
               for e, c in COLOURS.items()]  # fmt: skip
    handles += [Line2D([], [], color="grey", ls="none", marker=m, label=f"seed {s}")
                for s, m in SEED_MARKERS.items()]  # fmt: skip
    handles += [
        Line2D([], [], color="black", ls="none", marker="o", mfc="none", ms=10,
               label="ringed: " + ", ".join(f"{v} ({k})" for k, v in HIGHLIGHT.items())),
        Line2D([], [], color="black", ls="none", marker="x", label="natural model (0, 0; 1x, 0)"),
        Line2D([], [], color="grey", ls=":", label="targets"),
    ]  # fmt: skip
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=7, frameon=False)


def draw_front(results: list[dict[str, Any]], path: Path) -> Path:
    """The figure of the module docstring from stored results, written to `path`.

    Raises:
        ValueError: no fine-tune of `FAMILIES` has a natural model to be compared with.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = front_points(results)
    if not points:
        raise ValueError("no fine-tune with its natural model among the results: run `table`")
    fig, axes = plt.subplots(2, len(FAMILIES), figsize=(4.2 * len(FAMILIES), 7.4), squeeze=False)
    for column, family in enumerate(FAMILIES.values()):
        mine = [p for p in points if p["family"] == family]
        for row, x in enumerate(("lost", "cost")):
            _panel(axes[row, column], mine, x)
        axes[0, column].set_title(f"{family} ({len(mine)} fine-tunes)", fontsize=9)
        axes[0, column].set_xlabel("accuracy lost against natural (points)", fontsize=8)
        axes[1, column].set_xlabel("whole-fit cost (x natural)", fontsize=8)
    for row in range(2):
        axes[row, 0].set_ylabel("top-k under attack: gain over natural", fontsize=8)
    fig.suptitle("Cluttered MNIST-5k, fast protocol at L_inf 8/255: fine-tunes against their "
                 "natural model (targets dotted: gain 0.25, 1 point, 2x)", fontsize=10)  # fmt: skip
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    _legend(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=None, help="stored results JSON")
    parser.add_argument("--png", default=None, help="default docs/images/cluttered_front.png")
    args = parser.parse_args(argv)
    source = Path(args.results) if args.results else RESULTS / "cluttered.json"
    if not source.is_file():
        parser.error(f"`--results` must be a stored results file, got {str(source)!r}")
    results = json.loads(read_text(source)).get("results")
    if not isinstance(results, list):
        parser.error(
            f"`--results` must hold the results `cluttered table` stores, got {str(source)!r}"
        )
    out = draw_front(results, Path(args.png) if args.png else IMAGES / "cluttered_front.png")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
