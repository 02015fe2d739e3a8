"""Every map of the shipped MNIST-5k pair under the attack ensemble, beside its chance levels.

The driver of experiments/ENSEMBLE_MAPS.md. Both shipped models (`mnist5k_baseline`,
`mnist5k_robust`) on the same test images (the first `--images` of the MNIST-5k test split that
BOTH classify correctly), each map attacked by the `ensemble` protocol
(`robust_train.evaluation.PROTOCOLS["ensemble"]`: the top-k attack with the attacked set equal to
the scored set (k 100) and twice it, the softplus surrogate at betas 1, 3, 10 and 30, the exact
gradient where the map has one, 3 restarts per member of 40 sign steps of 0.015 in L_inf 0.3,
the label kept, then a random search of 1,000 queries from the best point; each image keeps its
worst) through the evaluation engine. Beside each map: the top-100 intersection of its clean map
with a uniformly random map, and "map = input" (`robust_train.explain.input_reference`, which
ignores the model) attacked by the same ensemble on the same images, with the share of images
whose map keeps more than "map = input" does.

`run` measures one job per (model, map), written to `--runs/<model>__<map>.json` and skipped when
that file is there (an interrupted run resumes where it stopped); the "map = input" reference is
attacked in each model's saliency job. `collect` reads the jobs and writes
experiments/results/ensemble_maps.json (its tables; `python -m experiments page ensemble_maps`
writes the page from them).

    nohup nice -n 10 python -m experiments run ensemble_maps run --models natural robust &
    python -m experiments run ensemble_maps collect
    python -m experiments page ensemble_maps
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import platform
import time
import warnings
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).resolve().parent / "results" / "ensemble_maps.json"
MODELS = {"natural": "mnist5k_baseline", "robust": "mnist5k_robust"}
# The maps of the README's tables first, then the cheaper extra ones; IG (10 points per step)
# is the costliest.
MAPS = ("saliency", "grad_cam", "input_x_gradient", "deeplift", "lrp", "integrated_gradients")
LABELS = {"saliency": "saliency", "input_x_gradient": "input x gradient", "grad_cam": "Grad-CAM",
          "lrp": "LRP", "deeplift": "DeepLIFT", "integrated_gradients": "integrated gradients",
          "smoothgrad": "SmoothGrad"}  # fmt: skip
TOPK = "attack/{m}/topk/topk_intersection"
REFERENCE = "attack/input_reference/topk/topk_intersection"
RANDOM = "fragility/{m}/random_topk"
# LENS (the top-k intersection after dilating both sets by a 3 x 3 window) of the same attacks,
# its random-map level and "map = input"'s.
LENS = "attack/{m}/topk/lens_topk"
REFERENCE_LENS = "attack/input_reference/topk/lens_topk"
RANDOM_LENS = "fragility/{m}/random_lens"


@functools.lru_cache(maxsize=2)
def images(n: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """The first `n` MNIST-5k test images that both shipped models classify correctly."""
    from robust_train.core.runtime import predict
    from robust_train.data import MNIST5kDataModule
    from robust_train.models import load_classifier

    data = MNIST5kDataModule()
    data.setup("test")
    x, y = data.test_set.tensors[0], data.test_set.tensors[1]
    correct = torch.ones_like(y, dtype=torch.bool)
    for name in MODELS.values():
        correct &= predict(load_classifier(name), x, 256) == y
    keep = correct.nonzero().squeeze(1)[:n]
    return x[keep], y[keep], keep.tolist()


def settings(explainer: str, n: int, reference: bool) -> Any:
    """The `ensemble` protocol on one map, its top-k attack only (the fragility part, with the
    random-map chance level), with the "map = input" reference when `reference`."""
    from robust_train.evaluation import PROTOCOLS

    return dataclasses.replace(
        PROTOCOLS["ensemble"],
        parts=("fragility",),
        attacks=("topk",),
        explainers=(explainer,),
        n_samples=n,
        input_reference=reference,
    )


def run_job(
    model_tag: str,
    explainer: str,
    chunk: int,
    size: int,
    runs: Path,
    total: int,
    checkpoint: str | None = None,
) -> Path:
    """Measure one (model, map, chunk of `size` images) job unless its file is there; return the
    file. Chunk c holds images c * size to (c + 1) * size - 1 of `images(total)` (chosen by the
    shipped pair); `checkpoint` replaces the model's shipped checkpoint (another fit of it)."""
    from robust_train.evaluation.engine import run_parts, summarize
    from robust_train.models import load_classifier

    path = runs / f"{model_tag}__{explainer}__{chunk:03d}.json"
    if path.exists():
        return path
    x, y, index = images(total)
    part = slice(chunk * size, (chunk + 1) * size)
    x, y, index = x[part], y[part], index[part]
    checkpoint = checkpoint or MODELS[model_tag]
    model = load_classifier(checkpoint)
    start, cpu = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        evaluation = run_parts(
            model, x, y, settings(explainer, len(index), explainer == "saliency")
        )
    out = summarize(evaluation)
    out.pop("_examples", None)
    out.update(model=model_tag, checkpoint=checkpoint, explainer=explainer, index=index,
               chunk=chunk, wall_seconds=time.perf_counter() - start,
               cpu_seconds=time.process_time() - cpu,
               machine=f"{platform.machine()}, {torch.get_num_threads()} torch thread(s)",
               date=time.strftime("%Y-%m-%d"))  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out) + "\n")
    tmp.replace(path)
    return path


def mean_interval(values: list[float]) -> tuple[float, float, float, int]:
    """Mean, 95% Student-t interval and count of the finite values (the engine's reduction).

    Examples:
        >>> [round(v, 3) for v in mean_interval([0.0, 1.0, float("nan")])[:3]]
        [0.5, -5.853, 6.853]
    """
    from robust_train.metrics.keyed import KeyedMean

    metric = KeyedMean({"v": ()})
    metric.update({"v": torch.tensor(values, dtype=torch.float64)})
    low, high = metric.intervals()["v"]
    return float(metric.compute()["v"]), float(low), float(high), int(metric.counts()["v"])


def _cell(values: list[float]) -> str:
    mean, low, high, count = mean_interval(values)
    if count == 0:
        return "-"
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def _share_above(values: list[float], reference: list[float]) -> str:
    pairs = [(v, r) for v, r in zip(values, reference, strict=True) if v == v and r == r]
    if not pairs:
        return "-"
    above = sum(v > r for v, r in pairs)
    return f"{above / len(pairs):.3f} ({above}/{len(pairs)})"


mean_cell, share_above = _cell, _share_above  # what other experiments' tables use


def load_jobs(runs: Path) -> dict[tuple[str, str], dict[int, dict[str, Any]]]:
    """The finished jobs by (model, map), then by chunk."""
    jobs: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for path in sorted(runs.glob("*__*__*.json")):
        job = json.loads(path.read_text())
        jobs.setdefault((job["model"], job["explainer"]), {})[job["chunk"]] = job
    return jobs


def merged(chunks: dict[int, dict[str, Any]], keep: list[int]) -> dict[str, Any]:
    """One job from its chunks `keep`: per-image values and indices concatenated in chunk order,
    CPU seconds summed, the attack cost's members' counts and seconds summed."""
    parts = [chunks[c] for c in sorted(keep)]
    keys = set.intersection(*(set(p["per_image"]) for p in parts))
    cost = json.loads(json.dumps(parts[0]["attack_cost"]))
    for attack, note in cost.items():
        others = [p["attack_cost"][attack] for p in parts[1:]]
        for i, member in enumerate(note["members"]):
            for count in ("worst_on", "best_before_search"):  # the second: newer jobs only
                if count in member:
                    member[count] += sum(o["members"][i].get(count, 0) for o in others)
        for key in ("cpu_seconds", "seconds", "images"):
            note[key] += sum(o[key] for o in others)
        note["cpu_seconds_per_image"] = note["cpu_seconds"] / max(1, note["images"])
    return {
        "per_image": {k: [v for p in parts for v in p["per_image"][k]] for k in keys},
        "index": [i for p in parts for i in p["index"]],
        "cpu_seconds": sum(p["cpu_seconds"] for p in parts),
        "attack_cost": cost,
        "chunks": sorted(keep),
    }


def paired(
    jobs: dict[tuple[str, str], dict[int, dict[str, Any]]],
) -> dict[tuple[str, str], dict[str, Any]]:
    """Each map's jobs merged over the chunks that every model finished: the same images for
    both models."""
    out = {}
    for name in LABELS:
        done = [set(jobs.get((tag, name), {})) for tag in MODELS]
        keep = sorted(set.intersection(*done))
        for tag in MODELS:
            if keep:
                out[(tag, name)] = merged(jobs[(tag, name)], keep)
    return out


def tables(jobs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    """The page's tables from `paired` jobs: each map's level per model beside its chance
    levels (a random map; "map = input" under the same attack on the same images, and the
    share of images where the map keeps more than it), the reference itself, and the cost."""
    refs = {tag: dict(zip(jobs[(tag, "saliency")]["index"],
                          jobs[(tag, "saliency")]["per_image"][REFERENCE], strict=True))
            for tag in MODELS if (tag, "saliency") in jobs}  # fmt: skip
    rows, cost = [], []
    for name in [m for m in LABELS if (next(iter(MODELS)), m) in jobs]:
        cells: dict[str, str] = {}
        for tag in MODELS:
            job = jobs[(tag, name)]
            values = job["per_image"][TOPK.format(m=name)]
            reference = [refs.get(tag, {}).get(i, float("nan")) for i in job["index"]]
            cells[tag] = _cell(values)
            cells[f"{tag}_above"] = _share_above(values, reference)
            cells["random"] = _cell(job["per_image"][RANDOM.format(m=name)])
            cells["input"] = _cell(reference)
            cells["images"] = str(len(values))
            cost.append(_cost_row(tag, name, job))
        rows.append([LABELS[name], cells["images"], cells["natural"], cells["robust"],
                     cells["input"], cells["random"], cells["robust_above"],
                     cells["natural_above"]])  # fmt: skip
    out = {
        "maps": {
            "columns": [
                "map",
                "images",
                "natural",
                "robust",
                "map = input (robust)",
                "random map (robust)",
                "robust above map = input",
                "natural above map = input",
            ],
            "align": "|---|---|---|---|---|---|---|---|",
            "rows": rows,
        },  # fmt: skip
        "cost": {
            "columns": [
                "model",
                "map",
                "members",
                "CPU s per image",
                "gradient steps per image",
                "queries per image",
                "images where each member was the worst",
            ],
            "align": "|---|---|---|---|---|---|---|",
            "rows": cost,
        },  # fmt: skip
    }
    lens = lens_table(jobs)
    if lens is not None:
        out["lens"] = lens
    return out


def lens_table(jobs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any] | None:
    """The maps table's levels scored by LENS instead of the plain top-k intersection, beside
    LENS's own chance levels (a random map's, "map = input"'s under the same attack on the same
    images): None when a job lacks the LENS values (jobs measured before the engine kept them).
    A dilated top-k set of an MNIST digit covers a large share of the image, so a random map's
    LENS is far above its plain top-k level."""
    names = [m for m in LABELS if all((tag, m) in jobs for tag in MODELS)]
    keys = [(tag, m, k.format(m=m)) for tag in MODELS for m in names for k in (LENS, RANDOM_LENS)]
    if not names or any(k not in jobs[(tag, m)]["per_image"] for tag, m, k in keys):
        return None
    ref_jobs = {tag: jobs.get((tag, "saliency")) for tag in MODELS}
    if any(j is None or REFERENCE_LENS not in j["per_image"] for j in ref_jobs.values()):
        return None
    refs = {tag: dict(zip(j["index"], j["per_image"][REFERENCE_LENS], strict=True))
            for tag, j in ref_jobs.items() if j is not None}  # fmt: skip
    rows = []
    for name in names:
        cells: dict[str, str] = {}
        for tag in MODELS:
            job = jobs[(tag, name)]
            values = job["per_image"][LENS.format(m=name)]
            reference = [refs[tag].get(i, float("nan")) for i in job["index"]]
            cells[tag] = _cell(values)
            cells[f"{tag}_above"] = _share_above(values, reference)
            cells["input"] = _cell(reference)
            cells["random"] = _cell(job["per_image"][RANDOM_LENS.format(m=name)])
        rows.append([LABELS[name], str(len(values)), cells["natural"], cells["robust"],
                     cells["input"], cells["random"], cells["robust_above"],
                     cells["natural_above"]])  # fmt: skip
    return {
        "columns": ["map", "images", "natural LENS", "robust LENS",
                    "map = input LENS (robust)", "random map LENS (robust)",
                    "robust above map = input (LENS)", "natural above map = input (LENS)"],
        "align": "|---|---|---|---|---|---|---|---|",
        "rows": rows,
    }  # fmt: skip


def _cost_row(tag: str, name: str, job: dict[str, Any]) -> list[str]:
    note = job["attack_cost"][f"{name}/topk"]
    members = note["members"]
    worst = ", ".join(f"{m['name']} {m['worst_on']}" for m in members)
    queries = sum(m["maps"] for m in members if m["gradient_steps"] == 0)
    return [tag, LABELS[name], str(len(members)), f"{note['cpu_seconds_per_image']:.1f}",
            str(note["gradient_steps_per_image"]), str(queries), worst]  # fmt: skip


def collect(runs: Path, results: Path = RESULTS) -> dict[str, Any]:
    """Write the results file from the finished jobs (each map on the images both models
    finished); return its content."""
    raw = load_jobs(runs)
    jobs = paired(raw)
    if not jobs:
        raise FileNotFoundError(f"`--runs` {str(runs)!r} holds no job finished for both models")
    first = next(iter(next(iter(raw.values())).values()))
    data = {
        "about": "python -m experiments run ensemble_maps: the shipped MNIST-5k pair, each map "
        "under the ensemble protocol, on the first test images both models classify correctly",
        "protocol": first["settings"],
        "dates": sorted({j["date"] for c in raw.values() for j in c.values()}),
        "machine": first["machine"],
        "jobs": {
            f"{t}/{m}": {"cpu_seconds": j["cpu_seconds"], "index": j["index"]}
            for (t, m), j in sorted(jobs.items())
        },  # fmt: skip
        "tables": tables(jobs),
    }
    results.write_text(json.dumps(data, indent=1) + "\n")
    return data


def plan(maps: list[str], images: int, size: int) -> list[tuple[str, int]]:
    """(map, chunk) in the order they run: every map on two chunks before the next two chunks,
    so that an interrupted run has every map on the same first images.

    Examples:
        >>> plan(["saliency", "lrp"], 30, 10)
        [('saliency', 0), ('saliency', 1), ('lrp', 0), ('lrp', 1), ('saliency', 2), ('lrp', 2)]
    """
    chunks = list(range(-(-images // size)))
    return [(m, c) for g in range(0, len(chunks), 2) for m in maps for c in chunks[g : g + 2]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments run ensemble_maps")
    parser.add_argument("step", choices=("run", "collect"))
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument("--maps", nargs="+", choices=sorted(LABELS), default=list(MAPS))
    parser.add_argument("--images", type=int, default=40, help="test images (both correct)")
    parser.add_argument("--chunk", type=int, default=10, help="images per job")
    parser.add_argument("--runs", type=Path, default=Path("runs/ensemble_maps"))
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument(
        "--robust-ckpt",
        default=None,
        help="measure this checkpoint as the robust model (same images)",
    )
    args = parser.parse_args(argv)
    for flag in ("images", "chunk"):
        if getattr(args, flag) < 1:
            parser.error(f"`--{flag}` must be >= 1, got {getattr(args, flag)}")
    torch.set_num_threads(1)
    if args.step == "collect":
        data = collect(args.runs, args.results)
        print(f"wrote {args.results} ({len(data['jobs'])} model/map pairs)")
        return 0
    for name, chunk in plan(args.maps, args.images, args.chunk):
        for tag in args.models:
            ckpt = args.robust_ckpt if tag == "robust" else None
            path = run_job(tag, name, chunk, args.chunk, args.runs, args.images, ckpt)
            print(f"{tag} {name} {chunk}: {path}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
