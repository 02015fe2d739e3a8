"""Can any weight of the penalty move Grad-CAM under the attack ensemble? An extreme probe.

The every-map recipe keeps 0.24-0.29 of its Grad-CAM top-100 under the full `ensemble` protocol
whatever its options (experiments/RECIPE_SEARCH.md). This probe asks whether the Grad-CAM target
is reachable at some price in accuracy (the targets conflict) or not by this kind of penalty at
all: the shipped recipe (`configs/mnist5k_finetune_every_map.yaml`: the L1 of sum-normalised
maps, the ascent from a vertex of the ball of radius 0.4, Grad-CAM's map squared, on a fifth of
each batch, 2 epochs from the natural model) with its penalty cut to the Grad-CAM term alone,
three ascent steps instead of one and a weight of 3 to 100, accuracy ignored, and variants
(`PROBES`: the natural model's clean maps as the anchor, the top-k objective added to the L1,
the map to the power 4, the attack's ball, every image of each batch, 6 epochs).

Jobs, each one file under --runs, skipped when there (an interrupted run resumes where it
stopped):

- `fit`: the fine-tune (`<name>_s0.ckpt`) and `<name>_fit.json` (test and validation accuracy,
  CPU seconds); the fixed models (`FIXED`: the shipped pair) are loaded, not fitted;
- `full`: Grad-CAM at its default layer under the full `ensemble` protocol on the 20 test images
  of experiments/ENSEMBLE_MAPS.md, through the evaluation engine as RECIPE_SEARCH.md's full check
  measures it, with its chance levels on the same images (`<name>_full.json`): the random map
  and "map = input" attacked under the same ensemble with the model's label kept;
- `cells`: the same ensemble's attack run once more to describe the worst attacked maps
  (`recipe_gradcam.describe`: the cells the clean top-100 pixels lie in, the top cells the
  attacked map keeps), at the default layer (7 x 7 cells) and, as a diagnostic, with Grad-CAM
  computed and attacked at the 14 x 14 layer `LAYER_14` (`<name>_cells_<layer>.json`).

`collect` writes experiments/results/recipe_gradcam_probe.json and its tables into the recipe
search's page results (`recipe_search collect` keeps them); `--png` draws Grad-CAM under the
ensemble against test accuracy.

    nohup nice -n 10 python -m experiments run recipe_gradcam_probe run --runs runs/probe &
    python -m experiments run recipe_gradcam_probe collect --runs runs/probe \\
        --png docs/images/recipe_gradcam_probe.png
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).resolve().parent / "results" / "recipe_gradcam_probe.json"
IMAGES = 20
CHUNK = 10  # images per run of the engine, as RECIPE_SEARCH.md's full check measures them
# The second block's rectified convolution output (14 x 14 on a 28 x 28 input), before its
# max-pooling: the diagnostic layer. The measured layer stays Grad-CAM's default (7 x 7).
LAYER_14 = "features.4"
# Changes to the shipped recipe: the Grad-CAM term alone, three ascent steps, a large weight.
GRADCAM_ONLY: dict[str, Any] = {
    "explainers": ["grad_cam"],
    "map_weights": None,
    "map_powers": [2.0],
    "n_ascent_steps": 3,
}
PROBES: dict[str, dict[str, Any]] = {
    "gc_w3": {**GRADCAM_ONLY, "weight": 3.0},
    "gc_w10": {**GRADCAM_ONLY, "weight": 10.0},
    "gc_w30": {**GRADCAM_ONLY, "weight": 30.0},
    "gc_w100": {**GRADCAM_ONLY, "weight": 100.0},
    "gc_w30_bf1": {**GRADCAM_ONLY, "weight": 30.0, "batch_fraction": 1.0},
    # The attack's own ball, the top-k objective added to the L1, the map to the power 4.
    "gc_w30_r03": {**GRADCAM_ONLY, "weight": 30.0, "radius": 0.3},
    "gc_w30_l1tm": {**GRADCAM_ONLY, "weight": 30.0, "distance": "l1_topk_mass"},
    "gc_w30_p4": {**GRADCAM_ONLY, "weight": 30.0, "map_powers": [4.0]},
    # The top-k objective beside the L1 at other weights, and with the natural model's anchor.
    "gc_w10_l1tm": {**GRADCAM_ONLY, "weight": 10.0, "distance": "l1_topk_mass"},
    "gc_w100_l1tm": {**GRADCAM_ONLY, "weight": 100.0, "distance": "l1_topk_mass"},
    "gc_w30_l1tm_t": {
        **GRADCAM_ONLY,
        "weight": 30.0,
        "distance": "l1_topk_mass",
        "teacher": "mnist5k_baseline",
    },
    # The top-k objective beside the L1 with everything at once.
    "gc_w100_l1tm_bf1_e6": {
        **GRADCAM_ONLY,
        "weight": 100.0,
        "distance": "l1_topk_mass",
        "batch_fraction": 1.0,
        "epochs": 6,
    },
    # Between them: every image of each batch for 2 epochs; 6 epochs on a fifth.
    "gc_w100_l1tm_bf1": {
        **GRADCAM_ONLY,
        "weight": 100.0,
        "distance": "l1_topk_mass",
        "batch_fraction": 1.0,
    },
    "gc_w100_l1tm_e6": {**GRADCAM_ONLY, "weight": 100.0, "distance": "l1_topk_mass", "epochs": 6},
    # The natural model's clean maps as the anchor (the model cannot flatten its own).
    "gc_w10_t": {**GRADCAM_ONLY, "weight": 10.0, "teacher": "mnist5k_baseline"},
    "gc_w30_t": {**GRADCAM_ONLY, "weight": 30.0, "teacher": "mnist5k_baseline"},
    # Everything at once: weight 100 on every image of each batch for 6 epochs.
    "gc_w100_bf1_e6": {**GRADCAM_ONLY, "weight": 100.0, "batch_fraction": 1.0, "epochs": 6},
}
# Models measured as they are: the shipped pair (checkpoint names).
FIXED = {"natural": "mnist5k_baseline", "shipped": "mnist5k_robust"}
FIT_KEYS = ("epochs", "lr")


def probe_options(name: str) -> dict[str, Any]:
    """The options of probe `name`: the shipped recipe (the config's penalty options, learning
    rate and epochs) with the probe's changes.

    Examples:
        >>> o = probe_options("gc_w30")
        >>> o["explainers"], o["weight"], o["start"], o["radius"], o["n_ascent_steps"]
        (['grad_cam'], 30.0, 'corner', 0.4, 3)
    """
    import yaml

    from robust_train.core.resources import shipped_config

    if name not in PROBES:
        raise ValueError(f"`probes` must be some of {sorted(PROBES)}, got {name!r}")
    config = yaml.safe_load(shipped_config("mnist5k_finetune_every_map").read_text())
    (penalty,) = config["model"]["penalties"]
    return {
        **penalty["init_args"],
        "lr": config["model"]["optimizer"]["init_args"]["lr"],
        "epochs": config["trainer"]["max_epochs"],
        **PROBES[name],
    }


def write_row(path: Path, row: dict[str, Any]) -> Path:
    """Write `row` as one line of JSON to `path` through a temporary file (a job stopped while
    writing leaves no partial result), its folder created; returns `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(row) + "\n")
    tmp.replace(path)
    return path


def checkpoint(name: str, runs: Path) -> str:
    """The checkpoint of `name`: a fixed model's name or the probe's fit under `runs`."""
    return FIXED.get(name, str(runs / f"{name}_s0.ckpt"))


def fit_job(name: str, runs: Path) -> Path:
    """Fine-tune probe `name` (seed 0) unless done; its accuracies and cost in `<name>_fit.json`
    (a fixed model: its accuracies only)."""
    from experiments import explainer_recipes as er
    from experiments.every_map import tune
    from robust_train.models import load_classifier
    from robust_train.regularizers import MultiMapSmoothness

    path = runs / f"{name}_fit.json"
    if path.exists():
        return path
    row: dict[str, Any] = {"name": name, "checkpoint": checkpoint(name, runs)}
    if name in FIXED:
        model = load_classifier(FIXED[name])
    else:
        options = probe_options(name)
        fit = {k: options.pop(k) for k in FIT_KEYS}
        term = MultiMapSmoothness(**options)
        model, epochs, seconds = tune([term], fit["epochs"], None, 0, runs / f"{name}_s0.ckpt",
                                      lr=fit["lr"])  # fmt: skip
        row.update(changes=PROBES[name], fit_cpu_s=seconds, epoch_cpu_s=epochs)
    row.update(test_acc=er.accuracy(model, *er.split("test")),
               val_acc=er.accuracy(model, *er.split("val")))  # fmt: skip
    return write_row(path, row)


def full_job(name: str, runs: Path) -> Path:
    """Grad-CAM (default layer) under the full ensemble on the page's images, with the random
    map and "map = input" on the same images, unless done."""
    from experiments import ensemble_maps as em
    from robust_train.evaluation.engine import run_parts, summarize
    from robust_train.models import load_classifier

    path = runs / f"{name}_full.json"
    if path.exists():
        return path
    x, y, index = em.images(IMAGES)
    model = load_classifier(checkpoint(name, runs))
    keys = {"topk": em.TOPK.format(m="grad_cam"), "input": em.REFERENCE,
            "random": em.RANDOM.format(m="grad_cam")}  # fmt: skip
    row: dict[str, Any] = {"name": name, "index": index, **{k: [] for k in keys}}
    cpu = time.process_time()
    for c in range(0, len(index), CHUNK):  # the page's chunks: the attack's draws are the same
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = summarize(run_parts(model, x[c : c + CHUNK], y[c : c + CHUNK],
                                      em.settings("grad_cam", CHUNK, True)))  # fmt: skip
        for k, key in keys.items():
            row[k] += out["per_image"][key]
    row["cpu_s"] = time.process_time() - cpu
    return write_row(path, row)


def clean_job(name: str, runs: Path) -> Path:
    """How much each clean Grad-CAM map (default layer) depends on its image, unless done: its
    top-100 intersection with the other images' clean maps (`other_topk`, the mean over them per
    image); a map that points at the same pixels whatever the image keeps its top 100 under any
    attack and says nothing of the image."""
    from experiments import ensemble_maps as em
    from robust_train.explain import grad_cam
    from robust_train.explain.maps import importance_map
    from robust_train.explain.similarity import topk_intersection
    from robust_train.models import load_classifier

    path = runs / f"{name}_clean.json"
    if path.exists():
        return path
    x, y, index = em.images(IMAGES)
    model = load_classifier(checkpoint(name, runs))
    maps = importance_map(grad_cam(model, x, y)).detach()
    n = len(index)
    other = [
        float(sum(topk_intersection(maps[i : i + 1], maps[j : j + 1], 100)[0]
                  for j in range(n) if j != i) / (n - 1))
        for i in range(n)
    ]  # fmt: skip
    blank = [float(not bool(m.any())) for m in maps]
    return write_row(path, {"name": name, "index": index, "other_topk": other, "blank": blank})


def cells_job(name: str, runs: Path, layer: str | None) -> Path:
    """The ensemble's attack on Grad-CAM at `layer` (None: the default) run once more, and each
    image's clean and worst attacked map described (`recipe_gradcam.describe`), unless done."""
    from experiments import ensemble_maps as em
    from experiments.recipe_gradcam import describe, signed_cam
    from robust_train.attacks.ensemble import ensemble_attack
    from robust_train.evaluation import PROTOCOLS
    from robust_train.explain import get_explainer
    from robust_train.models import load_classifier

    path = runs / f"{name}_cells_{layer or 'default'}.json"
    if path.exists():
        return path
    x, y, index = em.images(IMAGES)
    model = load_classifier(checkpoint(name, runs))
    s, cpu = PROTOCOLS["ensemble"], time.process_time()
    explainer = get_explainer("grad_cam", layer=layer) if layer else "grad_cam"
    ens = ensemble_attack(model, x, y, explainer=explainer, seed=s.seed,
                          betas=s.ensemble_betas, search_queries=s.search_queries,
                          options=s.attack)  # fmt: skip
    row = {"name": name, "layer": layer, "index": index,
           "cam_shape": list(signed_cam(model, x[:1], y[:1], layer).shape[1:]),
           "topk_intersection": ens.result.topk_intersection.tolist(),
           "random_topk": random_topk(ens.result.clean_map).tolist(),
           **describe(model, x, ens.result.adversarial, y, layer=layer),
           "cpu_s": time.process_time() - cpu}  # fmt: skip
    return write_row(path, row)


def random_topk(clean: torch.Tensor, k: int = 100, n_maps: int = 16) -> torch.Tensor:
    """The random-map chance level of maps `clean` (B, 1, H, W): each map's top-`k`
    intersection with `n_maps` seeded uniformly random maps (seeds 0 to n_maps - 1), averaged;
    k / (H W) in expectation.

    Examples:
        >>> clean = torch.rand(64, 1, 28, 28, generator=torch.Generator().manual_seed(99))
        >>> level = random_topk(clean, n_maps=4)
        >>> abs(float(level.mean()) - 100 / 784) < 0.01
        True
    """
    from robust_train.explain.maps import importance_map
    from robust_train.explain.similarity import topk_intersection

    a = importance_map(clean)
    total = torch.zeros(a.shape[0])
    for seed in range(n_maps):
        g = torch.Generator().manual_seed(seed)
        total += topk_intersection(a, torch.rand(a.shape, generator=g), k)
    return total / n_maps


def plan(names: list[str], cells: list[str] | None = None) -> list[tuple[str, str, str | None]]:
    """The jobs in order: every model's fit, full measurement and clean maps first, then the
    cells of `cells` (None: every model) at the default layer, then at `LAYER_14`.

    Examples:
        >>> plan(["gc_w10", "shipped"])[:3]
        [('fit', 'gc_w10', None), ('full', 'gc_w10', None), ('clean', 'gc_w10', None)]
        >>> len(plan(["gc_w10", "shipped"])), len(plan(["gc_w10", "shipped"], ["shipped"]))
        (10, 8)
    """
    jobs: list[tuple[str, str, str | None]] = []
    for name in names:
        jobs += [("fit", name, None), ("full", name, None), ("clean", name, None)]
    for layer in (None, LAYER_14):
        jobs += [("cells", name, layer) for name in (names if cells is None else cells)]
    return jobs


def run(names: list[str], runs: Path, cells: list[str] | None = None) -> None:
    """Every job of `plan(names, cells)` not done yet, in order."""
    for step, name, layer in plan(names, cells):
        if step == "fit":
            path = fit_job(name, runs)
        elif step == "full":
            path = full_job(name, runs)
        elif step == "clean":
            path = clean_job(name, runs)
        else:
            path = cells_job(name, runs, layer)
        print(f"{step} {name} {layer or ''}: {path}", flush=True)


CELLS = {
    "topk_intersection": "top-100 ∩ (this attack run)",
    "cells_under_topk": "cells under the clean top-100",
    "top_cells_share": "clean mass in the top cells",
    "floor_clean": "smallest cell over the largest, clean",
    "top_gap": "gap after the last top cell",
    "cell_change": "largest cell change",
    "top_cells_kept": "top cells kept",
    "mass_ratio": "attacked / clean positive mass",
    "blank": "attacked map blank",
}


def _mean(values: list[Any]) -> float:
    finite = [float(v) for v in values if v is not None and v == v]
    return sum(finite) / len(finite) if finite else float("nan")


def load(runs: Path) -> dict[str, dict[str, Any]]:
    """Every model's finished files under `runs`: {name: {"fit", "full", "cells_<layer>"}}."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(runs.glob("*_*.json")):
        row = json.loads(path.read_text())
        kind = path.stem[len(row["name"]) + 1 :]
        out.setdefault(row["name"], {})[kind] = row
    return out


def _changes(name: str) -> str:
    if name in FIXED:
        return f"(the shipped file {FIXED[name]})"
    changes = PROBES[name]
    rest = [f"{k} {v}" for k, v in changes.items() if GRADCAM_ONLY.get(k, k) != v]
    return ", ".join(["Grad-CAM alone, 3 ascent steps", *rest])


def _other(clean: dict[str, Any] | None) -> str:
    """The clean maps' mean top-100 intersection with the other images' maps, and how many
    clean maps are blank."""
    if clean is None:
        return "-"
    return f"{_mean(clean['other_topk']):.3f} ({int(sum(clean['blank']))} blank)"


def probe_table(models: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each measured model: its changes, test accuracy, Grad-CAM under the full ensemble (mean
    and 95% t interval over the images) beside the random map and "map = input" on the same
    images, and the share of images where Grad-CAM keeps more than "map = input" (images: those
    the model classifies correctly), and how much its clean maps depend on the image (`clean_job`;
    a model with clean maps only: the other columns "-")."""
    from experiments.ensemble_maps import mean_cell, share_above

    rows = []
    for name, files in models.items():
        if "fit" not in files or not ("full" in files or "clean" in files):
            continue
        head = [name, _changes(name), f"{files['fit']['test_acc']:.3f}"]
        if "full" not in files:  # the clean maps only
            rows.append([*head, *["-"] * 5, _other(files["clean"]), "-"])
            continue
        full = files["full"]
        nan = [float("nan") if v is None else v for v in full["input"]]
        rows.append([*head, str(sum(v == v for v in full["topk"])), mean_cell(full["topk"]),
                     mean_cell([float("nan") if v is None else v for v in full["random"]]),
                     mean_cell(nan), share_above(full["topk"], nan),
                     _other(files.get("clean")),
                     f"{full['cpu_s'] / len(full['index']):.1f}"])  # fmt: skip
    return {
        "columns": ["model", "changes to the shipped recipe", "test acc", "images",
                    "Grad-CAM under the ensemble", "random map", "map = input",
                    "Grad-CAM above map = input", "clean map vs other images' (top-100 ∩)",
                    "CPU s per image"],
        "align": "|---" * 10 + "|",
        "rows": rows,
    }  # fmt: skip


def cells_table(models: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each model's worst attacked Grad-CAM maps described at each layer measured: the cells of
    the map, the top-100 intersection of that attack run, the cells the clean top-100 pixels
    lie in, the clean mass in the top cells (k / N of the cells), the gap after the last top
    cell over the largest, the share of the top cells the attacked map keeps, the attacked
    positive mass over the clean, the share of blank attacked maps (means over the images);
    beside them the random map's level at that layer and "map = input" (the model's, from its
    full measurement: no layer)."""
    rows = []
    for name, files in models.items():
        for kind in ("cells_default", f"cells_{LAYER_14}"):
            if kind in files:
                f = files[kind]
                h, w = f["cam_shape"]
                cells = [f"{_mean(f[key]):.3f}" for key in CELLS]
                cells[1] = f"{_mean(f['cells_under_topk']):.1f} of {h * w}"
                layer = f["layer"] or "default (features.5)"
                ref = files.get("full", {}).get("input")
                chance = [f"{_mean(f.get('random_topk', [])):.3f}",
                          f"{_mean(ref):.3f}" if ref else "-"]  # fmt: skip
                rows.append([name, layer, f"{h} x {w}", *cells, *chance])
    return {
        "columns": [
            "model",
            "Grad-CAM layer",
            "cells",
            *CELLS.values(),
            "random map",
            "map = input (same ensemble)",
        ],
        "align": "|---" * (5 + len(CELLS)) + "|",
        "rows": rows,
    }


def collect(runs: Path, results: Path = RESULTS, png: Path | None = None) -> dict[str, Any]:
    """Write `results` (every model's summary and the two tables), put the tables into the
    recipe search's page results, and draw `png` when given; return the data."""
    models = load(runs)
    if not models:
        raise FileNotFoundError(f"`--runs` {str(runs)!r} holds no finished job")
    order = [n for n in (*FIXED, *PROBES) if n in models]
    models = {n: models[n] for n in order}
    data: dict[str, Any] = {
        "about": "python -m experiments run recipe_gradcam_probe: Grad-CAM-only penalties at "
        "large weights, Grad-CAM under the full ensemble on the 20 test images of "
        "ENSEMBLE_MAPS.md with its chance levels, and the attacked maps' cells",
        "models": {n: {k: v for k, v in f.items()} for n, f in models.items()},
        "tables": {"probe": probe_table(models), "probe_cells": cells_table(models)},
    }
    results.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    store_tables(data["tables"])
    if png is not None:
        draw(models, png)
    return data


def store_tables(tables: dict[str, Any]) -> None:
    """`tables` into the recipe search's page results (its other tables left as they are)."""
    from experiments.recipe_search import RESULTS as PAGE

    stored = json.loads(PAGE.read_text())
    stored["tables"].update(tables)
    PAGE.write_text(json.dumps(stored, indent=1) + "\n")


def search_points(page: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """The recipe search's full checks from its page results `page`: per candidate measured
    under the full ensemble, (test accuracy, Grad-CAM's mean).

    Examples:
        >>> page = {"candidates": {"a_s0": {"test_acc": 0.97}}, "tables": {"full": {"rows": [
        ...     ["a_s0", "saliency", "20", "0.5", "0.6 [0.5, 0.7]"],
        ...     ["a_s0", "Grad-CAM", "20", "0.2", "0.25 [0.2, 0.3]"]]}}}
        >>> search_points(page)
        {'a_s0': (0.97, 0.25)}
    """
    out = {}
    for row in page["tables"]["full"]["rows"]:
        if row[1] == "Grad-CAM" and row[0] in page["candidates"]:
            out[row[0]] = (page["candidates"][row[0]]["test_acc"], float(row[4].split()[0]))
    return out


def draw(models: dict[str, dict[str, Any]], png: Path) -> Path:
    """Grad-CAM under the full ensemble against test accuracy, each model with its 95% t
    interval, the random map and "map = input" levels of each, the recipe search's full checks
    (`search_points`), the target and the floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.ensemble_maps import mean_interval
    from experiments.recipe_search_figure import ACCURACY_FLOOR, TARGETS

    fig, ax = plt.subplots(figsize=(7, 5))
    for name, files in models.items():
        if "full" not in files or "fit" not in files:
            continue
        acc, full = files["fit"]["test_acc"], files["full"]
        mean, low, high, _ = mean_interval(full["topk"])
        colour = {"natural": "grey", "shipped": "tab:orange"}.get(name, "tab:blue")
        ax.errorbar([acc], [mean], yerr=[[mean - low], [high - mean]], fmt="o", color=colour,
                    capsize=3)  # fmt: skip
        ax.annotate(name, (acc, mean), textcoords="offset points", xytext=(5, 3), fontsize=7)
        ref = [float("nan") if v is None else v for v in full["input"]]
        ax.scatter([acc], [mean_interval(ref)[0]], marker="_", s=120, color=colour)
        ax.scatter([acc], [_mean(full["random"])], marker="x", s=30, color=colour)
    from experiments.recipe_search import RESULTS as PAGE

    searched = search_points(json.loads(PAGE.read_text())) if PAGE.is_file() else {}
    if searched:
        accs, levels = zip(*searched.values(), strict=True)
        ax.scatter(accs, levels, marker="s", s=25, color="tab:green",
                   label="the search's candidates (full check)")  # fmt: skip
    ax.axhline(TARGETS["grad_cam"], color="tab:red", ls=":", lw=1, label="Grad-CAM target")
    ax.axvline(ACCURACY_FLOOR, color="tab:green", ls=":", lw=1, label="accuracy floor")
    ax.scatter([], [], marker="_", color="k", label="map = input (same ensemble)")
    ax.scatter([], [], marker="x", color="k", label="random map")
    ax.set_xlabel("test accuracy")
    ax.set_ylabel("Grad-CAM top-100 intersection under the full ensemble")
    ax.legend(loc="lower left", fontsize=7)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return png


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments run recipe_gradcam_probe")
    parser.add_argument("step", choices=("run", "collect"))
    parser.add_argument("--probes", nargs="*", default=[*PROBES, *FIXED])
    parser.add_argument(
        "--cells", nargs="*", default=None, help="the models whose attacked maps are described "
        "(default: every one of --probes)"
    )  # fmt: skip
    parser.add_argument("--runs", type=Path, default=Path("runs/recipe_gradcam_probe"))
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--png", type=Path, default=None)
    args = parser.parse_args(argv)
    for flag in ("probes", "cells"):
        for name in getattr(args, flag) or []:
            if name not in PROBES and name not in FIXED:
                parser.error(
                    f"`--{flag}` must be some of {sorted([*PROBES, *FIXED])}, got {name!r}"
                )
    torch.set_num_threads(1)
    if args.step == "run":
        args.runs.mkdir(parents=True, exist_ok=True)
        run(args.probes, args.runs, args.cells)
        return 0
    if not args.runs.is_dir():
        parser.error(f"`--runs` {str(args.runs)!r} is not a folder")
    data = collect(args.runs, args.results, args.png)
    print(f"wrote {args.results} ({len(data['models'])} models)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
