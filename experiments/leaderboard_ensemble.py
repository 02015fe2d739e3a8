"""The leaderboard's test attack under the attack ensemble: every row on the same test images.

Rows: natural, the shipped recipe's leaderboard method (`finetune_every_map`), PGD adversarial
training on the label (`adversarial`) and Gaussian-noise training (`gaussian_noise`), each at
the setting the leaderboard's own rule chose (2-fold CV, `experiments.leaderboard_methods.
choose`; the values are read from the committed results: the leaderboard's fit jobs and
experiments/results/baselines.json), trained on the 4,000-image pool with seeds 0, 1 and 2 by
the leaderboard's `train` (the checkpoints live in the leaderboard run folder `--lb`; missing
ones are trained again).

Images: the first `--images` MNIST-5k test images that EVERY model (every row and seed)
classifies correctly, fixed once in OUT/meta.json, so every row is scored on the same images.

Measure: each map (saliency, Grad-CAM, LRP, DeepLIFT, integrated gradients, in that order of
priority) attacked by the `ensemble` protocol (`robust_train.evaluation.PROTOCOLS["ensemble"]`:
the top-k attack with the attacked set equal to the scored set, k 100, and twice it, the
softplus surrogate at several betas and the exact gradient where the map has one, restarts from
random starts in L_inf 0.3 with the label kept, then a gradient-free random search from the
best point; each image keeps its worst), through the engine (`experiments.ensemble_maps.
settings`). Beside it the chance levels: the top-k overlap of the clean map with a uniformly
random map, and "map = input" attacked by the same ensemble on the same images (once per model,
in its saliency job), with the share of images where the model's map keeps more than it.

Every (row, seed, map) is one job whose result is OUT/jobs/<id>.json; a restarted run skips
the jobs that have one. `--export` writes them to one committed file (gzip when it ends in
.gz), `--restore` puts them back into a run folder (the leaderboard's `export_jobs` and
`restore_jobs`: one JSON object a line, keyed by its "id").

    nohup nice -n 10 env OMP_NUM_THREADS=1 python -m experiments.leaderboard_ensemble \
        --out runs/leaderboard/ens --lb runs/leaderboard/lb --workers 2 &
    python -m experiments.leaderboard_ensemble --out runs/leaderboard/ens \
        --export experiments/results/leaderboard/ensemble_v1.jsonl.gz
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import math
import os
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from experiments.leaderboard_ensemble_report import MAPS, ROWS, SEEDS
from experiments.leaderboard_ensemble_report import RANDOM as RANDOM_KEY
from experiments.leaderboard_ensemble_report import RANDOM_LENS as RANDOM_LENS_KEY
from experiments.leaderboard_ensemble_report import REFERENCE as REFERENCE_KEY

PROTOCOL = "ensemble"
REFERENCE = "input_reference"  # the job kind of "map = input" alone
RESULTS = Path(__file__).resolve().parent / "results" / "leaderboard"
EXPORT = "ensemble_v1.jsonl.gz"
SHIPPED_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "mnist5k_finetune_every_map.yaml"


@dataclasses.dataclass(frozen=True)
class EnsembleJob:
    """One model (row, seed) and one map under the ensemble."""

    method: str
    seed: int
    explainer: str

    @property
    def id(self) -> str:
        return f"ens_{self.method}_s{self.seed}__{self.explainer}"


def chosen_settings() -> dict[str, float | None]:
    """Each row's setting chosen by the leaderboard's CV rule, from the committed results: the
    leaderboard's fit jobs (its page's job file) and baselines.json; the shipped recipe's row
    (`finetune_multi_map`) at the weight of its config (SHIPPED_CONFIG)."""
    import yaml

    chosen: dict[str, float | None] = {"natural": None}
    base = json.loads((RESULTS.parent / "baselines.json").read_text())["chosen"]
    chosen.update({m: float(base[m]) for m in ("adversarial", "gaussian_noise")})
    page = json.loads((RESULTS / "page.json").read_text())
    with gzip.open(RESULTS / page["jobs"], "rt") as f:
        for line in f:
            job = json.loads(line)
            if job["kind"] == "fit" and job["method"] == "finetune_every_map":
                chosen["finetune_every_map"] = float(job["value"])
    shipped = yaml.safe_load(SHIPPED_CONFIG.read_text())["model"]["penalties"][0]["init_args"]
    chosen["finetune_multi_map"] = float(shipped["weight"])  # the shipped weight, not the CV's
    missing = [r for r in ROWS if r not in chosen]
    if missing:
        raise SystemExit(f"no chosen setting for {missing} in {RESULTS}")
    return chosen


def plan(rows: tuple[str, ...] = ROWS, seeds: tuple[int, ...] = SEEDS,
         maps: tuple[str, ...] = MAPS) -> list[EnsembleJob]:  # fmt: skip
    """Every job, most important first: map by map (in `maps`' order), seed 0 of every row
    before the other seeds.

    Examples:
        >>> [j.id for j in plan(("natural", "adversarial"), (0, 1), ("saliency",))]
        ['ens_natural_s0__saliency', 'ens_adversarial_s0__saliency', \
'ens_natural_s1__saliency', 'ens_adversarial_s1__saliency']
    """
    return [EnsembleJob(r, s, m) for m in maps for s in seeds for r in rows]


def model_path(
    method: str, seed: int, value: float | None, lb_dir: Path, quick: bool = False
) -> str:
    """The checkpoint of a row's seed in the leaderboard run folder, trained there (the
    leaderboard's `train`; `quick`: its smoke-run plan) when it is missing."""
    from experiments.leaderboard import ensure_model
    from experiments.leaderboard_methods import Job, Plan, quick_plan

    job = Job("fit", f"fit_{method}_s{seed}", method, seed=seed, value=value)
    return ensure_model(None, job, quick_plan() if quick else Plan(), lb_dir)


def fixed_images(n: int, chosen: dict[str, Any], lb_dir: Path, rows: tuple[str, ...],
                 seeds: tuple[int, ...], quick: bool = False) -> list[int]:  # fmt: skip
    """The first `n` test indices that every model of `rows` x `seeds` classifies correctly."""
    import torch

    from experiments.leaderboard import test_split
    from robust_train.core.runtime import predict
    from robust_train.models import load_classifier

    x, y = test_split()
    ok = torch.ones(len(y), dtype=torch.bool)
    for row in rows:
        for seed in seeds:
            path = model_path(row, seed, chosen[row], lb_dir, quick)
            ok &= predict(load_classifier(path), x, 256) == y
    return ok.nonzero().squeeze(1)[:n].tolist()


def settings(explainer: str, n: int, reference: bool, protocol: str = PROTOCOL) -> Any:
    """The protocol on one map, its top-k attack only (the fragility part with the random-map
    chance level; "map = input" attacked too when `reference`). `explainer` REFERENCE: "map =
    input" alone (a model whose map job was measured without it)."""
    from robust_train.evaluation import PROTOCOLS

    if explainer == REFERENCE:
        return dataclasses.replace(
            PROTOCOLS[protocol], parts=(REFERENCE,), attacks=("topk",), explainers=("saliency",),
            n_samples=n, input_reference=False,
        )  # fmt: skip
    return dataclasses.replace(
        PROTOCOLS[protocol], parts=("fragility",), attacks=("topk",), explainers=(explainer,),
        n_samples=n, input_reference=reference,
    )  # fmt: skip


def run_job(job: EnsembleJob, out: str, lb_dir: str) -> dict[str, Any]:
    """Measure one job on the run's images (OUT/meta.json) and write OUT/jobs/<id>.json; a
    job already stored there (another process finished it) is read, not measured again."""
    import torch

    from experiments.leaderboard import _quiet, test_split
    from robust_train.core.runtime import predict
    from robust_train.evaluation.engine import run_parts, summarize
    from robust_train.models import load_classifier

    target = Path(out) / "jobs" / f"{job.id}.json"
    if target.is_file():
        return dict(json.loads(target.read_text()))
    meta = json.loads((Path(out) / "meta.json").read_text())
    value = meta["chosen"][job.method]
    path = model_path(job.method, job.seed, value, Path(lb_dir), meta.get("quick", False))
    model = load_classifier(path)
    _quiet()
    x, y = test_split()
    idx = torch.tensor(meta["indices"])
    s = settings(job.explainer, len(idx), job.explainer == "saliency", meta["protocol"])
    cpu = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summary = summarize(run_parts(model, x[idx], y[idx], s))
    result = {
        "id": job.id, "kind": "ensemble", "method": job.method, "seed": job.seed,
        "value": value, "explainer": job.explainer, "indices": meta["indices"],
        "protocol": meta["protocol"], "settings": summary.get("settings"),
        "attack_cost": summary.get("attack_cost"), "cpu_s": time.process_time() - cpu,
        "accuracy": float((predict(model, x, 256) == y).float().mean()),
        "per_image": {k: [v if math.isfinite(v) else None for v in vals]
                      for k, vals in summary["per_image"].items()},
    }  # fmt: skip
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(target)
    return result


def random_map_levels(
    checkpoint: str, explainer: str, indices: list[int], protocol: str = PROTOCOL
) -> dict[str, list[Any]]:
    """The random-map chance levels of a model's map on test images `indices`
    (`fragility/<map>/random_topk` and `random_lens` per image, None where unmeasured) as the
    protocol measures them beside its attack, measured without the attack: the protocol with
    the noise attack alone, whose clean maps and seeded random maps are the same (an attack
    never changes them); for job results that kept none."""
    from experiments.leaderboard import _quiet, test_split
    from robust_train.models import load_classifier

    model = load_classifier(checkpoint)
    _quiet()
    x, y = test_split()
    s = settings(explainer, len(indices), False, protocol)
    per_image = noise_only_per_image(model, x, y, indices, s)
    keys = (RANDOM_KEY.format(m=explainer), RANDOM_LENS_KEY.format(m=explainer))
    return {k: [v if math.isfinite(v) else None for v in per_image[k]] for k in keys}


def noise_only_per_image(
    model: Any, x: Any, y: Any, indices: list[int], protocol_settings: Any
) -> dict[str, list[float]]:
    """The per-image results of `protocol_settings` on images `indices` of (x, y) with the
    noise attack alone (one draw): the clean maps and the seeded random maps, and so the
    random-map chance levels, are those of the full protocol (an attack never changes them)."""
    import torch

    from robust_train.evaluation.engine import run_parts, summarize

    idx = torch.tensor(indices)
    s = dataclasses.replace(protocol_settings, attacks=("random_sign",), noise_draws=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return summarize(run_parts(model, x[idx], y[idx], s))["per_image"]


def chance_levels(job: dict[str, Any], lb_dir: str, quick: bool = False) -> dict[str, list[Any]]:
    """`random_map_levels` of a stored map job: its model, map, images and protocol."""
    path = model_path(job["method"], job["seed"], job["value"], Path(lb_dir), quick)
    return random_map_levels(path, job["explainer"], job["indices"], job["protocol"])


def add_chance(out: Path, lb_dir: str, quick: bool = False) -> list[str]:
    """Add the random-map levels (`chance_levels`) to every stored map job of OUT that lacks
    them, marking the job's "chance" member; the ids of the jobs changed."""
    changed = []
    for path in sorted((out / "jobs").glob("*.json")):
        job = json.loads(path.read_text())
        if (
            job["explainer"] not in MAPS
            or RANDOM_KEY.format(m=job["explainer"]) in job["per_image"]
        ):
            continue
        job["per_image"].update(chance_levels(job, lb_dir, quick))
        job["chance"] = "random-map levels measured apart: the same clean maps, no attack"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(job))
        tmp.replace(path)
        changed.append(job["id"])
    return changed


def pending(out: Path, jobs: list[EnsembleJob]) -> list[EnsembleJob]:
    """The jobs without a result in OUT/jobs (a restarted run skips the others), and after the
    saliency jobs the "map = input" job of every model whose stored saliency job lacks it."""
    todo = [j for j in jobs if not (out / "jobs" / f"{j.id}.json").is_file()]
    refs = []
    for j in jobs:
        path = out / "jobs" / f"{j.id}.json"
        ref = EnsembleJob(j.method, j.seed, REFERENCE)
        if j.explainer == "saliency" and path.is_file() and not _has_reference(path, out, ref):
            refs.append(ref)
    first = [j for j in todo if j.explainer == "saliency"]
    return [*first, *refs, *(j for j in todo if j.explainer != "saliency")]


def _has_reference(path: Path, out: Path, ref: EnsembleJob) -> bool:
    return (out / "jobs" / f"{ref.id}.json").is_file() or REFERENCE_KEY in json.loads(
        path.read_text()
    )["per_image"]


def adopt(source: Path, out: Path) -> int:
    """Store as this run's jobs the matching jobs of an `experiments.baselines` run folder
    (`source`: its meta.json and jobs/): the same checkpoints, protocol and images (its image
    indices must equal this run's), the top-k attack's and the chance levels' per-image values
    kept and the job marked with its source; jobs this run has are left alone."""
    meta = json.loads((out / "meta.json").read_text())
    theirs = json.loads((source / "meta.json").read_text())
    if theirs["indices"] != meta["indices"]:
        raise SystemExit(f"--adopt {source}: other images than {out}/meta.json's")
    written = 0
    for path in sorted((source / "jobs").glob("*.json")):
        job = json.loads(path.read_text())
        method, _, seed = job["row"].partition("/s")
        if method not in meta["rows"] or job["explainer"] not in MAPS or not seed.isdigit():
            continue
        target = out / "jobs" / f"{EnsembleJob(method, int(seed), job['explainer']).id}.json"
        if target.is_file() or theirs["chosen"].get(method) != meta["chosen"][method]:
            continue
        keep = (f"attack/{job['explainer']}/topk/", "attack/input_reference/topk/", "fragility/")
        result = {
            "id": target.stem, "kind": "ensemble", "method": method, "seed": int(seed),
            "value": meta["chosen"][method], "explainer": job["explainer"],
            "indices": job["indices"], "protocol": meta["protocol"], "settings": None,
            "attack_cost": None, "cpu_s": job["cpu_s"], "accuracy": job["accuracy"],
            "per_image": {k: v for k, v in job["per_image"].items() if k.startswith(keep)},
            "source": f"experiments.baselines run {source.name}",
        }  # fmt: skip
        target.write_text(json.dumps(result))
        written += 1
    return written


def prepare(args: argparse.Namespace) -> dict[str, Any]:
    """OUT/meta.json, written once (a resumed run keeps its images): the chosen settings, the
    protocol and the fixed image indices (every model is trained first when missing)."""
    out, lb_dir = Path(args.out), Path(args.lb)
    (out / "jobs").mkdir(parents=True, exist_ok=True)
    path = out / "meta.json"
    if path.is_file():
        return add_rows(dict(json.loads(path.read_text())), args)
    chosen = chosen_settings()
    _train(args, chosen, list(args.rows))
    rows, seeds = tuple(args.rows), tuple(args.seeds)
    meta = {
        "chosen": chosen, "protocol": args.protocol, "rows": list(rows), "seeds": list(seeds),
        "quick": args.quick,
        "indices": fixed_images(args.images, chosen, lb_dir, rows, seeds, args.quick),
    }  # fmt: skip
    path.write_text(json.dumps(meta, indent=1))
    return meta


def _train(args: argparse.Namespace, chosen: dict[str, Any], rows: list[str]) -> None:
    """Every missing checkpoint of `rows` x the run's seeds (in parallel with --workers)."""
    calls = [(r, s, chosen[r], Path(args.lb), args.quick) for s in args.seeds for r in rows]
    if args.workers == 1:
        [model_path(*c) for c in calls]
    else:
        with ProcessPoolExecutor(args.workers) as pool:
            list(pool.map(model_path, *zip(*calls, strict=True)))


def add_rows(meta: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """A resumed run that gains rows (`--rows` names some its meta.json lacks): their chosen
    settings are added, their models trained, and they are scored on the run's images; the
    images one of their models misclassifies are recorded under "misclassified" (the page
    names them)."""
    new = [r for r in args.rows if r not in meta["rows"]]
    if not new:
        return meta
    import torch

    from experiments.leaderboard import test_split
    from robust_train.core.runtime import predict
    from robust_train.models import load_classifier

    chosen = chosen_settings()
    _train(args, chosen, new)
    x, y = test_split()
    idx = torch.tensor(meta["indices"])
    wrong = meta.setdefault("misclassified", {})
    for row in new:
        meta["chosen"][row] = chosen[row]
        for seed in meta["seeds"]:
            model = load_classifier(model_path(row, seed, chosen[row], Path(args.lb), args.quick))
            bad = idx[predict(model, x[idx], 256) != y[idx]].tolist()
            if bad:
                wrong[f"{row}/s{seed}"] = bad
    meta["rows"] = [r for r in ROWS if r in {*meta["rows"], *new}]
    (Path(args.out) / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    prepare(args)
    if args.adopt:
        print(f"{adopt(Path(args.adopt), out)} jobs adopted from {args.adopt}", flush=True)
    todo = pending(out, plan(tuple(args.rows), tuple(args.seeds), tuple(args.maps)))
    print(f"{len(todo)} jobs to run", flush=True)
    if args.workers == 1:  # in this process, one job after the other
        results = (run_job(j, str(out), str(args.lb)) for j in todo)
        for r in results:
            print(f"{r['id']}: {r['cpu_s']:.0f} CPU s", flush=True)
        return
    with ProcessPoolExecutor(args.workers) as pool:
        futures = [pool.submit(run_job, j, str(out), str(args.lb)) for j in todo]
        for f in futures:
            r = f.result()
            print(f"{r['id']}: {r['cpu_s']:.0f} CPU s", flush=True)


def restore(path: Path, out: Path) -> int:
    """The leaderboard's `restore_jobs`, then OUT/meta.json rebuilt from the jobs when it is
    missing (every job records the chosen setting of its row, the protocol and the images)."""
    from experiments.leaderboard import restore_jobs

    n = restore_jobs(path, out)
    meta = out / "meta.json"
    jobs = [json.loads(f.read_text()) for f in sorted((out / "jobs").glob("*.json"))]
    if not meta.is_file() and jobs:
        chosen = {j["method"]: j["value"] for j in jobs}
        data = {
            "chosen": {**chosen_settings(), **chosen}, "protocol": jobs[0]["protocol"],
            "rows": [r for r in ROWS if any(j["method"] == r for j in jobs)],
            "seeds": sorted({j["seed"] for j in jobs}), "indices": jobs[0]["indices"],
        }  # fmt: skip
        meta.write_text(json.dumps(data, indent=1))
    return n


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m experiments.leaderboard_ensemble",
        description=(__doc__ or "").split("\n")[0],
    )
    p.add_argument("--out", default="runs/leaderboard_ensemble")
    p.add_argument("--lb", default="runs/leaderboard_ensemble/lb", help="leaderboard run folder")
    p.add_argument("--images", type=int, default=20)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    p.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    p.add_argument("--maps", nargs="+", choices=MAPS, default=list(MAPS))
    p.add_argument("--protocol", default=PROTOCOL, help="a name of PROTOCOLS")
    p.add_argument("--quick", action="store_true", help="smoke run: the leaderboard's tiny fits")
    p.add_argument(
        "--adopt", metavar="DIR",
        help="first store the matching jobs of an experiments.baselines run folder DIR (same "
        "checkpoints, protocol and images) as this run's",
    )  # fmt: skip
    p.add_argument(
        "--chance", action="store_true",
        help="only add the random-map levels to the stored map jobs that lack them (no attack)",
    )  # fmt: skip
    p.add_argument("--export", metavar="JSONL", help="only write OUT's job results to JSONL")
    p.add_argument("--restore", metavar="JSONL", help="first put JSONL's job results into OUT")
    return p


def main(argv: list[str] | None = None) -> int:
    from robust_train.evaluation import PROTOCOLS

    args = parser().parse_args(argv)
    for flag in ("images", "workers"):
        if getattr(args, flag) < 1:
            raise SystemExit(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if args.protocol not in PROTOCOLS:
        raise SystemExit(f"--protocol must be one of {sorted(PROTOCOLS)}, got {args.protocol!r}")
    if args.export:
        from experiments.leaderboard import export_jobs

        print(f"{export_jobs(Path(args.out), Path(args.export))} job results -> {args.export}")
        return 0
    if args.restore:
        if not Path(args.restore).is_file():
            raise SystemExit(f"--restore: no such file {args.restore!r}")
        print(f"{restore(Path(args.restore), Path(args.out))} job results restored")
    if args.chance:
        if not (Path(args.out) / "jobs").is_dir():
            raise SystemExit(f"--chance: no job results under --out {args.out!r}")
        changed = add_chance(Path(args.out), args.lb, args.quick)
        print(f"random-map levels added to {len(changed)} jobs: {', '.join(changed)}")
        return 0
    run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
