"""summary.md and certify.png of `robust-train certify`: the certified overlap against the L2
radius for each model, with the empirical overlap of the attack (and random points) beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["certificate_summary_markdown", "write_plot"]

READING = (
    "**certified** (lower bound): with probability >= 1 - alpha over the Monte Carlo noise, at "
    "least this share of the reported top-k pixels stays in the top-k of the SMOOTHED "
    "sparsified explainer at every input within this L2 distance (mean over the images)",
    "**attack** (upper side): the share the project's L2 fragility attack kept, on a "
    "differentiable fixed-noise stand-in of the same smoothed explainer, measured with fresh "
    "noise at its result; in brackets its upper confidence bound (the true overlap at the "
    "attack's point is below it with probability >= 1 - alpha)",
    "**random**: the lowest share over random points of the sphere of that radius",
    "the true worst-case overlap of each image lies between its certified and its empirical "
    "value; a wide gap means the certificate is loose or the attack is weak, not that the map "
    "is fragile",
    "the certificate is about the smoothed explainer (the top-kappa frequency map over noisy "
    "copies), not about the raw saliency map of the model",
)


def _cells(model: dict[str, Any]) -> dict[float, dict[str, Any]]:
    rows: dict[float, dict[str, Any]] = {
        round(r, 10): {"certified": c}
        for r, c in zip(model["radii"], model["certified_overlap"], strict=True)
    }
    for record in model["attack"]:
        rows.setdefault(round(record["radius"], 10), {}).update(record)
    return rows


def _fmt(value: Any, fmt: str = "{:.3f}") -> str:
    return "-" if value is None else fmt.format(value)


def certificate_summary_markdown(results: dict[str, Any]) -> str:
    """The markdown summary: radius -> certified / attack (upper bound) / random, per model."""
    models, s = results["models"], results["settings"]
    cells = {name: _cells(m) for name, m in models.items()}
    radii = sorted({r for rows in cells.values() for r in rows})
    header = ["L2 radius"]
    for name in models:
        header += [f"{name} certified", f"{name} attack (UCB)", f"{name} random"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in radii:
        row = [f"{r:.4g}"]
        for name in models:
            c = cells[name].get(r, {})
            attack = _fmt(c.get("attack"))
            if c.get("attack_upper") is not None:
                attack += f" ({c['attack_upper']:.3f})"
            row += [_fmt(c.get("certified")), attack, _fmt(c.get("random"))]
        lines.append("| " + " | ".join(row) + " |")
    costs = [
        "| model | images | radius certifying half of the top-k | s per image |",
        "|---|---|---|---|",
    ]
    for name, m in models.items():
        costs.append(
            f"| {name} | {m['n_images']} | {m['certified_radius_half']:.4f} | "
            f"{m['seconds']['certify_per_image']:.2f} |"
        )
    title = (
        f"# Certified top-{next(iter(models.values()))['k']} overlap of smoothed {s['explainer']}"
    )
    settings = ", ".join(f"{k}={v}" for k, v in s.items() if k not in ("radii", "attack_radii"))
    parts = [title, "\n".join(lines), "\n".join(costs)]
    floors = [
        f"{n} {m['resampled_overlap']:.3f}"
        for n, m in models.items()
        if m.get("resampled_overlap") is not None
    ]
    if floors:
        parts.append(
            "Monte Carlo floor (the overlap measured with fresh noise at x itself, unperturbed): "
            + ", ".join(floors)
            + "; an attack value close to it means the attack barely moved the smoothed map."
        )
    notes = {
        f"{n}: {r['attack_note']}"
        for n, m in models.items()
        for r in m["attack"]
        if r.get("attack_note")
    }
    parts += [f"Attack not run: {note}." for note in sorted(notes)]
    parts += [f"Settings: {settings}; {results['split']} split, images {results['images']}."]
    parts += ["## How to read it\n\n" + "\n".join(f"- {note}." for note in READING)]
    return "\n\n".join(parts) + "\n"


def write_plot(results: dict[str, Any], path: Path) -> Path:
    """certify.png: one colour per model; the certified curve (solid, a step function drawn
    conservatively: between two radii it shows the value of the larger) and the empirical overlap
    (dashed) at the attack radii, the bracket between them shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, m) in enumerate(results["models"].items()):
        color = colors[i % len(colors)]
        curve = m.get("curve") or {"radii": m["radii"], "certified": m["certified_overlap"]}
        ax.plot(
            curve["radii"], curve["certified"], "-", color=color, drawstyle="steps-pre",
            label=f"{name} certified",
        )  # fmt: skip
        records = [r for r in m["attack"] if r.get("empirical") is not None]
        if records:
            xs = [r["radius"] for r in records]
            ax.plot(
                xs, [r["empirical"] for r in records], "--o", color=color,
                label=f"{name} attacked (empirical)",
            )  # fmt: skip
            ax.fill_between(
                xs, [r["certified"] for r in records], [r["empirical"] for r in records],
                color=color, alpha=0.12,
            )  # fmt: skip
    s = results["settings"]
    ax.set(
        xlabel="L2 radius (pixel units)",
        ylabel="top-k overlap",
        ylim=(-0.02, 1.02),
        title=f"smoothed {s['explainer']}: sigma={s['sigma']}, n={s['n_samples']}, "
        f"alpha={s['alpha']}",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
