"""Baselines under the attack ensemble: natural, PGD adversarial training, Gaussian-noise training
and the shipped pair, on the same test images (BASELINES.md).

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.baselines --out runs/baselines \
        --leaderboard runs/baselines/lb [--images 50] [--workers 2]

1. Selection: the leaderboard's rule (`experiments.leaderboard_methods.choose`: 2-fold CV on the
   4,000 train+val images, the most robust setting on saliency whose CV accuracy is at most 1
   point below natural's) for `adversarial` (epsilon) and `gaussian_noise` (sigma), read from a
   leaderboard run folder made with
   `python -m experiments.leaderboard --methods natural adversarial gaussian_noise --select-only`.
2. Fits: each method's chosen setting trained on the pool with seeds 0, 1, 2 (the leaderboard's
   `train`: same model, optimiser, epochs), checkpoints in the leaderboard run folder.
3. Images: the first `--images` test images that EVERY model (every method and seed, and the
   shipped `mnist5k_baseline` and `mnist5k_robust`) classifies correctly: one image set for
   every row.
4. Measures: the "ensemble" protocol (`robust_train.evaluation.PROTOCOLS["ensemble"]`: L_inf 0.3,
   top-k attack at k 100 and 200, softplus betas 1, 3, 10, 30, 3 restarts of 40 steps, then a
   1,000-query random search, the worst kept per image), and random-sign noise at the budget,
   aimed in turn at saliency and Grad-CAM; "map = input" under the same ensemble once (its
   number does not depend on the model but through the label kept).

Every (model, map) pair is one job whose result is a JSON file under OUT/jobs; a restarted run
skips the jobs that have one. `--page` writes experiments/results/baselines.json (the tables)
from OUT and then experiments/BASELINES.md from its prose.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

METHODS = ("natural", "adversarial", "gaussian_noise")
SHIPPED = {"shipped natural": "mnist5k_baseline", "shipped robust": "mnist5k_robust"}
SEEDS = (0, 1, 2)
MAPS = ("saliency", "grad_cam")
MEASURES = ("topk_intersection", "lens_topk", "spearman")
PAGE = "BASELINES.md"


def chosen_values(lb_dir: Path) -> dict[str, float | None]:
    """The leaderboard's choice per method from its run folder's results.json."""
    results = json.loads((lb_dir / "results.json").read_text())
    chosen = results["chosen"]
    missing = [m for m in METHODS[1:] if chosen.get(m) is None]
    if missing:
        raise SystemExit(f"--leaderboard {lb_dir}: no chosen setting for {missing}")
    return {m: (None if m == "natural" else float(chosen[m])) for m in METHODS}


def _fit(row: str, lb_dir: Path, chosen: dict[str, float | None]) -> str:
    """The checkpoint of a row: a method's fit (trained into the leaderboard folder when
    missing, the leaderboard's `train`) or a shipped checkpoint's name."""
    if row in SHIPPED:
        return SHIPPED[row]
    from experiments.leaderboard import ensure_model
    from experiments.leaderboard_methods import Job, Plan

    method, seed = row.split("/s")
    job = Job("fit", f"fit_{method}_s{seed}", method, seed=int(seed), value=chosen[method])
    return ensure_model(None, job, Plan(), lb_dir)


def rows_in_order() -> list[tuple[str, str]]:
    """(row, map) of every job, most important first: seed 0 and the shipped pair on saliency,
    then on Grad-CAM, then the other seeds."""
    first = [*SHIPPED, *(f"{m}/s{SEEDS[0]}" for m in METHODS)]
    later = [f"{m}/s{s}" for s in SEEDS[1:] for m in METHODS]
    return [(r, ex) for group in (first, later) for ex in MAPS for r in group]


def pair_images(n: int) -> list[int]:
    """The first `n` test indices that both shipped models classify correctly (every other
    model is attacked on these too; the page compares the rows on the images all measured)."""
    import torch

    from experiments.leaderboard import test_split
    from robust_train.core.runtime import predict
    from robust_train.models import load_classifier

    x, y = test_split()
    ok = torch.ones(len(y), dtype=torch.bool)
    for name in SHIPPED.values():
        ok &= predict(load_classifier(name), x, 256) == y
    return ok.nonzero().squeeze(1)[:n].tolist()


def run_job(row: str, explainer: str, out: str, lb_dir: str) -> dict[str, Any]:
    """One model's map under the ensemble on the run's images; written to OUT/jobs/<id>.json."""
    import torch

    from experiments.leaderboard import _quiet, test_split
    from robust_train.core.runtime import predict
    from robust_train.evaluation import PROTOCOLS, evaluate_classifier
    from robust_train.models import load_classifier

    meta = json.loads((Path(out) / "meta.json").read_text())
    model = load_classifier(_fit(row, Path(lb_dir), meta["chosen"]))
    _quiet()
    x, y = test_split()
    idx = torch.tensor(meta["indices"])
    reference = row == "natural/s0" and explainer == MAPS[0]
    settings = dataclasses.replace(
        PROTOCOLS["ensemble"], n_samples=len(idx), explainers=(explainer,),
        parts=("fragility",), input_reference=reference, correct_only=True,
    )  # fmt: skip
    cpu = time.process_time()
    r = evaluate_classifier(model, x[idx], y[idx], settings, progress=False)
    result = {
        "row": row, "explainer": explainer, "indices": meta["indices"],
        "n_images": int(r["n_images"]), "cpu_s": time.process_time() - cpu,
        "accuracy": float((predict(model, x, 256) == y).float().mean()),
        "measures": {k: float(v) for k, v in r["measures"].items() if isinstance(v, float)},
        "per_image": {k: [None if not math.isfinite(v) else v for v in vals]
                      for k, vals in r["per_image"].items()
                      if k.startswith(("attack/", "fragility/"))},
    }  # fmt: skip
    target = Path(out) / "jobs" / f"{_job_id(row, explainer)}.json"
    target.write_text(json.dumps(result))
    return result


def _job_id(row: str, explainer: str) -> str:
    return f"{row.replace('/', '_').replace(' ', '_')}__{explainer}"


def pending(out: Path) -> list[tuple[str, str]]:
    """The (row, map) jobs of `rows_in_order` without a result in OUT/jobs (a restarted run
    skips the others)."""
    return [
        (row, ex) for row, ex in rows_in_order()
        if not (out / "jobs" / f"{_job_id(row, ex)}.json").is_file()
    ]  # fmt: skip


def run(args: argparse.Namespace) -> None:
    out, lb_dir = Path(args.out), Path(args.leaderboard)
    (out / "jobs").mkdir(parents=True, exist_ok=True)
    meta_path = out / "meta.json"
    if not meta_path.is_file():  # fixed once: a resumed run measures the same images
        meta = {"chosen": chosen_values(lb_dir), "indices": pair_images(args.images)}
        meta_path.write_text(json.dumps(meta, indent=1))
    todo = pending(out)
    print(f"{len(todo)} jobs to run", flush=True)
    with ProcessPoolExecutor(args.workers) as pool:
        futures = [pool.submit(run_job, r, e, str(out), str(lb_dir)) for r, e in todo]
        for f in futures:
            res = f.result()
            print(f"{res['row']} {res['explainer']}: {res['cpu_s']:.0f} CPU s", flush=True)


# --------------------------------------------------------------------------------- report
def _cell(values: list[float]) -> str:
    """Mean ± standard deviation of the finite values; "(n of N)" when some of the N models
    were not measured, "(1 model)" for a single one, "not run" for none."""
    expected = len(values)
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return "not run"
    if len(values) == 1:
        return (
            f"{values[0]:.3f} (1 model)" if expected == 1 else f"{values[0]:.3f} (1 of {expected})"
        )
    text = f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"
    return text if len(values) == expected else f"{text} ({len(values)} of {expected})"


def _jobs(out: Path) -> dict[str, dict[str, Any]]:
    jobs: dict[str, dict[str, Any]] = {}
    for f in sorted((out / "jobs").glob("*.json")):
        r = json.loads(f.read_text())
        jobs[_job_id(r["row"], r["explainer"])] = r
    return jobs


COLUMNS = (
    ("topk", "topk_intersection", "top-k ∩ ensemble"),
    ("topk", "lens_topk", "LENS ensemble"),
    ("random_sign", "topk_intersection", "top-k ∩ noise"),
)


def common(jobs: list[dict[str, Any]], keys: list[str]) -> list[int]:
    """Positions of the run's images where every job has a value for every key."""
    n = len(jobs[0]["indices"]) if jobs else 0
    return [
        i for i in range(n)
        if all(j["per_image"].get(k, [None] * n)[i] is not None for j in jobs for k in keys)
    ]  # fmt: skip


def _mean_on(job: dict[str, Any] | None, key: str, where: list[int]) -> float:
    if job is None or not where:
        return math.nan
    values = job["per_image"].get(key)
    return math.nan if values is None else statistics.mean(values[i] for i in where)


def tables(out: Path) -> dict[str, Any]:
    """The page's tables from the run folder OUT (meta.json and jobs/): every mean of a map's
    columns over the images every model measured on that map."""
    meta, jobs = json.loads((out / "meta.json").read_text()), _jobs(out)
    groups = {m: [f"{m}/s{s}" for s in SEEDS] for m in METHODS}
    groups.update({name: [name] for name in SHIPPED})
    keys = {ex: [f"attack/{ex}/{a}/{m}" for a, m, _ in COLUMNS] for ex in MAPS}
    where = {
        ex: common([j for j in jobs.values() if j["explainer"] == ex], keys[ex]) for ex in MAPS
    }
    columns = ["row", "setting", "test acc"]
    columns += [f"{ex} {label}" for ex in MAPS for _, _, label in COLUMNS]
    rows = []
    for name, members in groups.items():
        value = meta["chosen"].get(name)
        acc = [next((j["accuracy"] for j in jobs.values() if j["row"] == m), math.nan)
               for m in members]  # fmt: skip
        row = [name, "-" if value is None else _setting(name, value), _cell(acc)]
        for ex in MAPS:
            row += [_cell([_mean_on(jobs.get(_job_id(m, ex)), k, where[ex]) for m in members])
                    for k in keys[ex]]  # fmt: skip
        rows.append(row)
    ref = jobs.get(_job_id("natural/s0", MAPS[0]))
    ref_keys = [f"attack/input_reference/{a}/{m}" for a, m, _ in COLUMNS]
    ref_cells = [_cell([_mean_on(ref, k, where[MAPS[0]])]) for k in ref_keys]
    rows.append(["map = input (reference)", "-", "", *ref_cells, *ref_cells])
    rows.append(_random_row(jobs, where))
    counts = [str(len(where[ex])) for ex in MAPS for _ in COLUMNS]
    rows.append(["images (every row)", "", "all 1,000", *counts])
    main = {"columns": columns, "align": "|" + "---|" * len(columns), "rows": rows}
    return {"main": main, "above": _above_table(jobs, groups, where), "cost": _cost_table(jobs)}


RANDOM = {"topk_intersection": "random_topk", "lens_topk": "random_lens"}


def _random_row(jobs: dict[str, dict[str, Any]], where: dict[str, list[int]]) -> list[str]:
    """Mean ± sd over the models measured on each map of the top-k ∩ (LENS) of its clean maps
    with uniformly random maps (`fragility/<map>/random_topk`, `random_lens`): the chance level
    of the ensemble columns; "-" beside the noise columns."""
    cells = ["random map (every model)", "-", ""]
    for ex in MAPS:
        mine = [j for j in jobs.values() if j["explainer"] == ex]
        for attack, measure, _ in COLUMNS:
            if attack != "topk":
                cells.append("-")
                continue
            key = f"fragility/{ex}/{RANDOM[measure]}"
            values = [_mean_on(j, key, where[ex]) for j in mine if key in j["per_image"]]
            cells.append(_cell(values) if len(values) == len(mine) else "not run")
    return cells


def _above_table(
    jobs: dict[str, dict[str, Any]], groups: dict[str, list[str]], where: dict[str, list[int]]
) -> dict[str, Any]:
    """Per row and map: the share of (model, image) pairs where the model's map keeps more of
    its top-k under the ensemble than "map = input" does (the reference job's, natural seed 0)."""
    ref = jobs.get(_job_id("natural/s0", MAPS[0]))
    levels = None if ref is None else ref["per_image"].get(REFERENCE)
    rows = []
    for name, members in groups.items():
        row = [name]
        for ex in MAPS:
            above = total = 0
            for m in members:
                job = jobs.get(_job_id(m, ex))
                if job is None or levels is None:
                    continue
                values = job["per_image"][f"attack/{ex}/topk/topk_intersection"]
                pairs = [(values[i], levels[i]) for i in where[ex] if levels[i] is not None]
                above += sum(v > r for v, r in pairs)
                total += len(pairs)
            row.append(f"{above / total:.2f} ({above}/{total})" if total else "not run")
        rows.append(row)
    return {"columns": ["row", *MAPS], "align": "|" + "---|" * (1 + len(MAPS)), "rows": rows}


REFERENCE = "attack/input_reference/topk/topk_intersection"


def add_chance(out: Path, lb_dir: Path) -> list[str]:
    """Add the random-map chance levels to every job of OUT that lacks them (a run that kept
    only the attack keys), measured without the attack
    (`experiments.leaderboard_ensemble.random_map_levels`); the jobs changed."""
    from experiments.leaderboard_ensemble import random_map_levels

    meta, changed = json.loads((out / "meta.json").read_text()), []
    for path in sorted((out / "jobs").glob("*.json")):
        job = json.loads(path.read_text())
        if f"fragility/{job['explainer']}/random_topk" in job["per_image"]:
            continue
        checkpoint = _fit(job["row"], lb_dir, meta["chosen"])
        job["per_image"].update(random_map_levels(checkpoint, job["explainer"], job["indices"]))
        job["chance"] = "random-map levels measured apart: the same clean maps, no attack"
        path.write_text(json.dumps(job))
        changed.append(path.stem)
    return changed


def _setting(name: str, value: float) -> str:
    from experiments.leaderboard_methods import METHODS as ALL

    return f"{ALL[name].swept}={value:g}"


def _cost_table(jobs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rows = []
    for ex in MAPS:
        cpu = [j["cpu_s"] for j in jobs.values() if j["explainer"] == ex]
        n = [j["n_images"] for j in jobs.values() if j["explainer"] == ex]
        if cpu:
            rows.append([ex, str(len(cpu)), f"{sum(cpu) / max(1, sum(n)):.1f}"])
    return {"columns": ["map", "models", "CPU s per image"], "align": "|---|---|---|", "rows": rows}


def selection_table(lb_dir: Path) -> dict[str, Any]:
    """The CV selection of the leaderboard run folder: every setting of the baselines with its
    CV accuracy, the difference to natural (paired standard error) and CV saliency robustness."""
    results = json.loads((lb_dir / "results.json").read_text())
    natural = results["natural_cv"]
    rows = [["natural", "-", f"{natural['accuracy']:.4f}", "", f"{natural['saliency']:.3f}", ""]]
    for method in METHODS[1:]:
        chosen = results["chosen"][method]
        for value, summary in sorted(
            results["summaries"][method].items(), key=lambda kv: float(kv[0])
        ):
            delta = f"{100 * summary['delta']:+.2f} ± {100 * summary['se']:.2f}"
            mark = "**yes**" if float(value) == chosen else ""
            rows.append([method, _setting(method, float(value)), f"{summary['accuracy']:.4f}",
                         delta, f"{summary['saliency']:.3f}", mark])  # fmt: skip
    columns = ["method", "setting", "CV acc", "Δ vs natural (points)", "CV sal ∩", "chosen"]
    return {"columns": columns, "align": "|---|---|---|---|---|---|", "rows": rows}


def write_page(out: Path, lb_dir: Path) -> Path:
    """experiments/results/baselines.json from the run folders, then BASELINES.md."""
    from experiments.pages import RESULTS, tables_page

    meta = json.loads((out / "meta.json").read_text())
    found = {**tables(out), "selection": selection_table(lb_dir)}
    data = {"chosen": meta["chosen"], "indices": meta["indices"], "tables": found}
    text = json.dumps(data, indent=1, ensure_ascii=False)
    (RESULTS / "baselines.json").write_text(text + "\n")
    return tables_page(PAGE)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", default="runs/baselines")
    parser.add_argument("--leaderboard", default="runs/baselines/lb")
    parser.add_argument("--images", type=int, default=50)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--page", action="store_true", help="only write the page from --out")
    parser.add_argument(
        "--chance", action="store_true",
        help="only add the random-map levels to the jobs under --out that lack them (no attack)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.images < 1:
        raise SystemExit(f"--images must be >= 1, got {args.images}")
    if args.chance:
        if not (Path(args.out) / "meta.json").is_file():
            raise SystemExit(f"--chance: no run under --out {args.out!r} (no meta.json)")
        changed = add_chance(Path(args.out), Path(args.leaderboard))
        print(f"random-map levels added to {len(changed)} jobs: {', '.join(changed)}")
        return
    if args.page:
        print(write_page(Path(args.out), Path(args.leaderboard)))
        return
    run(args)


if __name__ == "__main__":
    main()
