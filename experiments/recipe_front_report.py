"""The tables and the figure of the recipe front (`recipe_front`): every model's maps under the
full ensemble beside their chance levels, the seeds summarised, each map against test accuracy;
and the study's command line (`main`: `run` the jobs of `recipe_front`, or `collect` them).

Reads only finished jobs: a model's map counts when both chunks of its 20 images are there.
The results file is the archive: a model (or a cost unit) without a fit file under --runs is
taken from the results file that `collect` rewrites, as stored there.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import torch

from experiments.recipe_front import IMAGES, MAPS, PRICE, RESULTS, SEEDS, Model, models, run
from experiments.support import finite_mean as _mean

# The targets under the ensemble (input x gradient has none) and the accuracy floor: 0.5
# points under the natural model's 0.971 test accuracy.
TARGETS = {"saliency": 0.65, "grad_cam": 0.50, "lrp": 0.75, "deeplift": 0.75,
           "integrated_gradients": 0.75}  # fmt: skip
ACCURACY_FLOOR = 0.966
COST_LIMIT = 2.0
NATURAL_EPOCHS = 6  # the natural model's training, in epochs: the unit of the recipe's cost


def _nan(values: list[Any]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def model_maps(folder: Path, tag: str) -> dict[str, dict[str, list[float]]]:
    """Each finished map of model `tag` in one folder of ensemble_maps jobs: per image its
    top-100 intersection (`values`), the random map's (`random`) and the image indices; the
    saliency job's "map = input" as the map "input"."""
    from experiments import ensemble_maps as em

    out: dict[str, dict[str, list[float]]] = {}
    for (model, name), chunks in em.load_jobs(folder).items():
        if model != tag:
            continue
        job = em.merged(chunks, sorted(chunks))
        if len(job["index"]) < IMAGES:  # a map counts once every image is measured
            continue
        per = job["per_image"]
        out[name] = {"index": job["index"], "values": _nan(per[em.TOPK.format(m=name)]),
                     "random": _nan(per.get(em.RANDOM.format(m=name), []))}  # fmt: skip
        if em.REFERENCE in per:
            out["input"] = {"index": job["index"], "values": _nan(per[em.REFERENCE])}
    return out


def archived(results: Path | None) -> dict[str, Any]:
    """The stored results file `results` (the archive of the models measured earlier, whose run
    folders may not be on this machine): its "models" and "units"; empty when there is none.

    Examples:
        >>> archived(None)
        {'models': {}, 'units': {}}
    """
    if results is None or not results.is_file():
        return {"models": {}, "units": {}}
    stored = json.loads(results.read_text())
    return {"models": stored.get("models", {}), "units": stored.get("units", {})}


def load(runs: Path, probe: Path, pair: Path, search: Path,
         archive: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Every model with a finished fit file: {tag: {"model", "fit", "maps"}}; a probe's Grad-CAM
    (and, without a saliency job, its "map = input") from the probe's own full measurement. A
    model without a fit file under `runs` but in `archive` (`archived`): its stored fit row and
    maps as they are."""
    out: dict[str, dict[str, Any]] = {}
    stored = (archive or {}).get("models", {})
    for m in models():
        fit_file = runs / "fits" / f"{m.tag}.json"
        if not fit_file.is_file():
            if m.tag in stored:
                out[m.tag] = {"model": m, "fit": stored[m.tag]["fit"],
                              "maps": stored[m.tag]["maps"]}  # fmt: skip
            continue
        if m.source == "pair":
            maps = model_maps(pair, m.pair_tag)
        elif m.source == "searchfull":
            maps = model_maps(search / "full" / f"{m.tag}_s0", "robust")
        else:
            maps = model_maps(runs / "full" / m.tag, "robust")
        own = probe / f"{m.tag}_full.json"
        if m.source == "probe" and own.is_file():
            full = json.loads(own.read_text())
            maps["grad_cam"] = {"index": full["index"], "values": _nan(full["topk"]),
                                "random": _nan(full["random"])}  # fmt: skip
            maps.setdefault("input", {"index": full["index"], "values": _nan(full["input"])})
        out[m.tag] = {"model": m, "fit": json.loads(fit_file.read_text()), "maps": maps}
    return out


def cost(fit: dict[str, Any], unit: dict[str, Any] | None) -> float:
    """The whole recipe's CPU time over natural training: (6 natural epochs + the fine-tune's
    epochs in natural fine-tune epochs) / 6; NaN without both fits' epoch times.

    Examples:
        >>> cost({"epoch_cpu_s": [3.0, 3.0]}, {"epoch_cpu_s": [1.0, 2.0]})
        1.6666666666666667
        >>> math.isnan(cost({}, {"epoch_cpu_s": [1.0]}))
        True
    """
    if not fit.get("epoch_cpu_s") or not unit or not unit.get("epoch_cpu_s"):
        return math.nan
    epochs = sum(fit["epoch_cpu_s"]) / _mean(unit["epoch_cpu_s"])
    return (NATURAL_EPOCHS + epochs) / NATURAL_EPOCHS


def above_input(values: list[float], reference: list[float]) -> tuple[int, int]:
    """On how many images (both finite) the map keeps more than "map = input", of how many.

    Examples:
        >>> above_input([0.5, 0.7, float("nan")], [0.6, 0.6, 0.1])
        (1, 2)
    """
    both = [(v, r) for v, r in zip(values, reference, strict=True) if v == v and r == r]
    return sum(v > r for v, r in both), len(both)


def _reference(maps: dict[str, Any], name: str) -> list[float]:
    """The "map = input" level on the images of map `name` (NaN where not measured)."""
    ref = maps.get("input")
    if not ref:
        return [math.nan] * len(maps[name]["index"])
    by = dict(zip(ref["index"], ref["values"], strict=True))
    return [by.get(i, math.nan) for i in maps[name]["index"]]


def _label(m: Model) -> str:
    names = {
        "natural": "natural (file)",
        "search": "search candidate (config fit)",
        "corner_w6": "search: corner start, weight 6",
        "corner_w10": "search: corner start, weight 10",
    }
    return names.get(m.group, m.group)


def maps_table(found: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per model and map: the top-100 intersection under the full ensemble (mean and 95% t
    interval), its target, the random map and "map = input" on the same images, and the images
    where the map keeps more than "map = input"."""
    from experiments.ensemble_maps import LABELS, mean_cell

    rows = []
    for tag, f in found.items():
        m, maps = f["model"], f["maps"]
        for name in [n for n in MAPS if n in maps]:
            values, ref = maps[name]["values"], _reference(maps, name)
            above, n = above_input(values, ref)
            target = TARGETS.get(name)
            rows.append([tag, _label(m), str(m.seed), LABELS[name], str(len(values)),
                         mean_cell(values), f"{target:.2f}" if target else "-",
                         mean_cell(maps[name]["random"]) if maps[name]["random"] else "-",
                         mean_cell(ref), f"{above} of {n}" if n else "-"])  # fmt: skip
    return {
        "columns": ["model", "recipe", "seed", "map", "images", "under the ensemble (top-100 ∩)",
                    "target", "random map", "map = input (same ensemble)",
                    "images above map = input"],
        "align": "|---" * 10 + "|",
        "rows": rows,
    }  # fmt: skip


def wide_table(found: dict[str, dict[str, Any]], unit: dict[str, Any] | None) -> dict[str, Any]:
    """Per model: test accuracy, the recipe's cost against the natural fine-tune `unit` (fits
    made here), each map's mean under the full ensemble ("-": not measured), "map = input" and
    the random map's range over the maps."""
    from experiments.ensemble_maps import LABELS

    rows = []
    for tag, f in found.items():
        m, maps = f["model"], f["maps"]
        c = cost(f["fit"], unit)
        levels = [f"{_mean(maps[n]['values']):.3f}" if n in maps else "-" for n in MAPS]
        randoms = [_mean(maps[n]["random"]) for n in MAPS if n in maps and maps[n]["random"]]
        ref = _mean(maps["input"]["values"]) if "input" in maps else math.nan
        rows.append([tag, _label(m), str(m.seed), f"{f['fit']['test_acc']:.3f}",
                     "-" if c != c else f"{c:.2f}x", *levels,
                     "-" if ref != ref else f"{ref:.3f}",
                     f"{min(randoms):.3f}-{max(randoms):.3f}" if randoms else "-"])  # fmt: skip
    return {
        "columns": ["model", "recipe", "seed", "test acc", "recipe vs natural (CPU)",
                    *[LABELS[n] for n in MAPS], "map = input (saliency's run)",
                    "random map (over the maps)"],
        "align": "|---" * (7 + len(MAPS)) + "|",
        "rows": rows,
    }  # fmt: skip


def seeds_table(found: dict[str, dict[str, Any]], unit: dict[str, Any] | None) -> dict[str, Any]:
    """Per recipe over its seeds (the search's candidates left out): test accuracy, cost and
    each map's level under the full ensemble, the mean over the seeds measured and the lowest
    and highest seed, and how many seeds meet the map's target (or were measured); beside them
    "map = input" (the saliency runs') and the random map's range."""
    from experiments.ensemble_maps import LABELS

    groups: dict[str, list[dict[str, Any]]] = {}
    for f in found.values():
        if f["model"].source != "searchfull":  # one seed of several recipes: no group
            groups.setdefault(f["model"].group, []).append(f)

    def spread(values: list[float], fmt: str = "{:.3f}") -> str:
        if not values:
            return "-"
        text = fmt.format(_mean(values))
        if len(values) > 1:
            text += f" ({fmt.format(min(values))}-{fmt.format(max(values))})"
        return text

    rows = []
    for fs in groups.values():
        costs = [c for c in (cost(f["fit"], unit) for f in fs) if c == c]
        cells = []
        for name in MAPS:
            levels = [_mean(f["maps"][name]["values"]) for f in fs if name in f["maps"]]
            cell = spread(levels)
            if levels and name in TARGETS:
                cell += f"; {sum(v >= TARGETS[name] for v in levels)} of {len(levels)} at target"
            elif 0 < len(levels) < len(fs):
                cell += f"; {len(levels)} of {len(fs)} seeds"
            cells.append(cell)
        refs = [_mean(f["maps"]["input"]["values"]) for f in fs if "input" in f["maps"]]
        randoms = [_mean(m["random"]) for f in fs for k, m in f["maps"].items()
                   if k != "input" and m.get("random")]  # fmt: skip
        rows.append([_label(fs[0]["model"]), ", ".join(str(f["model"].seed) for f in fs),
                     spread([f["fit"]["test_acc"] for f in fs]),
                     spread(costs, "{:.2f}x") if costs else "-", *cells, spread(refs),
                     f"{min(randoms):.3f}-{max(randoms):.3f}" if randoms else "-"])  # fmt: skip
    return {
        "columns": ["recipe", "seeds", "test acc", "recipe vs natural (CPU)",
                    *[LABELS[n] for n in MAPS], "map = input (same ensemble)",
                    "random map (over the maps and seeds)"],
        "align": "|---" * (6 + len(MAPS)) + "|",
        "rows": rows,
    }  # fmt: skip


def _seed_of(found: dict[str, dict[str, Any]], group: str, seed: int) -> dict[str, Any] | None:
    """The model of recipe `group` at seed `seed` (None if not measured)."""
    return next((f for f in found.values()
                 if f["model"].group == group and f["model"].seed == seed), None)  # fmt: skip


def _paired_rows(found: dict[str, dict[str, Any]], new: str) -> list[list[str]]:
    from experiments.ensemble_maps import LABELS, mean_cell
    from experiments.recipe_search import paired

    rows = []
    for name in MAPS:
        for seed in SEEDS:
            a, b = _seed_of(found, new, seed), _seed_of(found, "shipped", seed)
            if not (a and b and name in a["maps"] and name in b["maps"]):
                continue
            x, y = a["maps"][name], b["maps"][name]
            diff = paired(dict(zip(x["index"], x["values"], strict=True)),
                          dict(zip(y["index"], y["values"], strict=True)))  # fmt: skip
            rows.append([LABELS[name], str(seed), mean_cell(y["values"]),
                         mean_cell(x["values"]), *diff, mean_cell(_reference(a["maps"], name)),
                         mean_cell(x["random"]) if x["random"] else "-"])  # fmt: skip
    return rows


def paired_table(found: dict[str, dict[str, Any]], new: str = "combined") -> dict[str, Any]:
    """Per map and seed measured for both: recipe `new` (a group) against the shipped recipe on
    the same images, each level, the paired per-image difference (mean and 95% t interval) and
    the images above / below."""
    return {
        "columns": ["map", "seed", "shipped", new, f"{new} - shipped (paired)",
                    "images above / below", "map = input (same ensemble)", "random map"],
        "align": "|---" * 8 + "|",
        "rows": _paired_rows(found, new),
    }  # fmt: skip


def price_paired_table(found: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`paired_table` of each price model (`PRICE`, the recipe in a first column) against the
    shipped recipe of the same seed."""
    return {
        "columns": ["recipe", "map", "seed", "shipped", "recipe", "recipe - shipped (paired)",
                    "images above / below", "map = input (same ensemble)", "random map"],
        "align": "|---" * 9 + "|",
        "rows": [[p, *row] for p in PRICE for row in _paired_rows(found, p)],
    }  # fmt: skip


COLOURS = {"natural": "grey", "shipped": "tab:orange", "combined": "tab:blue",
           "gc_w10_l1tm": "tab:green", "gc_w100_l1tm": "tab:purple",
           "search": "tab:olive", "corner_w6": "tab:red", "corner_w10": "tab:brown"}  # fmt: skip


def draw(found: dict[str, dict[str, Any]], png: Path) -> Path:
    """One panel per map: each model's level under the full ensemble against its test accuracy
    (seeds as separate points, coloured by recipe), its "map = input" level (a bar) and random
    map (a cross) at the same accuracy, the map's target and the accuracy floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.ensemble_maps import LABELS

    fig, axes = plt.subplots(2, 3, figsize=(12, 7.5), sharex=True, sharey=True)
    seen: set[str] = set()
    for ax, name in zip(axes.flat, MAPS, strict=True):
        for f in found.values():
            m, maps = f["model"], f["maps"]
            if name not in maps:
                continue
            acc, colour = f["fit"]["test_acc"], COLOURS.get(m.group, "k")
            label = None if m.group in seen else _label(m)
            seen.add(m.group)
            ax.scatter([acc], [_mean(maps[name]["values"])], color=colour, s=30, label=label)
            ref = _mean(_reference(maps, name))
            if ref == ref:
                ax.scatter([acc], [ref], marker="_", s=120, color=colour)
            if maps[name]["random"]:
                ax.scatter([acc], [_mean(maps[name]["random"])], marker="x", s=15, color=colour)
        if name in TARGETS:
            ax.axhline(TARGETS[name], color="tab:red", ls=":", lw=1)
        ax.axvline(ACCURACY_FLOOR, color="tab:green", ls=":", lw=1)
        ax.set_title(LABELS[name], fontsize=9)
        ax.set_ylim(0, 1)
    for ax in axes[1]:
        ax.set_xlabel("test accuracy")
    fig.supylabel("top-100 intersection under the full ensemble", fontsize=10)
    ax = axes.flat[0]
    ax.scatter([], [], marker="_", color="k", label='"map = input" (same ensemble)')
    ax.scatter([], [], marker="x", color="k", label="random map")
    ax.plot([], [], color="tab:red", ls=":", label="target")
    ax.plot([], [], color="tab:green", ls=":", label="accuracy floor")
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=5, fontsize=8)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return png


def collect(runs: Path, probe: Path, pair: Path, search: Path, results: Path = RESULTS,
            png: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Write `results` (every model's fit and per-image levels, the tables), put the tables into
    the recipe search's page results, draw `png` when given; return the data. What `results`
    already holds is the archive: the models and cost units without a fit file under `runs`
    are kept as stored there (`load`)."""
    from experiments.recipe_gradcam_probe import store_tables

    archive = archived(results)
    found = load(runs, probe, pair, search, archive)
    if not found:
        raise FileNotFoundError(f"`--runs` {str(runs)!r} holds no finished fit (nor {results})")
    units: dict[str, Any] = {}
    for u in ("natural_unit", "shipped_unit"):
        path = runs / "fits" / f"{u}.json"
        if path.is_file():
            units[u] = json.loads(path.read_text())
        elif u in archive["units"]:  # stored with its cost, recomputed below
            units[u] = {k: v for k, v in archive["units"][u].items() if k != "cost"}
    unit = units.get("natural_unit")
    tables = {"front": wide_table(found, unit), "front_seeds": seeds_table(found, unit),
              "front_maps": maps_table(found), "front_paired": paired_table(found),
              "front_price_paired": price_paired_table(found)}  # fmt: skip
    data: dict[str, Any] = {
        "about": "python -m experiments run recipe_front: every map of the shipped recipe, the "
        "combined candidate, the Grad-CAM probes and the corner recipe at weights 6 and 10 "
        "under the full ensemble on the 20 test images of ENSEMBLE_MAPS.md, with seeds and "
        "chance levels",
        "units": {u: {**f, "cost": cost(f, unit)} for u, f in units.items()},
        "models": {t: {"group": f["model"].group, "seed": f["model"].seed, "fit": f["fit"],
                       "maps": f["maps"]} for t, f in found.items()},
        "tables": tables,
    }  # fmt: skip
    results.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    store_tables(tables)
    if png is not None:
        draw(found, png)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments run recipe_front")
    parser.add_argument("step", choices=("run", "collect"))
    parser.add_argument("--runs", type=Path, default=Path("runs/recipe_front"))
    parser.add_argument("--search", type=Path, default=Path("runs/recipe_search"))
    parser.add_argument("--probe", type=Path, default=Path("runs/probe"))
    parser.add_argument("--pair", type=Path, default=Path("runs/ensemble_maps"))
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--png", type=Path, default=None)
    args = parser.parse_args(argv)
    tags = [m.tag for m in models()] + ["natural_unit", "shipped_unit"]
    for tag in args.models or []:
        if tag not in tags:
            parser.error(f"`--models` must be some of {tags}, got {tag!r}")
    torch.set_num_threads(1)
    if args.step == "run":
        args.runs.mkdir(parents=True, exist_ok=True)
        run(args.runs, args.search, args.probe, args.models)
        return 0
    for flag in ("runs", "probe", "pair", "search"):
        if not getattr(args, flag).is_dir():
            parser.error(f"`--{flag}` {str(getattr(args, flag))!r} is not a folder")
    data = collect(args.runs, args.probe, args.pair, args.search, args.results, args.png)
    print(f"wrote {args.results} ({len(data['models'])} models)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
