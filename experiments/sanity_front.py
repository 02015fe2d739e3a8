"""Does dependence on the top layers conflict with robustness? (SANITY.md, section 5's front.)

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.sanity_front --out runs/sanity_front \
        --candidates runs/recipe/search --previous every_map_before.ckpt

For every model that has a stored robustness figure: the shipped natural model, the robust model
shipped now, the one shipped before it (`--previous`), and every fine-tune of the recipe search
(`--candidates`: `<name>_s<seed>.json` with its proxy scores beside `<name>_s<seed>.ckpt`, or a
checkpoint the JSON names), the cascading randomisation of SANITY.md's section 5 (the `sanity`
part with seeds 0, 1 and 2 on the first `--images` test images, the layers of `MNISTConvNet`
re-initialised from the top) on saliency and Grad-CAM. Each model's score at the top of the
cascade (the top-100 intersection of its map with the map of the network with its output layer,
and its two top layers, re-initialised; lower: the map depends more on those layers) is set
against its robustness (the recipe search's proxy: the top-100 intersection under a cheaper
attack ensemble on 10 validation images; the full ensemble's on 20 test images where it was run)
and its test accuracy.

Each model's seeds are stored as JSON under `<out>/curves/` (named by the checkpoint's hash) and
read back when present, so a stopped run started again with the same command resumes where it
stopped. At the end the tables `5-front`, `5-front-correlation` and `5-front-weights` are
written into results/sanity.json with the points themselves (key `front`), the figure into
docs/images/sanity_cascade_front.png, and SANITY.md from its prose; `--page` redraws the figure
and the tables from results/sanity.json alone.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

import torch

from experiments.sanity_checks import CHECKPOINTS, checkpoint_tag, seeded_sanity, test_images

ROOT = Path(__file__).resolve().parents[1]
FIGURE = ROOT / "docs" / "images" / "sanity_cascade_front.png"
EXPLAINERS = ("saliency", "grad_cam")
LABELS = {"saliency": "saliency", "grad_cam": "Grad-CAM"}
LAYERS = (1, 2)
# The recipe search's rows of the three shipped models, the same two-epoch fine-tune without the
# penalty (scored with `--score`), and the names the page gives them.
NATURAL, NOW, BEFORE = "natural_file", "corner_gcp2_r04_config", "shipped_before"
NATURAL_FINETUNE = "natural_finetune"
MARKED = {
    NATURAL: "natural (shipped)",
    NOW: "robust, shipped now",
    BEFORE: "robust, shipped before",
    NATURAL_FINETUNE: "natural + the fine-tune's epochs, no penalty",
}
# The candidates of increasing penalty weight (the shipped recipe's options otherwise): run first.
WEIGHT_SERIES = ("shipped", "corner", "corner_w4", "corner_w5", "corner_w6", "w6", "corner_w10")
# The models without the penalty, and the weight of each candidate of the series with the corner
# start (the shipped recipe's start).
UNPENALISED = (NATURAL, NATURAL_FINETUNE)
WEIGHTS = {NATURAL_FINETUNE: 0.0, "corner": 3.0, "corner_w4": 4.0, "corner_w5": 5.0,
           "corner_w6": 6.0, "corner_w10": 10.0}  # fmt: skip


def candidates(
    folders: list[Path], previous: str | None, files: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Every scored model of the recipe search folders `folders`: name, seed, checkpoint, test
    accuracy and proxy scores (a name and seed found twice: the first folder's). The natural
    row measures the shipped natural checkpoint, the row of the model shipped now the shipped
    robust checkpoint (its config fit, the same weights) and `shipped_before` the checkpoint
    `previous` (left out without it); `files` names the checkpoint of a candidate whose JSON
    describes its fit instead of naming a file (a config fit: "NAME": path). The weight series
    (`WEIGHT_SERIES`) comes first, then the rest by name."""
    out, seen = [], set()
    for path in [p for folder in folders for p in sorted(folder.glob("*_s[0-9].json"))]:
        row = json.loads(path.read_text())
        if "proxy" not in row or (row["name"], row["seed"]) in seen:
            continue
        name, seed = row["name"], int(row["seed"])
        seen.add((name, seed))
        checkpoint = path.parent / f"{name}_s{seed}.ckpt"
        named = str(row.get("changes", {}).get("checkpoint", ""))
        if name == NATURAL:
            checkpoint = Path(CHECKPOINTS["natural"])
        elif name == NOW:
            checkpoint = Path(CHECKPOINTS["robust"])
        elif name == BEFORE:
            if previous is None:
                continue
            checkpoint = Path(previous)
        elif name in (files or {}):
            checkpoint = Path((files or {})[name])
        elif named.startswith("/"):
            checkpoint = Path(named)
        out.append({"name": name, "seed": seed, "checkpoint": str(checkpoint),
                    "test_acc": row["test_acc"], "proxy": row["proxy"]})  # fmt: skip

    def order(r: dict[str, Any]) -> tuple[int, int, str, int]:
        first = (NATURAL, NOW, BEFORE)
        if r["name"] in first:
            return (0, first.index(r["name"]), "", r["seed"])
        if r["name"] in WEIGHT_SERIES:
            return (1, WEIGHT_SERIES.index(r["name"]), "", r["seed"])
        return (2, 0, r["name"], r["seed"])

    return sorted(out, key=order)


def top_of_cascade(seeds: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per explainer, per number of layers randomised from the top (`LAYERS`): the top-100 line
    of the cascade, one value per seed (NaN where every map of a seed was constant)."""
    out: dict[str, dict[str, list[float]]] = {}
    for ex in EXPLAINERS:
        curves = [s["curves"][f"sanity/{ex}/cascade"] for s in seeds]
        out[ex] = {str(n): [float(c["topk"][n]) for c in curves] for n in LAYERS}
    return out


def measure(row: dict[str, Any], images: int, out: Path) -> dict[str, Any]:
    """`row` with its cascade scores (`top_of_cascade`), measured as section 5 measures the
    shipped pair and stored per seed under `<out>/curves/`."""
    from robust_train.models import load_classifier

    x, y = test_images(images)
    tag = checkpoint_tag(row["checkpoint"])
    store = out / "curves" / f"{row['name']}_s{row['seed']}_{tag}_{images}i"
    seeds = seeded_sanity(load_classifier(row["checkpoint"]), x, y, EXPLAINERS, store=store)
    return {**row, "sha256": tag, "cascade": top_of_cascade(seeds)}


def ensemble_levels() -> dict[str, dict[str, float]]:
    """The full ensemble's top-100 intersections (20 test images) that RECIPE_SEARCH.md stores,
    per recipe-search row name and map: the shipped pair's table and the config fits'."""
    from experiments.pages import RESULTS

    tables = json.loads((RESULTS / "recipe_search.json").read_text())["tables"]
    keys = {"saliency": "saliency", "Grad-CAM": "grad_cam"}
    out: dict[str, dict[str, float]] = {}
    for row in tables["shipped"]["rows"]:
        label = row[0].split(" top-100")[0]
        if label in keys:
            for name, cell in zip((NATURAL, BEFORE, NOW), row[1:4], strict=True):
                out.setdefault(name, {})[keys[label]] = float(cell.split(" [")[0])
    for row in tables["full"]["rows"]:
        name = row[0].removesuffix("_s0")
        if row[1] in keys and name != NOW:
            out.setdefault(name, {})[keys[row[1]]] = float(row[4].split(" [")[0])
    return out


def _mean_sd(values: list[float]) -> tuple[float, float]:
    kept = [v for v in values if v == v]
    if not kept:
        return math.nan, math.nan
    return statistics.mean(kept), statistics.stdev(kept) if len(kept) > 1 else 0.0


def _cell(values: list[float]) -> str:
    mean, sd = _mean_sd(values)
    return "n/a" if mean != mean else f"{mean:.3f} ± {sd:.3f}"


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points on the front of high robustness (first coordinate) and low
    top-of-cascade score (second): no other point is at least as robust and at most as high
    with one of the two strictly better. Sorted by robustness.

    Examples:
        >>> pareto([(0.1, 0.4), (0.5, 0.5), (0.6, 0.7), (0.4, 0.6), (0.6, 0.6)])
        [0, 1, 4]
    """
    front = []
    for i, (r, c) in enumerate(points):
        if r != r or c != c:
            continue
        beaten = any(
            (r2 >= r and c2 <= c) and (r2 > r or c2 < c)
            for j, (r2, c2) in enumerate(points)
            if j != i and r2 == r2 and c2 == c2
        )
        if not beaten:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def weight_table(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The series of increasing penalty weight (`WEIGHTS`, the shipped recipe with the corner
    start otherwise; weight 0: the same fine-tune without the penalty), beside the natural model:
    per weight its training seeds, mean test accuracy and proxy levels, and the top of the
    cascade over every training seed and randomisation seed together (mean ± standard
    deviation)."""
    from experiments.sanity_checks import _table

    rows = []
    for name, weight in [(NATURAL, None), *WEIGHTS.items()]:
        group = [p for p in points if p["name"] == name]
        if not group:
            continue
        pooled = [_cell([v for p in group for v in p["cascade"][ex][str(n)]])
                  for ex in EXPLAINERS for n in LAYERS]  # fmt: skip
        mean = {k: statistics.mean(p[k] if k == "test_acc" else p["proxy"][k] for p in group)
                for k in ("test_acc", *EXPLAINERS)}  # fmt: skip
        seeds = ", ".join(str(p["seed"]) for p in group)
        label = "natural (shipped), no fine-tune" if weight is None else f"{weight:g} ({name})"
        rows.append([label, seeds, f"{mean['test_acc']:.3f}",
                     *(f"{mean[ex]:.3f}" for ex in EXPLAINERS), *pooled])  # fmt: skip
    columns = ["penalty weight (candidate)", "training seeds", "test acc", "proxy saliency",
               "proxy Grad-CAM",
               *(f"{LABELS[ex]}: top-100 ∩, {n} layer{'s' if n > 1 else ''} random"
                 for ex in EXPLAINERS for n in LAYERS)]  # fmt: skip
    return _table(columns, rows)


def _tag(p: dict[str, Any]) -> str:
    mark = MARKED.get(p["name"])
    return f"{p['name']} s{p['seed']}" + (f" ({mark})" if mark else "")


def front_table(points: list[dict[str, Any]]) -> dict[str, Any]:
    """One row per model, by its proxy saliency level: test accuracy, the proxy's and the full
    ensemble's top-100 intersections, the top of the cascade (mean ± standard deviation over
    the seeds) per map and number of layers, and the saliency's one-layer score against the
    natural model's (`sanity_checks._verdict`: the seeds' spreads apart or overlapping)."""
    from experiments.sanity_checks import _table, _verdict

    natural = next(p for p in points if p["name"] == NATURAL)
    level = _mean_sd(natural["cascade"]["saliency"]["1"])
    rows = []
    for p in sorted(points, key=lambda p: p["proxy"]["saliency"]):
        ens = p.get("ensemble", {})
        full = " / ".join(f"{ens[m]:.3f}" if m in ens else "-" for m in EXPLAINERS)
        cells = [_cell(p["cascade"][ex][str(n)]) for ex in EXPLAINERS for n in LAYERS]
        verdict = _verdict(level, _mean_sd(p["cascade"]["saliency"]["1"]))
        rows.append([_tag(p), f"{p['test_acc']:.3f}", f"{p['proxy']['saliency']:.3f}",
                     f"{p['proxy']['grad_cam']:.3f}", full, *cells,
                     "-" if p["name"] == NATURAL else verdict])  # fmt: skip
    columns = ["model", "test acc", "proxy saliency", "proxy Grad-CAM",
               "ensemble saliency / Grad-CAM (20 test images)",
               *(f"{LABELS[ex]}: top-100 ∩, {n} layer{'s' if n > 1 else ''} random"
                 for ex in EXPLAINERS for n in LAYERS),
               "saliency, 1 layer, against natural"]  # fmt: skip
    return _table(columns, rows)


def correlation_table(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Per map and number of layers randomised: across the penalised fine-tunes (`UNPENALISED`
    left out), Spearman's rank correlation between the proxy level and the mean top-of-cascade
    score (positive: the more robust, the flatter; with scipy's p-value, which takes the models
    as independent), how many fine-tunes are no flatter than the natural model (mean at most
    natural's mean plus its standard deviation) and the front's members (`pareto`)."""
    from scipy.stats import spearmanr

    from experiments.sanity_checks import _table

    tuned = [p for p in points if p["name"] not in UNPENALISED]
    natural = next(p for p in points if p["name"] == NATURAL)
    rows = []
    for ex in EXPLAINERS:
        for n in LAYERS:
            xs = [p["proxy"][ex] for p in tuned]
            ys = [_mean_sd(p["cascade"][ex][str(n)])[0] for p in tuned]
            test = spearmanr(xs, ys, nan_policy="omit")
            mean, sd = _mean_sd(natural["cascade"][ex][str(n)])
            steep = sum(y <= mean + sd for y in ys)
            allp = [p for p in points if p["name"] in UNPENALISED] + tuned
            pts = [(p["proxy"][ex], _mean_sd(p["cascade"][ex][str(n)])[0]) for p in allp]
            front = ", ".join(f"{allp[i]['name']} s{allp[i]['seed']}" for i in pareto(pts))
            rho = f"{test.statistic:+.2f} (p {test.pvalue:.2g})"
            rows.append([LABELS[ex], str(n), str(len(tuned)), rho,
                         f"{mean:.3f} ± {sd:.3f}", f"{steep} of {len(tuned)}", front])  # fmt: skip
    columns = ["map", "layers randomised from the top", "penalised fine-tunes",
               "Spearman: proxy level against top-of-cascade score (p, as if independent)",
               "natural model's score",
               "penalised fine-tunes no flatter than natural",
               "front (most robust for the least flatness)"]  # fmt: skip
    return _table(columns, rows)


STYLES = {
    NATURAL: ("s", "grey", 60),
    NOW: ("D", "tab:orange", 70),
    BEFORE: ("*", "tab:red", 150),
    NATURAL_FINETUNE: ("v", "black", 45),
}


def _panel(ax: Any, points: list[dict[str, Any]], ex: str, n: int, x_of: str) -> None:
    """One panel: every model's top-of-cascade score (y, seeds' standard deviation as bars)
    against its proxy level on `ex` or its test accuracy (`x_of`), the marked models styled,
    the natural model's level dotted and, against the proxy, the front joined."""
    xs = [p["proxy"][ex] if x_of == "proxy" else p["test_acc"] for p in points]
    stats = [_mean_sd(p["cascade"][ex][str(n)]) for p in points]
    for p, x, (m, sd) in zip(points, xs, stats, strict=True):
        marker, color, size = STYLES.get(p["name"], ("o", "tab:blue", 18))
        ax.errorbar(x, m, yerr=sd, fmt="none", ecolor=color, alpha=0.35, lw=0.8)
        label = MARKED.get(p["name"])
        ax.scatter([x], [m], marker=marker, color=color, s=size, zorder=3, label=label)
    natural = stats[[p["name"] for p in points].index(NATURAL)][0]
    ax.axhline(natural, ls=":", color="grey", lw=1)
    if x_of == "proxy":
        idx = pareto([(x, s[0]) for x, s in zip(xs, stats, strict=True)])
        ax.plot([xs[i] for i in idx], [stats[i][0] for i in idx], "-", color="tab:green",
                lw=1.2, label="front")  # fmt: skip
    what = f"proxy top-100 ∩, {LABELS[ex]}" if x_of == "proxy" else "test accuracy"
    ax.set_xlabel(what)
    ax.set_ylabel(f"{LABELS[ex]}: top-100 ∩, top {n} layer{'s' if n > 1 else ''} random")


def draw(points: list[dict[str, Any]], png: Path = FIGURE) -> Path:
    """Two rows (saliency, Grad-CAM) of three panels (`_panel`): against the proxy with the
    output layer and with the two top layers randomised, and against test accuracy with the
    output layer randomised. Returns `png`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(13, 8), constrained_layout=True)
    for row, ex in zip(axes, EXPLAINERS, strict=True):
        _panel(row[0], points, ex, 1, "proxy")
        _panel(row[1], points, ex, 2, "proxy")
        _panel(row[2], points, ex, 1, "accuracy")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4, frameon=False)
    fig.suptitle("Top of the cascade (lower: the map depends more on the top layers) against "
                 "robustness and accuracy; dotted: the natural model's level")  # fmt: skip
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return png


def write_page(points: list[dict[str, Any]]) -> None:
    """The points (key `front`), tables `5-front` and `5-front-correlation` into
    results/sanity.json, the figure, and SANITY.md from its prose."""
    from experiments.pages import RESULTS, tables_page

    path = RESULTS / "sanity.json"
    data = json.loads(path.read_text())
    data["front"] = points
    data["tables"]["5-front"] = front_table(points)
    data["tables"]["5-front-correlation"] = correlation_table(points)
    data["tables"]["5-front-weights"] = weight_table(points)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    draw(points)
    print(tables_page("SANITY.md"))


def score(named: list[str], out: Path) -> Path:
    """Each `NAME=CHECKPOINT` of `named` scored by the recipe search's proxy as a checkpoint
    taken as it is (`recipe_search.search_one`), its result kept as `<out>/scored/NAME_s0.json`
    (read back when present). Returns the folder."""
    from experiments.recipe_search import search_one

    folder = out / "scored"
    folder.mkdir(parents=True, exist_ok=True)
    for item in named:
        name, _, checkpoint = item.partition("=")
        print(f"scored {search_one(name, 0, folder, 10, checkpoint=checkpoint)}", flush=True)
    return folder


def run(
    folders: list[Path],
    previous: str | None,
    images: int,
    out: Path,
    files: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Every candidate of `candidates` measured (`measure`, resumable), with the full ensemble's
    levels where stored."""
    torch.set_num_threads(1)
    levels = ensemble_levels()
    points = []
    for row in candidates(folders, previous, files):
        if not Path(row["checkpoint"]).is_file() and not row["checkpoint"].startswith("check"):
            print(f"skipped {row['name']} s{row['seed']}: no checkpoint {row['checkpoint']}")
            continue
        point = measure(row, images, out)
        if row["seed"] == 0 and row["name"] in levels:
            point["ensemble"] = levels[row["name"]]
        points.append(point)
        print(f"{_tag(point)}: {point['cascade']}", flush=True)
    return points


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="run folder (resumable)")
    parser.add_argument(
        "--candidates", type=Path, nargs="+", default=None, help="recipe search folders"
    )
    parser.add_argument(
        "--score", nargs="*", default=[], metavar="NAME=CKPT",
        help="checkpoints with no proxy score yet: scored first, kept under OUT/scored",
    )  # fmt: skip
    parser.add_argument("--previous", default=None, help="the robust checkpoint shipped before")
    parser.add_argument(
        "--checkpoint", nargs="*", default=[], metavar="NAME=CKPT",
        help="the checkpoint of a candidate whose JSON does not name its file (a config fit)",
    )  # fmt: skip
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--page", action="store_true", help="only redraw from results/")
    args = parser.parse_args(argv)
    if args.page:
        from experiments.pages import RESULTS

        write_page(json.loads((RESULTS / "sanity.json").read_text())["front"])
        return
    if args.out is None or args.candidates is None:
        parser.error("--out and --candidates are needed unless --page")
    for folder in args.candidates:
        if not folder.is_dir():
            parser.error(f"--candidates {str(folder)!r}: no such folder")
    for flag, items in (("--score", args.score), ("--checkpoint", args.checkpoint)):
        for item in items:
            name, _, checkpoint = item.partition("=")
            if not name or not Path(checkpoint).is_file():
                parser.error(f"{flag} {item!r}: give NAME=CHECKPOINT with an existing file")
    files = dict(item.partition("=")[::2] for item in args.checkpoint)
    if args.previous is not None and not Path(args.previous).is_file():
        parser.error(f"--previous {args.previous!r}: no such checkpoint file")
    if args.images < 1:
        parser.error(f"--images must be >= 1, got {args.images}")
    folders = [*args.candidates, score(args.score, args.out)] if args.score else args.candidates
    write_page(run(folders, args.previous, args.images, args.out, files))


if __name__ == "__main__":
    main()
