"""More levers of the every-map recipe, every map measured under the attack ensemble (MNIST-5k).

The front of experiments/RECIPE_SEARCH.md leaves every pixel-level map (input x gradient, LRP,
DeepLIFT, integrated gradients) about at the level of "map = input" under the ensemble, whatever
the penalty's weight, where `recipe_factor` finds that a model whose gradient factor did not move
would keep more. This study fine-tunes the shipped recipe
(`configs/mnist5k_finetune_every_map.yaml`) with one change each (`LEVERS`) aimed at that gap,
from the shipped natural model by the search's loop (`every_map.tune`), and measures every map
under the full `ensemble` protocol on the 20 test images of experiments/ENSEMBLE_MAPS.md
(`ensemble_maps.run_job`, two chunks of 10), beside the front's shipped models (seed 0 the
shipped file, seeds 1 and 2 fits of the same loop). A fit's CPU seconds depend on what runs
beside it, so they are stored, not compared; the cost is measured apart (`cost`): two epochs
of each lever's fine-tune and of the natural fine-tune (no penalty), one after the other in one
process on one thread, the recipe's cost then (6 natural epochs + the lever's epochs in natural
fine-tune epochs) / 6, as the front counts it.

- `factor_alone`: input x gradient's map at x' held to the moved input times the clean gradient
  (`gradient_factor`), not to the clean map: the distance then measures what the model can keep;
- `factor_added`: the shipped penalty unchanged plus a second term on input x gradient alone
  with `gradient_factor` (weight 3, its own draws);
- `starts8`: the ascent starts from the worst of 8 random vertices (`n_starts`), the kind of
  point the ensemble's random search finds;
- `l1tm_w4`: the top-k attack's objective added to the L1 distance (`l1_topk_mass`), weight 4;
- `e6`: the shipped recipe fine-tuned for 6 epochs instead of 2 (the cosine decay over all 6): a
  price, not a candidate (about 3x the fine-tune), to see whether the maps move with more
  training where they do not with more weight;
- `e3_bf01`, `e4_bf005`, `e3_bf005`, `e3_n2_bf01`: the longer fine-tune with the penalty on a
  smaller share of the batches, to bring its cost back (3 epochs on a tenth of each batch, 4 on
  a twentieth, 3 on a twentieth, 3 on a tenth of every second batch).

Jobs, each one file under --runs, skipped when there (an interrupted run resumes where it
stopped): `fits/<tag>.json` (accuracies, the fit's CPU seconds) beside `fits/<tag>.ckpt`, and
one ensemble_maps job per (map, chunk) under `full/<tag>/`, tags `<lever>_s<seed>`; `cost.json`.

    nohup nice -n 10 python -m experiments run recipe_levers run --runs runs/recipe_levers &
    python -m experiments run recipe_levers cost --runs runs/recipe_levers
    python -m experiments run recipe_levers collect --runs runs/recipe_levers
    python -m experiments page recipe_search       # its table on RECIPE_SEARCH.md
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from experiments.support import finite_mean as _mean

RESULTS = Path(__file__).resolve().parent / "results" / "recipe_levers.json"
IMAGES, CHUNK = 20, 10
# The cheapest maps first: a lever's input x gradient is known within a minute of its fit.
ORDER = ("input_x_gradient", "saliency", "deeplift", "lrp", "grad_cam", "integrated_gradients")
# A second term's draws are its own: its seed is the fit's seed plus this times its position.
SECOND_SEED = 1000
FACTOR_TERM = {"explainers": ["input_x_gradient"], "map_weights": None, "map_powers": None,
               "gradient_factor": True, "weight": 3.0, "name": "factor"}  # fmt: skip
# name -> (what it changes, one dict of changes to the shipped penalty's options per term)
LEVERS: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "shipped": ("the shipped recipe (the cost's reference)", [{}]),
    "factor_alone": ("gradient_factor: input x gradient held to x' * g(x)",
                     [{"gradient_factor": True}]),
    "factor_added": ("the shipped penalty + input x gradient alone with gradient_factor, "
                     "weight 3", [{}, FACTOR_TERM]),
    "starts8": ("n_starts 8: the ascent from the worst of 8 vertices", [{"n_starts": 8}]),
    "l1tm_w4": ("distance l1_topk_mass, weight 4",
                [{"distance": "l1_topk_mass", "weight": 4.0}]),
    "e6": ("6 epochs instead of 2 (a price: about 3x the fine-tune)", [{}]),
    "e3_bf01": ("3 epochs, the penalty on a tenth of each batch",
                [{"batch_fraction": 0.1}]),
    "e4_bf005": ("4 epochs, the penalty on a twentieth of each batch",
                 [{"batch_fraction": 0.05}]),
    "e3_bf005": ("3 epochs, the penalty on a twentieth of each batch",
                 [{"batch_fraction": 0.05}]),
    "e3_n2_bf01": ("3 epochs, the penalty on a tenth of every second batch",
                   [{"batch_fraction": 0.1, "every_n_steps": 2}]),
}  # fmt: skip
# Levers that change the fit itself: its number of epochs (the cosine decay spans them all).
EPOCHS = {"e6": 6, "e3_bf01": 3, "e4_bf005": 4, "e3_bf005": 3, "e3_n2_bf01": 3}
COST_EPOCHS = 2  # the epochs of each fit timed by `cost_job`, their mean the epoch's CPU time
FRONT_SHIPPED = ("shipped_s0", "shipped_s1", "shipped_s2")  # the front's rows shown beside


def terms(lever: str, seed: int) -> list[Any]:
    """The penalty terms of `lever` at `seed`: the shipped config's penalty with each term's
    changes (a second term seeded apart).

    Raises:
        ValueError: `lever` is not one of LEVERS.

    Examples:
        >>> [(t.name, t.weight) for t in terms("factor_added", 0)]
        [('multi_map', 3.0), ('factor', 3.0)]
    """
    from experiments.recipe_front import shipped_options
    from robust_train.regularizers import MultiMapSmoothness

    if lever not in LEVERS:
        raise ValueError(f"`lever` must be one of {sorted(LEVERS)}, got {lever!r}")
    shipped, _ = shipped_options()
    return [MultiMapSmoothness(**{**shipped, **changes, "seed": seed + SECOND_SEED * i})
            for i, changes in enumerate(LEVERS[lever][1])]  # fmt: skip


def fit_job(lever: str, seed: int, runs: Path) -> Path:
    """Fit `lever` at `seed` unless its fit file is there; return the fit file."""
    from experiments import explainer_recipes as er
    from experiments.every_map import tune
    from experiments.recipe_front import shipped_options
    from experiments.recipe_gradcam_probe import write_row

    tag = f"{lever}_s{seed}"
    path = runs / "fits" / f"{tag}.json"
    if path.exists():
        return path
    ckpt = path.with_suffix(".ckpt")
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    _, fit = shipped_options()
    n_epochs = EPOCHS.get(lever, fit["epochs"])
    model, epochs, seconds = tune(terms(lever, seed), n_epochs, None, seed, ckpt,
                                  lr=fit["lr"])  # fmt: skip
    row = {"tag": tag, "lever": lever, "seed": seed, "epochs": n_epochs, "checkpoint": str(ckpt),
           "fit_cpu_s": seconds, "epoch_cpu_s": epochs,
           "test_acc": er.accuracy(model, *er.split("test")),
           "val_acc": er.accuracy(model, *er.split("val"))}  # fmt: skip
    return write_row(path, row)


def run(runs: Path, levers: list[str], seeds: list[int], maps: tuple[str, ...] = ORDER) -> None:
    """Every lever's fit, then its maps in `maps`' order, at each seed; finished jobs skipped."""
    from experiments import ensemble_maps as em

    for seed in seeds:
        for lever in levers:
            tag = f"{lever}_s{seed}"
            print(f"fit {tag}: {fit_job(lever, seed, runs)}", flush=True)
            ckpt = runs / "fits" / f"{tag}.ckpt"
            for explainer in maps:
                for c in range(IMAGES // CHUNK):
                    path = em.run_job("robust", explainer, c, CHUNK, runs / "full" / tag,
                                      IMAGES, str(ckpt))  # fmt: skip
                    print(f"{tag} {explainer} {c}: {path}", flush=True)


def cost_job(runs: Path, levers: list[str], seed: int = 0) -> Path:
    """`COST_EPOCHS` epochs of the natural fine-tune and of each lever's, side by side (one
    process, one thread), unless `cost.json` is there; return it. Per fit its mean epoch's CPU
    seconds, and per
    lever the recipe's cost against natural training, (6 + epochs * its epoch / the natural
    fine-tune's epoch) / 6."""
    import torch

    from experiments.every_map import tune
    from experiments.recipe_front import shipped_options
    from experiments.recipe_front_report import NATURAL_EPOCHS
    from experiments.recipe_gradcam_probe import write_row

    path = runs / "cost.json"
    if path.exists():
        return path
    _, fit = shipped_options()
    epoch, threads = {}, torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for lever in ["natural", *levers]:
            chosen = [] if lever == "natural" else terms(lever, seed)
            seconds = tune(chosen, COST_EPOCHS, None, seed, None, lr=fit["lr"])[1]
            epoch[lever] = sum(seconds) / len(seconds)
    finally:
        torch.set_num_threads(threads)
    ratio = {lever: (NATURAL_EPOCHS + EPOCHS.get(lever, fit["epochs"]) * epoch[lever]
                     / epoch["natural"]) / NATURAL_EPOCHS for lever in levers}  # fmt: skip
    runs.mkdir(parents=True, exist_ok=True)
    return write_row(path, {"epoch_cpu_s": epoch, "cost": ratio, "threads": 1})


def _cell(maps: dict[str, Any], name: str) -> str:
    return f"{_mean(maps[name]['values']):.3f}" if name in maps else "-"


def table(
    found: dict[str, dict[str, Any]], front: dict[str, Any], cost: dict[str, float] | None = None
) -> dict[str, Any]:
    """Per model: the lever, test accuracy, the recipe's cost against natural training (`cost`,
    per lever; "-": not measured), each map's mean top-100 under the ensemble ("-":
    not every image measured), "map = input" and the random map's range; the front's shipped
    rows first, as stored."""
    from experiments.ensemble_maps import LABELS
    from experiments.recipe_front import MAPS

    rows = []
    cost = cost or {}
    every = [(t, "shipped (the front's)", front[t]["fit"], front[t]["maps"], "shipped")
             for t in FRONT_SHIPPED if t in front]  # fmt: skip
    every += [(t, LEVERS[f["fit"]["lever"]][0], f["fit"], f["maps"], f["fit"]["lever"])
              for t, f in found.items()]  # fmt: skip
    for tag, about, fit, maps, lever in every:
        randoms = [_mean(maps[n]["random"]) for n in MAPS if n in maps and maps[n].get("random")]
        rows.append([tag, about, f"{fit['test_acc']:.3f}",
                     f"{cost[lever]:.2f}x" if lever in cost else "-",
                     *(_cell(maps, n) for n in MAPS), _cell(maps, "input"),
                     f"{min(randoms):.3f}-{max(randoms):.3f}" if randoms else "-"])  # fmt: skip
    columns = ["model", "lever", "test acc", "recipe vs natural (CPU)",
               *(LABELS[n] for n in MAPS), "map = input (saliency's run)",
               "random map (over the maps)"]  # fmt: skip
    return {"columns": columns, "align": "|---" * len(columns) + "|", "rows": rows}


def collect(runs: Path, results: Path = RESULTS) -> dict[str, Any]:
    """The results file from the finished fits and jobs under `runs` (in the order of `LEVERS`,
    then seeds); returns it.

    Raises:
        FileNotFoundError: `runs` holds no finished fit.
    """
    from experiments.recipe_front import RESULTS as FRONT
    from experiments.recipe_front_report import model_maps

    fits = sorted((runs / "fits").glob("*.json")) if (runs / "fits").is_dir() else []
    if not fits:
        raise FileNotFoundError(f"`--runs` {str(runs)!r} holds no finished fit")
    order = list(LEVERS)
    rows = sorted((json.loads(f.read_text()) for f in fits),
                  key=lambda fit: (order.index(fit["lever"]), fit["seed"]))  # fmt: skip
    found = {fit["tag"]: {"fit": fit, "maps": model_maps(runs / "full" / fit["tag"], "robust")}
             for fit in rows}  # fmt: skip
    front = json.loads(FRONT.read_text())["models"] if FRONT.is_file() else {}
    cost = json.loads((runs / "cost.json").read_text()) if (runs / "cost.json").is_file() else {}
    data = {
        "about": "python -m experiments run recipe_levers: the shipped every-map recipe with one "
        "change each, every map under the attack ensemble on the 20 test images of "
        "ENSEMBLE_MAPS.md",
        "levers": {name: {"about": about, "terms": changes}
                   for name, (about, changes) in LEVERS.items()},
        "models": found,
        "cost": cost,
        "tables": {"levers": table(found, front, cost.get("cost"))},
    }  # fmt: skip
    results.write_text(json.dumps(data, indent=1) + "\n")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments run recipe_levers")
    parser.add_argument("step", choices=("run", "cost", "collect"))
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--levers", nargs="*", default=[n for n in LEVERS if n != "shipped"])
    parser.add_argument("--seeds", nargs="*", type=int, default=[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.levers) - set(LEVERS))
    if unknown:
        parser.error(f"`--levers` must be some of {sorted(LEVERS)}, got {unknown}")
    if any(s < 0 for s in args.seeds):
        parser.error(f"`--seeds` must be >= 0, got {args.seeds}")
    if args.step == "collect":
        if not args.runs.is_dir():
            parser.error(f"`--runs` must be an existing folder, got {str(args.runs)!r}")
        start = time.process_time()
        data = collect(args.runs, args.results)
        if args.results == RESULTS:
            from experiments.recipe_gradcam_probe import store_tables

            store_tables(data["tables"])
        print(f"wrote {args.results} ({len(data['models'])} models, "
              f"{time.process_time() - start:.0f} CPU s)")  # fmt: skip
        return 0
    if args.step == "cost":
        print(f"wrote {cost_job(args.runs, list(dict.fromkeys(['shipped', *args.levers])))}")
        return 0
    run(args.runs, args.levers, args.seeds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
