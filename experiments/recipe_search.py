"""The every-map recipe tuned against the attack ensemble: candidates, a proxy, the full check.

The driver of experiments/RECIPE_SEARCH.md. Each candidate is the recipe the search started from
(`configs/mnist5k_finetune_every_map.yaml`: its penalty's options, learning rate and epochs, read
from the config, with `SEARCH_BASE` in place of the options the config took from the search
since) with some options changed (`CANDIDATES`), fine-tuned from the shipped natural
model as `experiments.every_map.tune` does (MNIST-5k train split, batch 64, Adam, per-step
cosine to 0). Steps:

`search`: fit each --candidates at each --seeds (checkpoint `<runs>/<name>_s<seed>.ckpt`, kept)
and score it with the proxy (`proxy_settings`): the `ensemble` protocol with fewer gradient
members (the attacked set equal to the scored set and twice it at beta 10, beta 3 on the scored
set; 2 restarts of 20 sign steps of 0.03) and a random search of 500 queries from the best point
(the full protocol's search gives the final value on nearly every image), on saliency, Grad-CAM
and DeepLIFT, on the first --images VALIDATION images the natural model classifies correctly
(the test images are kept for the check). One JSON per (candidate, seed) under --runs, skipped
when there: an interrupted search resumes where it stopped. The candidate "natural" (no
penalty, the same two epochs) is the unit of the cost.

`full`: one candidate's checkpoint under the full `ensemble` protocol on every map, on the
images of experiments/ENSEMBLE_MAPS.md (`experiments.ensemble_maps.run_job`, its jobs under
`<runs>/full/<name>_s<seed>/`, resumable), with "map = input" attacked with the candidate's label
check.

`cascade`: the cascading randomisation of experiments/SANITY.md (section 5: its images, seeds
and explainers) on each --checkpoint TAG=PATH, one file `<runs>/cascade/<TAG>.json` each,
skipped when there; `collect` puts its top-100 line beside the shipped pair's.

`collect`: experiments/results/recipe_search.json from the runs (`python -m experiments page
recipe_search` writes the page).

    nohup nice -n 10 python -m experiments run recipe_search search --runs runs/recipe_search &
    nohup nice -n 10 python -m experiments run recipe_search full --candidates corner_w6 \\
        --runs runs/recipe_search &
    python -m experiments run recipe_search collect --runs runs/recipe_search
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from experiments.support import finite_mean as _mean

RESULTS = Path(__file__).resolve().parent / "results" / "recipe_search.json"
PROBE_RESULTS = RESULTS.parent / "recipe_gradcam_probe.json"
FRONT_RESULTS = RESULTS.parent / "recipe_front.json"
FACTOR_RESULTS = RESULTS.parent / "recipe_factor.json"
LEVERS_RESULTS = RESULTS.parent / "recipe_levers.json"
PROXY_MAPS = ("saliency", "grad_cam", "deeplift")
# Changes to the shipped recipe; "epochs" and "lr" are the fit's, the rest the penalty's options.
CANDIDATES: dict[str, dict[str, Any]] = {
    "natural": {"weight": 0.0},
    "shipped": {},
    "w6": {"weight": 6.0},
    "corner": {"start": "corner"},
    "corner_w6": {"start": "corner", "weight": 6.0},
    "cosine": {"distance": "cosine"},
    "gc3": {"map_weights": [0.5, 1.0, 3.0]},
    "corner_bf03_a0": {"start": "corner", "n_ascent_steps": 0, "batch_fraction": 0.3},
    "e3": {"epochs": 3},
    "corner_w10": {"start": "corner", "weight": 10.0},
    "corner_w4": {"start": "corner", "weight": 4.0},
    "corner_w5": {"start": "corner", "weight": 5.0},
    "corner_a3_bf01": {"start": "corner", "n_ascent_steps": 3, "batch_fraction": 0.1},
    "corner_gcp2": {"start": "corner", "map_powers": [1.0, 1.0, 2.0]},
    "corner_gcp4": {"start": "corner", "map_powers": [1.0, 1.0, 4.0]},
    "corner_w4_gcp2": {"start": "corner", "weight": 4.0, "map_powers": [1.0, 1.0, 2.0]},
    "corner_w4_p2": {"start": "corner", "weight": 4.0, "map_powers": [2.0, 2.0, 2.0]},
    "corner_w4_gcp4": {"start": "corner", "weight": 4.0, "map_powers": [1.0, 1.0, 4.0]},
    "corner_w4_gcp4_g05": {
        "start": "corner",
        "weight": 4.0,
        "map_weights": [0.5, 1.0, 0.5],
        "map_powers": [1.0, 1.0, 4.0],
    },  # fmt: skip
    "corner_w4_gcp4_g05_dl": {
        "start": "corner",
        "weight": 4.0,
        "explainers": ["saliency", "input_x_gradient", "grad_cam", "deeplift"],
        "map_weights": [0.5, 1.0, 0.5, 1.0],
        "map_powers": [1.0, 1.0, 4.0, 1.0],
        "batch_fraction": 0.1,
    },
    # The top-k attack's own objective as the distance, alone and added to the L1.
    "corner_tm": {"start": "corner", "distance": "topk_mass"},
    "corner_w4_tm": {"start": "corner", "weight": 4.0, "distance": "topk_mass"},
    "corner_l1tm": {"start": "corner", "distance": "l1_topk_mass"},
    "corner_w4_l1tm": {"start": "corner", "weight": 4.0, "distance": "l1_topk_mass"},
    # The share of the clean map's own top-k mass lost (0 for identical maps), with the L1.
    "corner_l1tl": {"start": "corner", "distance": "l1_topk_lost"},
    "corner_w4_l1tl": {"start": "corner", "weight": 4.0, "distance": "l1_topk_lost"},
    "corner_w4_tl": {"start": "corner", "weight": 4.0, "distance": "topk_lost"},
    "corner_w2_l1tm": {"start": "corner", "weight": 2.0, "distance": "l1_topk_mass"},
    "corner_w2_gcp2_l1tm": {
        "start": "corner",
        "weight": 2.0,
        "distance": "l1_topk_mass",
        "map_powers": [1.0, 1.0, 2.0],
    },
    "corner_w25_l1tm": {"start": "corner", "weight": 2.5, "distance": "l1_topk_mass"},
    "corner_gcp2_l1tl": {
        "start": "corner",
        "distance": "l1_topk_lost",
        "map_powers": [1.0, 1.0, 2.0],
    },
    # The cost spent on more epochs of a cheaper penalty (no ascent, a tenth of each batch).
    "corner_w4_gcp2_a0_bf01_e3": {
        "start": "corner",
        "weight": 4.0,
        "map_powers": [1.0, 1.0, 2.0],
        "n_ascent_steps": 0,
        "batch_fraction": 0.1,
        "epochs": 3,
    },
    # Two ascent steps on a tenth of each batch (about the cost of one on a fifth).
    "corner_w4_gcp2_a2_bf01": {
        "start": "corner",
        "weight": 4.0,
        "map_powers": [1.0, 1.0, 2.0],
        "n_ascent_steps": 2,
        "batch_fraction": 0.1,
    },
    # DeepLIFT beside the three maps at the shipped weight, on a tenth of each batch.
    "corner_gcp2_dl_bf01": {
        "start": "corner",
        "explainers": ["saliency", "input_x_gradient", "grad_cam", "deeplift"],
        "map_weights": [0.5, 1.0, 1.5, 1.0],
        "map_powers": [1.0, 1.0, 2.0, 1.0],
        "batch_fraction": 0.1,
    },
    # DeepLIFT in place of input x gradient without the ascent step, on a fifth of each batch.
    "corner_w4_gcp2_dlx_a0": {
        "start": "corner",
        "weight": 4.0,
        "explainers": ["saliency", "deeplift", "grad_cam"],
        "map_powers": [1.0, 1.0, 2.0],
        "n_ascent_steps": 0,
    },
    # A penalty ball larger than the attack's (radius 0.3).
    "corner_gcp2_r04": {"start": "corner", "map_powers": [1.0, 1.0, 2.0], "radius": 0.4},
    "corner_gcp2_r05": {"start": "corner", "map_powers": [1.0, 1.0, 2.0], "radius": 0.5},
    "corner_r04": {"start": "corner", "radius": 0.4},
    "corner_w4_gcp2_r035": {
        "start": "corner",
        "weight": 4.0,
        "map_powers": [1.0, 1.0, 2.0],
        "radius": 0.35,
    },
    "corner_w4_gcp2_r04": {
        "start": "corner",
        "weight": 4.0,
        "map_powers": [1.0, 1.0, 2.0],
        "radius": 0.4,
    },
    # DeepLIFT in place of input x gradient, on a tenth of each batch.
    "corner_w4_gcp2_dlx_bf01": {
        "start": "corner",
        "weight": 4.0,
        "explainers": ["saliency", "deeplift", "grad_cam"],
        "map_powers": [1.0, 1.0, 2.0],
        "batch_fraction": 0.1,
    },
}
FIT_KEYS = ("epochs", "lr")
# The recipe every candidate changes: the config shipped when the search ran (a uniform start in
# the ball of radius 0.3, every map at the power 1). The config ships `corner_gcp2_r04` since;
# the search's candidates keep their meaning.
SEARCH_BASE: dict[str, Any] = {"radius": 0.3, "start": "uniform", "map_powers": None}
# The candidate the config ships now, and its config fit measured as a file.
SHIPPED_NOW = "corner_gcp2_r04"
SHIPPED_NOW_FILE = "corner_gcp2_r04_config"


def shipped_recipe() -> dict[str, Any]:
    """The recipe the search started from: the shipped config's penalty options (with its
    weight), learning rate and epochs, with `SEARCH_BASE` in place of the options the search
    changed."""
    import yaml

    from robust_train.core.resources import shipped_config

    config = yaml.safe_load(shipped_config("mnist5k_finetune_every_map").read_text())
    (penalty,) = config["model"]["penalties"]
    return {
        **penalty["init_args"],
        **SEARCH_BASE,
        "lr": config["model"]["optimizer"]["init_args"]["lr"],
        "epochs": config["trainer"]["max_epochs"],
    }


def recipe(name: str) -> dict[str, Any]:
    """The options of candidate `name`: the shipped recipe with the candidate's changes.

    Examples:
        >>> recipe("corner_w6")["start"], recipe("corner_w6")["weight"], recipe("shipped")["weight"]
        ('corner', 6.0, 3.0)
    """
    if name not in CANDIDATES:
        raise ValueError(f"`candidates` must be some of {sorted(CANDIDATES)}, got {name!r}")
    return {**shipped_recipe(), **CANDIDATES[name]}


def proxy_settings(maps: tuple[str, ...], n: int) -> Any:
    """The proxy of the `ensemble` protocol (see the module docstring) on `maps`, `n` images."""
    from robust_train.evaluation import PROTOCOLS

    full = PROTOCOLS["ensemble"]
    return dataclasses.replace(
        full,
        parts=("fragility",),
        attacks=("topk",),
        explainers=maps,
        n_samples=n,
        attack=dataclasses.replace(full.attack, n_steps=20, step_size=0.03, n_restarts=2),
        ensemble_betas=(3.0, 10.0),
        search_queries=500,
        input_reference=False,
    )


def fit(name: str, seed: int, ckpt: Path) -> tuple[Any, dict[str, Any]]:
    """Fine-tune candidate `name` (seed `seed`: the batch order and the penalty's draws) unless
    `ckpt` is there; (model in eval mode, the fit's CPU seconds in all and per epoch)."""
    from experiments.every_map import tune
    from robust_train.models import load_classifier
    from robust_train.regularizers import MultiMapSmoothness

    options = recipe(name)
    fit_options = {k: options.pop(k) for k in FIT_KEYS}
    if ckpt.exists():
        return load_classifier(ckpt), {}
    options["seed"] = seed
    terms = [MultiMapSmoothness(**options)] if options["weight"] > 0 else []
    model, epochs, seconds = tune(
        terms, fit_options["epochs"], None, seed, ckpt, lr=fit_options["lr"]
    )
    return model, {"fit_cpu_s": seconds, "epoch_cpu_s": epochs}


def proxy(model: Any, maps: tuple[str, ...], n: int) -> dict[str, Any]:
    """The proxy on the first `n` val images the natural model classifies correctly: per map
    the top-100 intersection per image (NaN where the model misclassifies) and its mean."""
    from experiments import explainer_recipes as er
    from experiments.ensemble_maps import TOPK
    from experiments.every_map import reference_images
    from robust_train.evaluation.engine import run_parts, summarize
    from robust_train.models import load_classifier

    x, y = er.split("val")
    keep = reference_images(load_classifier(er.BASELINE), x, y, n)
    start = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = summarize(run_parts(model, x[keep], y[keep], proxy_settings(maps, len(keep))))
    per_image = {m: out["per_image"][TOPK.format(m=m)] for m in maps}
    return {
        "index": keep.tolist(),
        "per_image": per_image,
        "proxy": {m: out["measures"][TOPK.format(m=m)] for m in maps},
        "proxy_cpu_s": time.process_time() - start,
    }


def search_one(name: str, seed: int, runs: Path, n: int, checkpoint: str | None = None) -> Path:
    """Fit and score one candidate unless its result file is there; return the file. With
    `checkpoint`, score that file as it is under the tag `name` (no fit)."""
    from experiments import explainer_recipes as er
    from robust_train.models import load_classifier

    path = runs / f"{name}_s{seed}.json"
    if path.exists():
        return path
    if checkpoint is None:
        changes = CANDIDATES[name]
        model, cost = fit(name, seed, runs / f"{name}_s{seed}.ckpt")
    else:
        changes, model, cost = {"checkpoint": checkpoint}, load_classifier(checkpoint), {}
    row = {"name": name, "seed": seed, "changes": changes, **cost,
           "val_acc": er.accuracy(model, *er.split("val")),
           "test_acc": er.accuracy(model, *er.split("test"))}  # fmt: skip
    if changes.get("weight") != 0.0:  # the natural fine-tune is the cost unit only
        row.update(proxy(model, PROXY_MAPS, n))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(row) + "\n")
    tmp.replace(path)
    return path


def run_full(name: str, seed: int, runs: Path, maps: list[str], images: int, chunk: int) -> None:
    """Candidate `name` under the full ensemble on every map (`ensemble_maps.run_job`)."""
    from experiments import ensemble_maps as em

    ckpt = runs / f"{name}_s{seed}.ckpt"
    if not ckpt.exists():
        raise FileNotFoundError(f"`--candidates` {name!r}: no fit at {str(ckpt)!r}; run search")
    for explainer, c in em.plan(maps, images, chunk):
        path = em.run_job("robust", explainer, c, chunk, runs / "full" / ckpt.stem, images,
                          str(ckpt))  # fmt: skip
        print(f"{name} s{seed} {explainer} {c}: {path}", flush=True)


def run_cascade(tag: str, checkpoint: str, runs: Path, images: int = 32) -> Path:
    """The cascading randomisation curves of `checkpoint` as SANITY.md's section 5 measures them
    (`sanity_checks.seeded_sanity` on its first `images` test images), written to
    `<runs>/cascade/<tag>.json` unless there; returns the file."""
    from experiments.sanity_checks import curve_table, seeded_sanity, test_images
    from robust_train.models import load_classifier

    path = runs / "cascade" / f"{tag}.json"
    if not path.exists():
        x, y = test_images(images)
        table = curve_table({tag: seeded_sanity(load_classifier(checkpoint), x, y)}, "cascade")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n")
    return path


def cascade_table(runs: Path, sanity: Path = RESULTS.parent / "sanity.json") -> dict[str, Any]:
    """The top-100 line of the cascading randomisation per explainer: the shipped pair's (from
    SANITY.md's results) and each candidate's under `<runs>/cascade/`, layers randomised from
    the top (lower: the map depends more on the layers randomised). SANITY.md's section 5
    measures the pair shipped now and, in its comparison table, the robust model shipped before
    `SHIPPED_NOW`; rows: shipped natural, shipped before, shipped now, then the candidates."""
    from experiments.sanity_checks import PREVIOUS

    tables = json.loads(sanity.read_text())["tables"]
    shipped = tables["5-cascade-curves"]
    found = [json.loads(p.read_text()) for p in sorted((runs / "cascade").glob("*.json"))]
    names = {"natural": "shipped natural", PREVIOUS: "shipped before", "robust": "shipped now",
             SHIPPED_NOW_FILE: f"shipped now's config fit ({SHIPPED_NOW_FILE})"}  # fmt: skip
    order = {name: i for i, name in enumerate(names.values())}
    every = [shipped, tables.get("5-cascade-previous", {"rows": []}), *found]
    rows = []
    for explainer in dict.fromkeys(r[0] for r in shipped["rows"]):
        mine = [[r[0], names.get(r[1], r[1]), *r[2:]] for t in every for r in t["rows"]
                if r[0] == explainer and r[2] == "top-100 ∩"]  # fmt: skip
        rows += sorted(mine, key=lambda r: order.get(r[1], len(order)))
    return {"columns": shipped["columns"], "align": shipped["align"], "rows": rows}


def load_search(runs: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The finished candidates by (name, seed)."""
    rows = [json.loads(p.read_text()) for p in sorted(runs.glob("*_s*.json"))]
    return {(r["name"], r["seed"]): r for r in rows}


def _cost(row: dict[str, Any], natural: dict[str, Any] | None) -> tuple[str, str]:
    """The fine-tune's cost in natural epochs and the whole recipe's (6 natural epochs plus the
    fine-tune, over 6), from the epochs' CPU seconds beside the natural fine-tune's (the same
    seed's, else seed 0's)."""
    if not row.get("epoch_cpu_s") or not natural or not natural.get("epoch_cpu_s"):
        return "-", "-"
    unit = sum(natural["epoch_cpu_s"]) / len(natural["epoch_cpu_s"])
    epochs = sum(row["epoch_cpu_s"]) / unit
    return f"{epochs:.2f}", f"{(6 + epochs) / 6:.2f}x"


def _level(row: dict[str, Any], name: str | None) -> str:
    """One proxy level of a candidate (None: the mean of its maps); "-" for the cost unit."""
    if "proxy" not in row:
        return "-"
    value = row["proxy"][name] if name else _mean(list(row["proxy"].values()))
    return f"{value:.3f}"


def candidate_table(found: dict[tuple[str, int], dict[str, Any]]) -> dict[str, Any]:
    """Every candidate: its changes, accuracy, cost, each proxy map, and whether it is on the
    front of (val accuracy, mean proxy intersection)."""
    from experiments.every_map import pareto

    found = {key: r for key, r in found.items() if "proxy" in r or key[0] == "natural"}
    points = {f"{n} s{s}": (r["val_acc"], _mean(list(r["proxy"].values())))
              for (n, s), r in found.items() if "proxy" in r}  # fmt: skip
    front = set(pareto(points)) if points else set()
    rows = []
    for (name, seed), r in sorted(found.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        epochs, whole = _cost(r, found.get(("natural", seed), found.get(("natural", 0))))
        changes = ", ".join(f"{k} {v}" for k, v in r["changes"].items()) or "(the shipped recipe)"
        rows.append([name, str(seed), changes, f"{r['val_acc']:.3f}", f"{r['test_acc']:.3f}",
                     epochs, whole, *(_level(r, m) for m in PROXY_MAPS),
                     _level(r, None),
                     "yes" if f"{name} s{seed}" in front else ""])  # fmt: skip
    labels = ["saliency", "Grad-CAM", "DeepLIFT"]
    return {
        "columns": ["candidate", "seed", "changes to the shipped recipe", "val acc", "test acc",
                    "fine-tune cost (natural epochs)", "recipe vs natural", *labels,
                    "mean of the three", "on the front"],
        "align": "|---" * 12 + "|",
        "rows": rows,
    }  # fmt: skip


def seed_table(found: dict[tuple[str, int], dict[str, Any]]) -> dict[str, Any]:
    """Each candidate fitted at two seeds or more: its test accuracy and proxy levels as the
    mean over the seeds with the lowest and highest seed's value.

    Examples:
        >>> row = lambda acc, s: {"test_acc": acc, "proxy": {m: s for m in PROXY_MAPS}}
        >>> seed_table({("a", 0): row(0.96, 0.5), ("a", 1): row(0.98, 0.7),
        ...             ("b", 0): row(0.9, 0.1)})["rows"][0][:4]
        ['a', '0, 1', '0.970 (0.960-0.980)', '0.600 (0.500-0.700)']
    """
    names = sorted({n for (n, _), r in found.items() if "proxy" in r})
    rows = []
    for name in names:
        seeds = sorted(s for (n, s), r in found.items() if n == name and "proxy" in r)
        if len(seeds) < 2:
            continue
        runs = [found[(name, s)] for s in seeds]
        columns = [[r["test_acc"] for r in runs]]
        columns += [[r["proxy"][m] for r in runs] for m in PROXY_MAPS]
        columns.append([_mean(list(r["proxy"].values())) for r in runs])
        cells = [f"{_mean(c):.3f} ({min(c):.3f}-{max(c):.3f})" for c in columns]
        rows.append([name, ", ".join(map(str, seeds)), *cells])
    return {
        "columns": ["candidate", "seeds", "test acc", "saliency", "Grad-CAM", "DeepLIFT",
                    "mean of the three"],
        "align": "|---" * 7 + "|",
        "rows": rows,
    }  # fmt: skip


def _per_image(folder: Path, tag: str) -> dict[str, dict[int, float]]:
    """Each map's top-100 intersection per test image index in one folder of ensemble_maps
    jobs of model `tag` (all its chunks)."""
    from experiments import ensemble_maps as em

    out: dict[str, dict[int, float]] = {}
    for (model, name), chunks in em.load_jobs(folder).items():
        if model == tag:
            job = em.merged(chunks, sorted(chunks))
            values = job["per_image"][em.TOPK.format(m=name)]
            out[name] = dict(zip(job["index"], values, strict=True))
    return out


def paired(new: dict[int, float], old: dict[int, float]) -> tuple[str, str]:
    """The mean per-image difference new - old with its 95% t interval, and on how many images
    new is above / below old (images measured in both).

    Examples:
        >>> paired({1: 0.5, 2: 0.7, 3: 0.6}, {1: 0.4, 2: 0.7, 3: 0.5, 4: 0.1})[1]
        '2 / 0 of 3'
    """
    from experiments.ensemble_maps import mean_interval

    both = [i for i in new if i in old and new[i] == new[i] and old[i] == old[i]]
    if not both:
        return "-", "-"
    mean, low, high, _ = mean_interval([new[i] - old[i] for i in both])
    above = sum(new[i] > old[i] for i in both)
    below = sum(new[i] < old[i] for i in both)
    return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]", f"{above} / {below} of {len(both)}"


def full_table(runs: Path, before: Path | None = None) -> dict[str, Any]:
    """Each candidate measured under the full ensemble beside the shipped robust model on the
    same images: with `before` (the job folder of ENSEMBLE_MAPS.md's pair before the
    re-shipping) the robust model's level on the same images and the paired per-image
    difference; beside it "map = input" under the same ensemble and
    the level of a uniformly random map on the same images (the jobs' seeded random maps)."""
    from experiments import ensemble_maps as em

    old = _per_image(before, "robust") if before else {}
    rows = []
    for folder in sorted((runs / "full").glob("*")):
        jobs = {m: em.merged(c, sorted(c)) for (_, m), c in em.load_jobs(folder).items()}
        ref = dict(zip(jobs["saliency"]["index"], jobs["saliency"]["per_image"][em.REFERENCE],
                       strict=True)) if "saliency" in jobs else {}  # fmt: skip
        for name in [m for m in em.LABELS if m in jobs]:
            values = jobs[name]["per_image"][em.TOPK.format(m=name)]
            reference = [ref.get(i, math.nan) for i in jobs[name]["index"]]
            random = jobs[name]["per_image"].get(em.RANDOM.format(m=name))
            diff = paired(dict(zip(jobs[name]["index"], values, strict=True)), old.get(name, {}))
            mine = old.get(name, {})
            then = [mine.get(i, math.nan) for i in jobs[name]["index"]] if mine else []
            rows.append([folder.name, em.LABELS[name], str(len(values)),
                         em.mean_cell(then) if then else "-", em.mean_cell(values), *diff,
                         em.mean_cell(reference), em.share_above(values, reference),
                         em.mean_cell(random) if random else "not run",
                         f"{jobs[name]['cpu_seconds'] / max(1, len(values)):.1f}"])  # fmt: skip
    return {
        "columns": ["candidate", "map", "images", "shipped before", "candidate",
                    "candidate - shipped (paired)", "images above / below shipped",
                    "map = input (candidate)", "candidate above map = input",
                    "random map (candidate)", "CPU s per image"],
        "align": "|---" * 11 + "|",
        "rows": rows,
    }  # fmt: skip


def check_table(
    found: dict[tuple[str, int], dict[str, Any]], full: dict[str, Any]
) -> dict[str, Any]:
    """Does the proxy order a fully measured candidate and the shipped model as the full
    ensemble does? Per proxy map: both proxy levels (val images) and their difference beside
    the full ensemble's paired difference (test images)."""
    from experiments import ensemble_maps as em

    rows = []
    shipped = found.get(("shipped_before", 0))
    for row in full["rows"]:
        tag, seed = row[0].rsplit("_s", 1)
        name = next((m for m in PROXY_MAPS if em.LABELS[m] == row[1]), None)
        mine = found.get((tag, int(seed)))
        if not (shipped and mine and name and "proxy" in mine):
            continue
        a, b = mine["proxy"][name], shipped["proxy"][name]
        rows.append([tag, row[1], f"{a:.3f}", f"{b:.3f}", f"{a - b:+.3f}", row[5]])
    return {
        "columns": ["candidate", "map", "proxy: candidate", "proxy: shipped", "proxy difference",
                    "full ensemble difference (paired)"],
        "align": "|---" * 6 + "|",
        "rows": rows,
    }  # fmt: skip


def _ensemble_rows(runs: Path, before: Path) -> list[list[str]]:
    """The before -> after rows of each map under the full ensemble (`shipped_table`)."""
    from experiments import ensemble_maps as em

    now = em.load_jobs(runs / "full" / f"{SHIPPED_NOW_FILE}_s0")
    then = em.load_jobs(before)
    jobs = {(tag, m): em.merged(c, sorted(c)) for (tag, m), c in then.items()}
    jobs.update({("now", m): em.merged(c, sorted(c)) for (_, m), c in now.items()})
    refs = {tag: dict(zip(jobs[(tag, "saliency")]["index"],
                          jobs[(tag, "saliency")]["per_image"][em.REFERENCE], strict=True))
            for tag in ("robust", "now") if (tag, "saliency") in jobs}  # fmt: skip
    rows = []
    for name in [m for m in em.LABELS if all((t, m) in jobs for t in ("natural", "robust", "now"))]:
        cells: dict[str, Any] = {}
        for tag in ("natural", "robust", "now"):
            job = jobs[(tag, name)]
            cells[tag] = job["per_image"][em.TOPK.format(m=name)]
            cells[f"{tag}_ref"] = [refs.get(tag, {}).get(i, math.nan) for i in job["index"]]
            cells[f"{tag}_random"] = job["per_image"].get(em.RANDOM.format(m=name), [])
            cells[f"{tag}_index"] = job["index"]
        new = dict(zip(cells["now_index"], cells["now"], strict=True))
        diff, _ = paired(new, dict(zip(cells["robust_index"], cells["robust"], strict=True)))
        pair = [(em.mean_cell(cells[f"{t}_{k}"]) if cells[f"{t}_{k}"] else "-")
                for k in ("ref", "random") for t in ("robust", "now")]  # fmt: skip
        above = [em.share_above(cells[t], cells[f"{t}_ref"]) for t in ("robust", "now")]
        rows.append([f"{em.LABELS[name]} top-100 ∩ under the ensemble ({len(cells['now'])} "
                     "test images)", em.mean_cell(cells["natural"]), em.mean_cell(cells["robust"]),
                     em.mean_cell(cells["now"]), diff, f"{pair[0]} / {pair[1]}",
                     f"{pair[2]} / {pair[3]}", f"{above[0]} / {above[1]}"])  # fmt: skip
    return rows


def shipped_table(
    found: dict[tuple[str, int], dict[str, Any]], runs: Path, before: Path
) -> dict[str, Any]:
    """The shipped robust model before and after it was re-shipped as `SHIPPED_NOW`, beside the
    natural model: test accuracy, each map's top-100 intersection under the full ensemble on
    the same test images (`before`: the ensemble_maps jobs of the pair before; the after model's:
    the search's full check of its config fit) with the paired difference, "map = input" and a
    random map under the same ensemble and the share of images above "map = input" (before /
    after), the recipe's cost (the search's seed-0 fits), and the saliency and Grad-CAM maps'
    top-100 intersection with their maps on the network whose top layer is randomised."""
    acc = [found.get(k, {}).get("test_acc") for k in
           (("natural_file", 0), ("shipped_before", 0), (SHIPPED_NOW_FILE, 0))]  # fmt: skip
    natural = found.get(("natural", 0))
    cost = [_cost(found.get((n, 0), {}), natural)[1] for n in ("shipped", SHIPPED_NOW)]
    rows = [["test accuracy (1,000 images)", *(f"{a:.3f}" if a else "-" for a in acc),
             f"{acc[2] - acc[1]:+.3f}" if acc[1] and acc[2] else "-", "", "", ""],
            ["recipe cost (natural training = 1x)", "1x", *cost, "", "", "", ""],
            *_ensemble_rows(runs, before)]  # fmt: skip
    cascade = cascade_table(runs)["rows"]
    for label in ("saliency", "Grad-CAM"):
        level = {r[1]: r[4] for r in cascade if r[0] == label}
        now = level.get("shipped now", "-")
        rows.append([f"{label}: top-100 ∩ with the top layer randomised (cascade, 3 seeds)",
                     level.get("shipped natural", "-"), level.get("shipped before", "-"),
                     now, "", "", "", ""])  # fmt: skip
    return {
        "columns": ["measure", "natural", "before", "after", "after - before (paired)",
                    "map = input (before / after)", "random map (before / after)",
                    "above map = input (before / after)"],
        "align": "|---" * 8 + "|",
        "rows": rows,
    }  # fmt: skip


def collect(
    runs: Path,
    results: Path = RESULTS,
    before: Path | None = None,
    diagnosis: Path | None = None,
    png: Path | None = None,
    probe: Path | None = PROBE_RESULTS,
    front: Path | None = FRONT_RESULTS,
) -> dict[str, Any]:
    """Write the results file from the finished candidates and full checks (`before`: the
    ensemble_maps jobs of the shipped pair, for paired differences; `diagnosis`: the
    recipe_gradcam results, as a table; `png`: the front's figure; `probe` and `front`: the
    results of recipe_gradcam_probe and recipe_front, whose tables are kept, as are
    recipe_factor's and recipe_levers'); return it."""
    found = load_search(runs)
    if not found:
        raise FileNotFoundError(f"`--runs` {str(runs)!r} holds no finished candidate")
    data: dict[str, Any] = {
        "about": "python -m experiments run recipe_search: candidates of the every-map recipe "
        "under a proxy of the attack ensemble (val images), the chosen one under the full "
        "ensemble (test images of ENSEMBLE_MAPS.md)",
        "proxy": {"maps": list(PROXY_MAPS), "settings": "ensemble: 20 sign steps of 0.03, "
                  "2 restarts, betas 3 and 10, 500 search queries"},
        "candidates": {f"{n}_s{s}": {k: v for k, v in r.items() if k != "per_image"}
                       for (n, s), r in found.items()},
        "tables": {"candidates": candidate_table(found), "seeds": seed_table(found),
                   "full": full_table(runs, before)},
    }  # fmt: skip
    data["tables"]["check"] = check_table(found, data["tables"]["full"])
    data["tables"]["cascade"] = cascade_table(runs)
    if before is not None and (runs / "full" / f"{SHIPPED_NOW_FILE}_s0").is_dir():
        data["tables"]["shipped"] = shipped_table(found, runs, before)
    if diagnosis is not None and diagnosis.is_file():
        from experiments.recipe_gradcam import diagnosis_table

        data["tables"]["gradcam"] = diagnosis_table(json.loads(diagnosis.read_text()))
    # the tables of the studies beside it, as stored
    for kept in (probe, front, FACTOR_RESULTS, LEVERS_RESULTS):
        if kept is not None and kept.is_file():
            data["tables"].update(json.loads(kept.read_text())["tables"])
    if png is not None:
        from experiments.recipe_search_figure import draw_front

        draw_front(found, png, PROXY_MAPS)
    results.write_text(json.dumps(data, indent=1) + "\n")
    return data


def _parser() -> argparse.ArgumentParser:
    from experiments import ensemble_maps as em

    parser = argparse.ArgumentParser(prog="python -m experiments run recipe_search")
    parser.add_argument("step", choices=("search", "full", "cascade", "collect"))
    parser.add_argument("--candidates", nargs="*", default=list(CANDIDATES))
    parser.add_argument(
        "--checkpoint",
        nargs="+",
        default=[],
        metavar="TAG=PATH",
        help="search: also score these files as they are (no fit); cascade: these files",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--images", type=int, default=10, help="val images of the proxy")
    parser.add_argument("--full-images", type=int, default=20, help="test images of `full`")
    parser.add_argument("--maps", nargs="+", choices=sorted(em.LABELS), default=list(em.MAPS))
    parser.add_argument("--runs", type=Path, default=Path("runs/recipe_search"))
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        help="collect: ensemble_maps job folder of the shipped pair (paired)",
    )
    parser.add_argument(
        "--diagnosis",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / "recipe_gradcam.json",
        help="collect: the recipe_gradcam results (a table where the file is there)",
    )
    parser.add_argument(
        "--png",
        type=Path,
        default=None,
        help="collect: draw the front here (docs/images/recipe_search_front.png on the page)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    for name in args.candidates:
        if name not in CANDIDATES:
            parser.error(f"`--candidates` must be some of {sorted(CANDIDATES)}, got {name!r}")
    files = dict(c.split("=", 1) for c in args.checkpoint if "=" in c)
    if len(files) != len(args.checkpoint):
        parser.error(f"`--checkpoint` takes TAG=PATH, got {args.checkpoint}")
    for flag in ("images", "full_images"):
        if getattr(args, flag) < 1:
            parser.error(f"`--{flag.replace('_', '-')}` must be >= 1, got {getattr(args, flag)}")
    torch.set_num_threads(1)
    args.runs.mkdir(parents=True, exist_ok=True)
    if args.step == "collect":
        data = collect(args.runs, args.results, args.before, args.diagnosis, args.png)
        print(f"wrote {args.results} ({len(data['tables']['candidates']['rows'])} candidates)")
        return 0
    if args.step == "cascade":
        for tag, file in files.items():
            print(f"{tag}: {run_cascade(tag, file, args.runs)}", flush=True)
        return 0
    for tag, file in files.items():
        print(f"{tag}: {search_one(tag, 0, args.runs, args.images, file)}", flush=True)
    for seed in args.seeds:
        for name in args.candidates:
            if args.step == "search":
                print(f"{name} s{seed}: {search_one(name, seed, args.runs, args.images)}",
                      flush=True)  # fmt: skip
            else:
                run_full(name, seed, args.runs, args.maps, args.full_images, 10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
