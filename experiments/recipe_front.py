"""The every-map recipe's front over every map under the attack ensemble, with seeds (MNIST-5k).

The recipe search (experiments/RECIPE_SEARCH.md) measured its candidates under the full
`ensemble` protocol one seed at a time, and the Grad-CAM-only probes on Grad-CAM alone. This
study measures every map of a few models, with seeds, on the 20 test images of
experiments/ENSEMBLE_MAPS.md, so that the page can draw the front over all maps:

- `combined`: the shipped recipe (`configs/mnist5k_finetune_every_map.yaml`, its penalty as it
  is) plus a second `MultiMapSmoothness` term on Grad-CAM alone, the probe `gc_w10_l1tm` of
  `recipe_gradcam_probe` (the L1 plus the top-k objective, weight 10, three ascent steps),
  fine-tuned from the shipped natural model by the search's loop (`every_map.tune`), seeds 0-2;
- `shipped`: seed 0 the shipped file (its jobs reused from the `--pair` folder), seeds 1 and 2
  the search's loop fits of the shipped recipe (`corner_gcp2_r04_s<seed>.ckpt` under `--search`);
- the probes `gc_w10_l1tm` and `gc_w100_l1tm` (seed 0, `<name>_s0.ckpt` under `--probe`): their
  other maps (Grad-CAM is read from the probe's own measurement);
- `natural`: the shipped natural file (its jobs reused from the `--pair` folder), and the
  search's candidates measured under the full ensemble (`SEARCH_FULL`, their jobs and
  accuracies reused from `--search`);
- the price models: the search's `corner` recipe at penalty weights 6 and 10 (`PRICE`), seed 0
  the search's fits (`<name>_s0.ckpt` under `--search`), seeds 1 and 2 (`PRICE_SEEDS`) fitted by
  the search's own fit (`recipe_search.fit`) into `--search` as `<name>_s<seed>.ckpt` when that
  checkpoint is missing;
- the cost unit: the natural fine-tune (weight 0) and the shipped recipe refitted by the same
  loop at the same time, for CPU seconds per epoch only.

Jobs, each one file under --runs, skipped when there (an interrupted run resumes where it
stopped): `fits/<tag>.json` (test and validation accuracy; CPU seconds per epoch of a fit),
and one `ensemble_maps` job per (model, map, chunk of 10 images) under `full/<tag>/`, in the
order of `plan`: `PRIORITY` first (Grad-CAM and saliency of every seed, then the other maps of
seed 0 and of the probes), then the other maps of seeds 1 and 2.

The stored results file (`RESULTS`) is the archive of what was measured: `collect` takes a
model whose fit file is not under --runs (its run folder not on this machine) from the results
file it rewrites, as stored there (its fit row and per-image levels), and likewise the cost
unit's fits; a model with a fit file under --runs is read from its jobs. So a collect with an
empty --runs writes the stored results back unchanged, and one with new models' jobs adds them.

    nohup nice -n 10 python -m experiments run recipe_front run --runs runs/recipe_front \\
        --search runs/recipe_search --probe runs/probe --pair runs/ensemble_maps &
    nohup nice -n 10 python -m experiments run recipe_front run --runs runs/front_price \\
        --search runs/front_price/search --models corner_w6_s1 corner_w6_s2 corner_w10_s1 \\
        corner_w10_s2 &
    python -m experiments run recipe_front collect --runs runs/front_price \\
        --search runs/recipe_search --probe runs/probe --pair runs/ensemble_maps \\
        --png docs/images/recipe_front.png
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.recipe_gradcam_probe import write_row

RESULTS = Path(__file__).resolve().parent / "results" / "recipe_front.json"
IMAGES = 20
CHUNK = 10  # images per engine run, as the page's full checks measure them
MAPS = ("saliency", "input_x_gradient", "grad_cam", "lrp", "deeplift", "integrated_gradients")
PROBES = ("gc_w10_l1tm", "gc_w100_l1tm")
# The search's `corner` recipe (the ascent from a vertex of the radius-0.3 ball) fitted at a
# larger penalty weight, 6 and 10 (seed 0), accuracy ignored: how far each map goes at a price
# (their checkpoints `<tag>_s0.ckpt` under `--search`).
PRICE = ("corner_w6", "corner_w10")
PRICE_SEEDS = (1, 2)  # their other seeds: tags `<name>_s<seed>`, the recipe's group
FIRST = ("grad_cam", "saliency")
LATER = ("lrp", "deeplift", "input_x_gradient", "integrated_gradients")  # the cheaper first
# What is measured first, in order (each model's maps): the combined candidate's Grad-CAM and
# saliency on every seed, the shipped recipe's seeds 1 and 2 on the same, the weight-10 probe's
# saliency, LRP and DeepLIFT of seed 0 and of that probe, the weight-100 probe's; then
# input x gradient and integrated gradients of seed 0 and the probes, then every map left.
PRIORITY: tuple[tuple[str, tuple[str, ...]], ...] = (
    *((f"combined_s{s}", FIRST) for s in (0, 1, 2)),
    *((f"shipped_s{s}", FIRST) for s in (1, 2)),
    ("gc_w10_l1tm", ("saliency",)),
    ("combined_s0", ("lrp", "deeplift")),
    ("gc_w10_l1tm", ("lrp", "deeplift")),
    ("gc_w100_l1tm", ("saliency", "lrp", "deeplift")),
    *((t, ("input_x_gradient", "integrated_gradients")) for t in ("combined_s0", *PROBES)),
    *((t, ("saliency", "grad_cam")) for t in PRICE),
    *((f"{p}_s{s}", ("saliency", "grad_cam")) for s in PRICE_SEEDS for p in PRICE),
)
SEEDS = (0, 1, 2)
# The recipe search's candidates measured under the full ensemble (config fits, seed 0): their
# jobs and accuracies reused from `--search`.
SEARCH_FULL = ("corner_config", "corner_w4_gcp2_config", "corner_w4_gcp4_g05_config")
COMBINED_PROBE = "gc_w10_l1tm"
# The second term's draws are its own: its seed is the fit's seed plus this.
SECOND_SEED = 1000


@dataclass(frozen=True)
class Model:
    """One measured model: `tag` (its job folder), `group` and `seed` (how the page groups it),
    `source` ("fit": fitted here; "search"/"probe": a checkpoint under that folder; "price": a
    search fit at a larger weight under `--search`, `<group>_s<seed>.ckpt`; "pair": the
    shipped pair's jobs under `--pair`, `pair_tag` its model there; "searchfull": a search
    candidate's jobs and accuracies under `--search`)."""

    tag: str
    group: str
    seed: int
    source: str
    pair_tag: str = ""


def models() -> list[Model]:
    """Every measured model, in the page's order.

    Examples:
        >>> [m.tag for m in models()][:4]
        ['natural', 'shipped_s0', 'shipped_s1', 'shipped_s2']
        >>> [(m.tag, m.seed) for m in models() if m.group == "corner_w10"]
        [('corner_w10', 0), ('corner_w10_s1', 1), ('corner_w10_s2', 2)]
    """
    out = [Model("natural", "natural", 0, "pair", "natural")]
    out.append(Model("shipped_s0", "shipped", 0, "pair", "robust"))
    out += [Model(f"shipped_s{s}", "shipped", s, "search") for s in SEEDS[1:]]
    out += [Model(f"combined_s{s}", "combined", s, "fit") for s in SEEDS]
    out += [Model(p, p, 0, "probe") for p in PROBES]
    out += [Model(c, "search", 0, "searchfull") for c in SEARCH_FULL]
    out += [Model(p, p, 0, "price") for p in PRICE]
    out += [Model(f"{p}_s{s}", p, s, "price") for p in PRICE for s in PRICE_SEEDS]
    return out


def plan(all_models: list[Model]) -> list[tuple[str, str, str, int]]:
    """The jobs in order, ("fit"|"full", tag, map, chunk): the cost unit's fits, every model's
    fit file (a checkpoint not fitted here: its accuracies), then the maps in the order of
    `PRIORITY`, then every map left. The reused models' jobs (the shipped pair's, the search's)
    are not run; a probe's Grad-CAM is its own measurement's.

    Examples:
        >>> jobs = plan(models())
        >>> jobs[:2]
        [('fit', 'natural_unit', '', 0), ('fit', 'shipped_unit', '', 0)]
        >>> ('full', 'combined_s0', 'grad_cam', 0) in jobs, ('full', 'natural', 'lrp', 0) in jobs
        (True, False)
        >>> jobs.index(('full', 'shipped_s2', 'saliency', 1)) < jobs.index(
        ...     ('full', 'gc_w10_l1tm', 'lrp', 0))
        True
    """
    jobs = [("fit", "natural_unit", "", 0), ("fit", "shipped_unit", "", 0)]
    order = {"fit": 0, "search": 1, "probe": 2, "price": 3}  # the combined candidate first
    measured = sorted((m for m in all_models if m.source in order), key=lambda m: order[m.source])
    jobs += [("fit", m.tag, "", 0) for m in measured]
    jobs += [("fit", m.tag, "", 0) for m in all_models if m.source not in order]
    tags = {m.tag for m in measured}
    chunks = range(-(-IMAGES // CHUNK))
    wanted = [(t, e) for t, maps in PRIORITY for e in maps if t in tags]
    wanted += [(m.tag, e) for e in LATER for m in measured]
    for tag, explainer in dict.fromkeys(wanted):
        if not (tag in PROBES and explainer == "grad_cam"):
            jobs += [("full", tag, explainer, c) for c in chunks]
    return jobs


def shipped_options() -> tuple[dict[str, Any], dict[str, Any]]:
    """The shipped config's penalty options and its fit's (lr, epochs)."""
    import yaml

    from robust_train.core.resources import shipped_config

    config = yaml.safe_load(shipped_config("mnist5k_finetune_every_map").read_text())
    (penalty,) = config["model"]["penalties"]
    fit = {"lr": config["model"]["optimizer"]["init_args"]["lr"],
           "epochs": config["trainer"]["max_epochs"]}  # fmt: skip
    return dict(penalty["init_args"]), fit


def terms(tag: str, seed: int) -> list[Any]:
    """The penalty terms of a fitted model: `natural_unit` none, `shipped_unit` the shipped
    penalty, `combined_s*` the shipped penalty and the Grad-CAM-only probe term.

    Examples:
        >>> [t.name for t in terms("combined_s1", 1)], terms("natural_unit", 0)
        (['multi_map', 'grad_cam_topk'], [])
    """
    from experiments.recipe_gradcam_probe import FIT_KEYS, probe_options
    from robust_train.regularizers import MultiMapSmoothness

    if tag == "natural_unit":
        return []
    shipped, _ = shipped_options()
    out = [MultiMapSmoothness(**{**shipped, "seed": seed})]
    if tag.startswith("combined"):
        second = {k: v for k, v in probe_options(COMBINED_PROBE).items() if k not in FIT_KEYS}
        second.update(seed=seed + SECOND_SEED, name="grad_cam_topk")
        out.append(MultiMapSmoothness(**second))
    return out


def checkpoint(model: Model, runs: Path, search: Path, probe: Path) -> Path | str:
    """Where model `model`'s checkpoint is (the shipped pair's: the shipped file's name)."""
    from experiments.ensemble_maps import MODELS

    if model.source == "pair":
        return MODELS[model.pair_tag]
    if model.source == "search":
        return search / f"corner_gcp2_r04_s{model.seed}.ckpt"
    if model.source == "probe":
        return probe / f"{model.tag}_s0.ckpt"
    if model.source == "price":
        return search / f"{model.group}_s{model.seed}.ckpt"
    return runs / "fits" / f"{model.tag}.ckpt"


def fit_job(tag: str, runs: Path, search: Path, probe: Path) -> Path:
    """Fit `tag` unless done (the cost unit's fits and the combined seeds), or load its
    checkpoint (a price model's fitted first by the search's `fit` when missing); its
    accuracies (and a fit's CPU seconds per epoch) in `fits/<tag>.json`."""
    from experiments import explainer_recipes as er
    from experiments.every_map import tune
    from robust_train.models import load_classifier

    path = runs / "fits" / f"{tag}.json"
    if path.exists():
        return path
    row: dict[str, Any] = {"tag": tag}
    found = {m.tag: m for m in models()}
    if tag in found and found[tag].source == "searchfull":
        stored = json.loads((search / f"{tag}_s0.json").read_text())
        row.update({k: stored[k] for k in ("test_acc", "val_acc")}, checkpoint=stored["changes"])
        return write_row(path, row)
    if tag in found and found[tag].source != "fit":
        ckpt = checkpoint(found[tag], runs, search, probe)
        if found[tag].source == "price" and isinstance(ckpt, Path) and not ckpt.is_file():
            from experiments.recipe_search import fit as search_fit

            ckpt.parent.mkdir(parents=True, exist_ok=True)
            _, cpu = search_fit(found[tag].group, found[tag].seed, ckpt)
            # this machine's fit time, not the cost unit's: kept apart from `epoch_cpu_s`
            row["search_fit_cpu_s"] = cpu.get("fit_cpu_s")
        if isinstance(ckpt, Path) and not ckpt.is_file():
            raise FileNotFoundError(f"model {tag!r}: no checkpoint at {str(ckpt)!r}")
        model = load_classifier(ckpt)
        row["checkpoint"] = str(ckpt)
    else:
        seed = int(tag.rsplit("_s", 1)[1]) if tag.startswith("combined_s") else 0
        _, fit = shipped_options()
        ckpt = runs / "fits" / f"{tag}.ckpt"
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        model, epochs, seconds = tune(terms(tag, seed), fit["epochs"], None, seed, ckpt,
                                      lr=fit["lr"])  # fmt: skip
        row.update(checkpoint=str(ckpt), seed=seed, fit_cpu_s=seconds, epoch_cpu_s=epochs)
    row.update(test_acc=er.accuracy(model, *er.split("test")),
               val_acc=er.accuracy(model, *er.split("val")))  # fmt: skip
    return write_row(path, row)


def run(runs: Path, search: Path, probe: Path, only: list[str] | None = None) -> None:
    """Every job of `plan` not done yet, in order (`only`: those models' jobs)."""
    from experiments import ensemble_maps as em

    found = {m.tag: m for m in models()}
    for step, tag, explainer, c in plan(models()):
        if only is not None and tag not in only:
            continue
        if step == "fit":
            path = fit_job(tag, runs, search, probe)
        else:
            ckpt = checkpoint(found[tag], runs, search, probe)
            path = em.run_job("robust", explainer, c, CHUNK, runs / "full" / tag, IMAGES,
                              str(ckpt))  # fmt: skip
        print(f"{step} {tag} {explainer} {c}: {path}", flush=True)
