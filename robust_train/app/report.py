"""Robustness report: a markdown summary with PNG plots, from `evaluate_classifier` results.

`write_report({"baseline": r1, "robust": r2}, "runs/demo")` writes report.md, results.json and
plots: MIF/LIF fidelity curves, example maps before/after the top-k attack, and (when training
histories are given) robustness per epoch. Every file is written whole (a temporary file renamed
over the name) and never through a symlink (`robust_train.core.files`). Every row is a key of the
engine's key scheme; its label, unit and direction come from its `Measure`
(`robust_train.evaluation.measures`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import matplotlib

from robust_train.core.files import write_json, write_text, write_with
from robust_train.evaluation.measures import MEASURES, Measure, key_measure

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = [
    "REPORT_FILES",
    "attack_cost_lines",
    "chance_and_cost_markdown",
    "chance_table",
    "sanity_table",
    "headline_history",
    "how_to_read",
    "same_images",
    "plot_examples",
    "plot_fidelity",
    "summary_table",
    "to_json",
    "write_report",
]

# Rows that only matter when they say something: counts that are 0 everywhere are left out.
QUIET_WHEN_ZERO = ("n_unmeasured",)
# Rows that describe each model's own images (a share of its blank maps is 0 on the images
# every model could measure, by construction).
OWN_IMAGES = ("blank_map",)
PLOTS = ("robustness_per_epoch.png", "fidelity_curves.png", "attack_examples.png")
REPORT_FILES = ("results.json", "report.md", *PLOTS)  # what `write_report` may write


def _measures(result: Mapping[str, Any]) -> Mapping[str, Any]:
    return result.get("measures") or {}


def row_keys(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every key of the results, in the order the first result holding it lists them.

    Examples:
        >>> row_keys({"a": {"measures": {"accuracy": 1}}, "b": {"measures": {"x/y/lipschitz": 1}}})
        ['accuracy', 'x/y/lipschitz']
    """
    keys: list[str] = []
    for result in results.values():
        keys += [k for k in _measures(result) if k not in keys]
    return keys


def _cell(result: Mapping[str, Any], key: str, value: Any = None) -> str:
    value = _measures(result).get(key) if value is None else value
    measure = MEASURES.get(key_measure(key))
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return measure.format(value) if measure is not None else f"{value:.3f}"


def same_images(
    results: Mapping[str, Mapping[str, Any]], key: str
) -> tuple[list[float], int] | None:
    """Each result's mean of `key` over the images EVERY result measured (its value finite in
    all of them), and how many those are; None when the results cannot be lined up (one model,
    no `per_image` values, images that differ by `images_digest`) or `key` is a count.

    Examples:
        >>> a = {"per_image": {"x/y/kendall": [0.2, float("nan"), 0.6]}, "images_digest": "d"}
        >>> b = {"per_image": {"x/y/kendall": [0.4, 0.5, float("nan")]}, "images_digest": "d"}
        >>> same_images({"a": a, "b": b}, "x/y/kendall")
        ([0.2, 0.4], 1)
    """
    measure = MEASURES.get(key_measure(key))
    if len(results) < 2 or (measure is not None and measure.reduce != "mean"):
        return None
    digests = {r.get("images_digest") for r in results.values()}
    found = [(r.get("per_image") or {}).get(key) for r in results.values()]
    rows: list[list[Any]] = [list(v) for v in found if v is not None]
    if len(digests) != 1 or None in digests or len(rows) < len(found):
        return None
    if len({len(v) for v in rows}) != 1:
        return None
    finite = [all(_finite(v) for v in column) for column in zip(*rows, strict=True)]
    n = sum(finite)
    means = [
        sum(v for v, ok in zip(row, finite, strict=True) if ok) / n if n else math.nan
        for row in rows
    ]
    return means, n


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _row_label(key: str) -> str:
    measure = MEASURES.get(key_measure(key))
    better = measure.higher_is_better if measure is not None else None
    arrow = "" if better is None else (" ↑" if better else " ↓")
    unit = f" ({measure.unit})" if measure is not None and measure.unit else ""
    return f"`{key}`{unit}{arrow}"


def summary_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """Side-by-side markdown table: one column per model, one row per key (↑: higher is
    better, ↓: lower is better, from the key's `Measure`).

    With several models evaluated on the same images (`per_image` values and one
    `images_digest`), every mean row compares them on the images every one of them measured
    (`same_images`: an image one model could not measure, e.g. a blank Grad-CAM map, is left
    out for all), and the last column says how many; otherwise each model's own mean (count
    "own"). Counts (`n_attacked`, `n_unmeasured`) and the blank-map share are each model's own.

    Examples:
        >>> print(summary_table({"a": {"measures": {"accuracy": 0.5}}}).splitlines()[2])
        | `accuracy` ↑ | 0.500 |
    """
    names = list(results)
    several = len(names) > 1
    extra = " images (every model) |" if several else ""
    lines = [
        "| measure | " + " | ".join(names) + " |" + extra,
        "|---|" + "---|" * (len(names) + several),
    ]
    for key in row_keys(results):
        shared = same_images(results, key) if key_measure(key) not in OWN_IMAGES else None
        if shared is None:
            cells = [_cell(r, key) for r in results.values()]
        else:
            cells = [_cell(r, key, v) for r, v in zip(results.values(), shared[0], strict=True)]
        if key_measure(key) in QUIET_WHEN_ZERO and all(c in ("-", "0") for c in cells):
            continue
        count = (f" {shared[1]} |" if shared is not None else " own |") if several else ""
        lines.append(f"| {_row_label(key)} | " + " | ".join(cells) + " |" + count)
    for label, field, fmt in (
        ("training seconds (until this checkpoint)", "training_seconds", "{:.1f}"),
        ("share of training time in the monitors", "monitor_share", "{:.1%}"),
    ):
        cells = [
            fmt.format(r[field]) if r.get(field) is not None else "-" for r in results.values()
        ]
        if any(c != "-" for c in cells):
            lines.append(f"| {label} | " + " | ".join(cells) + " |" + (" |" if several else ""))
    return "\n".join(lines)


def how_to_read(keys: Iterable[str]) -> list[str]:
    """One markdown bullet per measure among `keys`: its label, direction and meaning.

    Examples:
        >>> how_to_read(["attack/saliency/topk/center_shift"])[0][:40]
        '- **center shift** (`center_shift`, px, '
    """
    seen: dict[str, Measure] = {}
    for key in keys:
        measure = MEASURES.get(key_measure(key))
        if measure is not None:
            seen.setdefault(measure.name, measure)
    lines = []
    for m in seen.values():
        parts = [f"`{m.name}`", m.unit, m.direction]
        described = ", ".join(p for p in parts if p)
        lines.append(f"- **{m.label}** ({described}): {m.meaning or m.label}.")
    return lines


def plot_fidelity(
    results: Mapping[str, Mapping[str, Any]], path: Path, explainer: str = "saliency"
) -> Path | None:
    """Mean MIF (dashed) and LIF (solid) curves of one explainer, one colour per model."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    drawn = False
    for i, (name, r) in enumerate(results.items()):
        curve = (r.get("curves") or {}).get(f"fidelity/{explainer}/curves")
        if not curve or not curve.get("LIF"):
            continue
        color = f"C{i}"
        ax.plot(curve["xs"], curve["LIF"], color=color, label=f"{name} LIF")
        ax.plot(curve["xs"], curve["MIF"], color=color, linestyle="--", label=f"{name} MIF")
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
    model (the first example grid each result holds: the top-k attack on its first explainer)."""
    blocks = [
        (name, _first_grid(r["_examples"])) for name, r in results.items() if r.get("_examples")
    ]
    if not blocks:
        return None
    n_img = min(len(ex.inputs) for _, ex in blocks)
    if n_img == 0:
        return None
    titles = ("input", "clean map", "attacked input", "attacked map")
    fig, axes = plt.subplots(
        len(blocks) * n_img, 4, figsize=(6.4, 1.6 * len(blocks) * n_img), squeeze=False
    )
    for b, (name, ex) in enumerate(blocks):
        for i in range(n_img):
            row = axes[b * n_img + i]
            images = (ex.inputs[i], ex.clean_maps[i], ex.adversarial[i], ex.attacked_maps[i])
            for j, (ax, img) in enumerate(zip(row, images, strict=True)):
                img = img.permute(1, 2, 0).squeeze(-1) if img.dim() == 3 else img
                ax.imshow(img.numpy(), cmap="gray" if j % 2 == 0 else "hot")
                ax.set_xticks([])
                ax.set_yticks([])
                if b * n_img + i == 0:
                    ax.set_title(titles[j], fontsize=8)
            row[0].set_ylabel(name, fontsize=8)
    fig.suptitle(blocks[0][1].title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _first_grid(examples: Mapping[str, Any]) -> Any:
    """The top-k attack's grid when there is one (the attack of the papers), else the first."""
    for key, grid in examples.items():
        if key.endswith("/topk/examples"):
            return grid
    return next(iter(examples.values()))


def plot_history(
    histories: Mapping[str, Mapping[str, list[tuple[int, float]]]], path: Path
) -> Path | None:
    """Robustness metrics per epoch: a grid of labelled panels, one line per model.

    Drawn by `robust_train.callbacks.figures.history_figure` (readable titles, higher/lower-is-
    better y labels from the measures, whole-epoch ticks, one legend), the figure the demo writes.
    """
    from robust_train.callbacks.figures import history_figure

    plain = headline_history({name: dict(h) for name, h in histories.items()})
    if not any(plain.values()):
        return None
    fig = history_figure(plain)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


HEADLINE = ("/topk/topk_intersection", "/lipschitz", "/fidelity", "val/acc")
MAX_PANELS = 6


def headline_history(
    histories: Mapping[str, Mapping[str, list[tuple[int, float]]]],
) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """The keys worth a panel per epoch: per explainer the top-k attack's top-k intersection,
    the Lipschitz estimate and the fidelity, and the validation accuracy (else the first
    `MAX_PANELS` keys); seconds and shares never.

    Examples:
        >>> h = {"r": {"robustness/attack/saliency/topk/kendall": [(0, 1.0)],
        ...            "robustness/attack/saliency/topk/topk_intersection": [(0, 0.5)],
        ...            "robustness/seconds/total": [(0, 2.0)]}}
        >>> list(headline_history(h)["r"])
        ['robustness/attack/saliency/topk/topk_intersection']
    """
    skip = ("robustness/seconds", "robustness/share", "robustness/images")
    keys = sorted({k for h in histories.values() for k in h if not k.startswith(skip)})
    chosen = [k for k in keys if k.endswith(HEADLINE)] or keys[:MAX_PANELS]
    return {name: {k: v for k, v in h.items() if k in chosen} for name, h in histories.items()}


def to_json(results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Drop the private (tensor) entries and turn NaN into None, so results are valid JSON.

    Examples:
        >>> to_json({"m": {"measures": {"a": float("nan")}, "_examples": {}}})
        {'m': {'measures': {'a': None}}}
    """
    return {
        name: {k: _plain(v) for k, v in r.items() if not k.startswith("_")}
        for name, r in results.items()
    }


def _plain(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def write_report(
    results: Mapping[str, Mapping[str, Any]],
    out_dir: str | Path,
    histories: Mapping[str, Mapping[str, list[tuple[int, float]]]] | None = None,
    title: str = "Robustness of explanations",
    *,
    overwrite: bool = True,
) -> Path:
    """Write report.md, results.json and the PNG plots (`REPORT_FILES`) into `out_dir`; return
    the report path. `overwrite=False` refuses files that exist; a symlink is always refused."""
    out = Path(out_dir)
    flag = "--out"
    write_json(out / "results.json", to_json(results), overwrite=overwrite, flag=flag)
    parts = [f"# {title}", "", summary_table(results), ""]
    if len(results) > 1:
        parts += [
            "Each mean compares the models on the images every one of them measured (their "
            "count is the last column; `own`: each model's own images, where they cannot be "
            "lined up); counts and the share of blank maps are each model's own.",
            "",
        ]
    extra = chance_and_cost_markdown(results)
    if extra:
        parts += [extra]
    settings = next(iter(results.values())).get("settings", {})
    if settings:
        parts += ["Settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()), ""]
    parts += ["## How to read it", "", *how_to_read(row_keys(results)), ""]
    plots: dict[str, Any] = {
        PLOTS[0]: lambda p: plot_history(histories or {}, p),
        PLOTS[1]: lambda p: plot_fidelity(results, p),
        PLOTS[2]: lambda p: plot_examples(results, p),
    }
    for name, fn in plots.items():
        if write_with(out / name, fn, overwrite=overwrite, flag=flag) is not None:
            parts += [f"![{name}]({name})", ""]
    path = out / "report.md"
    write_text(path, "\n".join(parts), overwrite=overwrite, flag=flag)
    return path


def chance_table(results: Mapping[str, Mapping[str, Any]], objective: str = "topk") -> str:
    """Each explainer's top-k and LENS intersections under the `objective` attack beside their
    chance levels: a random map (`fragility/<e>/random_topk`, `random_lens`), the explanation
    "map = input" under the same attack, and the share of images where the map is above it
    (`beats_input`). Empty when no result has the attack's top-k rows.

    Examples:
        >>> m = {"attack/saliency/topk/topk_intersection": 0.6,
        ...      "fragility/saliency/random_topk": 0.13,
        ...      "attack/input_reference/topk/topk_intersection": 0.62,
        ...      "attack/saliency/topk/beats_input": 0.4}
        >>> print(chance_table({"robust": {"measures": m}}).splitlines()[2])
        | saliency | robust | 0.600 | 0.130 | 0.620 | 40% | - | - | - |
    """
    lines = [
        "| explainer | model | top-k ∩ | random map | map = input | share above map = input "
        "| LENS | random map | map = input |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    start = len(lines)
    for key in row_keys(results):
        parts = key.split("/")
        if parts[0] != "attack" or parts[2:] != [objective, "topk_intersection"]:
            continue
        explainer = parts[1]
        if explainer == "input_reference":
            continue
        for name, result in results.items():
            m = _measures(result)
            if m.get(key) is None:
                continue
            ref = f"attack/input_reference/{objective}"
            beats = m.get(f"attack/{explainer}/{objective}/beats_input")
            cells = [
                _cell(result, key),
                _cell(result, f"fragility/{explainer}/random_topk"),
                _cell(result, f"{ref}/topk_intersection"),
                "-" if beats is None or beats != beats else f"{beats:.0%}",
                _cell(result, f"attack/{explainer}/{objective}/lens_topk"),
                _cell(result, f"fragility/{explainer}/random_lens"),
                _cell(result, f"{ref}/lens_topk"),
            ]
            lines.append(f"| {explainer} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) if len(lines) > start else ""


def attack_cost_lines(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One markdown bullet per model and attacked explainer/objective: what the attack ran
    (its members: each one's mean score, the images where it gave the worst result and those
    where its point was the random search's start) and
    what it cost (seconds per image, gradient steps and maps per image). Empty without the
    `attack_cost` notes.

    Examples:
        >>> cost = {"members": [{"name": "k100", "worst_on": 3, "mean_score": 0.5},
        ...                     {"name": "search", "worst_on": 1, "mean_score": 0.4}],
        ...         "seconds": 8.0, "seconds_per_image": 2.0, "gradient_steps_per_image": 120,
        ...         "maps_per_image": 320, "images": 4}
        >>> attack_cost_lines({"m": {"attack_cost": {"saliency/topk": cost}}})[0][:60]
        '- m, `saliency/topk`: 2.00 s per image (4 images, 8 s); 120 '
    """
    lines = []
    for name, result in results.items():
        for attack, cost in (result.get("attack_cost") or {}).items():
            members = ", ".join(
                f"{m['name']} {_score(m.get('mean_score'))} ({_credit(m)})"
                for m in cost.get("members", [])
            )
            cpu = cost.get("cpu_seconds_per_image")
            cpu_text = f", {cpu:.2f} CPU s" if isinstance(cpu, (int, float)) else ""
            lines.append(
                f"- {name}, `{attack}`: {cost['seconds_per_image']:.2f} s per image{cpu_text} "
                f"({cost['images']} images, {cost['seconds']:.0f} s); "
                f"{cost['gradient_steps_per_image']} gradient steps and "
                f"{cost['maps_per_image']} maps per image; members (mean score, images where "
                f"it was the worst): {members}"
            )
    return lines


def _credit(member: Mapping[str, Any]) -> str:
    """The images a member gave the worst result, and those where its point was the random
    search's start (`MemberCost.best_before_search`, where it is above 0)."""
    count = member.get("best_before_search")
    start = f", search start on {count}" if isinstance(count, int) and count > 0 else ""
    return f"worst on {member['worst_on']}{start}"


def _score(value: Any) -> str:
    return "-" if not isinstance(value, (int, float)) or value != value else f"{value:.3f}"


def sanity_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """The sanity checks' curves (`sanity/<explainer>/cascade` and `.../independent`), one row
    per model, explainer, curve and line, one column per point (layers randomised from the top;
    the layer randomised alone). Empty without sanity curves.

    Examples:
        >>> c = {"xs": [0.0, 1.0], "xname": "x", "topk": [1.0, 0.25]}
        >>> print(sanity_table({"m": {"curves": {"sanity/saliency/cascade": c}}}).splitlines()[2])
        | m | saliency | cascade | topk | 1.000 | 0.250 |
    """
    rows, width = [], 0
    for name, result in results.items():
        for key, curve in (result.get("curves") or {}).items():
            parts = key.split("/")
            if parts[0] != "sanity" or len(parts) != 3:
                continue
            for line, values in curve.items():
                if line in ("xs", "xname") or not values:
                    continue
                cells = [f"{v:.3f}" for v in values]
                width = max(width, len(cells))
                rows.append(f"| {name} | {parts[1]} | {parts[2]} | {line} | " + " | ".join(cells))
    if not rows:
        return ""
    head = "| model | explainer | randomisation | similarity | " + " | ".join(
        f"{i}" for i in range(width)
    )
    return "\n".join([head + " |", "|---" * (4 + width) + "|", *(r + " |" for r in rows)])


def chance_and_cost_markdown(results: Mapping[str, Mapping[str, Any]]) -> str:
    """The chance-level table, the attacks' members and cost and the sanity checks' curves, as
    markdown sections (empty when the results have none of them)."""
    parts = []
    table = chance_table(results)
    if table:
        parts += [
            "## Chance levels",
            "",
            "Each top-k and LENS intersection beside what a random map scores (the clean map "
            "against a uniformly random one) and what the explanation 'map = input' keeps under "
            "the same attack, with the share of images where the map keeps more than it.",
            "",
            table,
            "",
        ]
    cost = attack_cost_lines(results)
    if cost:
        parts += ["## Attacks: members and cost", "", *cost, ""]
    sanity = sanity_table(results)
    if sanity:
        parts += [
            "## Sanity checks (Adebayo et al. 2018)",
            "",
            "Similarity of each map to the map of the model with its layers re-initialised: "
            "`cascade` column i = the top i layers randomised (0: none), `independent` column "
            "i = only the i-th layer from the top (column 0 is the top layer); lower means the "
            "map depends more on the learned weights. Images whose map is constant are left out.",
            "",
            sanity,
            "",
        ]
    return "\n".join(parts)
