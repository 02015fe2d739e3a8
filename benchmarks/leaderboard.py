"""The attributional-robustness leaderboard on MNIST-5k: every method, same model, same budget.

Trains natural training and every registered method (`robust_train.regularizers.PENALTIES`) on
MNIST-5k (3,500 train / 500 val / 1,000 test) with the same model, optimizer and epochs; picks
each method's weight by a small sweep scored on the VAL split; trains the chosen setting with a
second seed; evaluates every chosen model with the RAR protocol (`PROTOCOLS["rar"]`, CPU-sized)
on the same test images; adds a fine-tuning row (the natural models fine-tuned with the best
method). Writes benchmarks/LEADERBOARD.md, benchmarks/leaderboard_pareto.png and, in --out,
results.json and the checkpoints.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/leaderboard.py [--workers 2] [--budget-min 40]
    .venv/bin/python benchmarks/leaderboard.py --quick --out /tmp/lb   # smoke run, seconds

Weight rule (stated in the output): among a method's sweep values, the largest val robustness
(saliency top-k intersection under the val attack) whose val accuracy is within 1 point of the
natural model's; when none is, the value with the best val accuracy.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = {"channels": [16, 32], "hidden": 128}
LR, BATCH, EPOCHS, FINETUNE_EPOCHS, FINETUNE_LR = 3e-3, 64, 6, 2, 1e-3

# name -> (penalty, fixed CPU-sized kwargs, swept argument, sweep values, what the paper used)
METHODS: dict[str, tuple[str | None, dict[str, Any], str, list[float], str]] = {
    "natural": (None, {}, "", [], "plain cross-entropy"),
    "smoothness": ("smoothness", {"radius": 0.1}, "weight", [1.0, 3.0],
                   "this project: L1 of saliency maps at x and x + U(-0.1, 0.1)"),
    "gradnorm": ("gradnorm", {}, "weight", [1.0, 10.0], "Ross & Doshi-Velez 2018"),
    "curvature": ("curvature", {"h": 0.05}, "weight", [0.01, 0.1], "this project, zero-order"),
    "adversarial": ("adversarial", {"step_size": 0.1, "n_steps": 3}, "epsilon", [0.1, 0.3],
                    "Madry et al. 2018: eps 0.3, 40 steps of 0.01"),
    "ig_norm": ("ig_norm", {"step_size": 0.15, "n_steps": 2, "n_attack_points": 2,
                            "n_points": 4}, "weight", [0.1, 1.0],
                "RAR: lambda 1, eps 0.3, 40 steps of 0.01, 10 / 50 path points"),
    "ig_sum_norm": ("ig_sum_norm", {"step_size": 0.15, "n_steps": 2, "n_attack_points": 2,
                                    "n_points": 4}, "beta", [0.1, 1.0],
                    "RAR: beta 0.1, eps 0.3, 40 steps of 0.01, 10 / 50 path points"),
    "ssr": ("ssr", {"n_iterations": 3}, "weight", [0.1, 1.0],
            "Wang et al. 2020: lambda_max of the Gauss-Newton input Hessian (CIFAR, a = 0.3)"),
    "igr": ("igr", {"radius": 0.3, "n_ascent_steps": 1, "n_ig_steps": 3}, "weight", [1.0, 3.0],
            "Wang & Kong 2022: 1 - cos(IG(x), IG(x')), with AT; attack 200 steps"),
}


@dataclasses.dataclass
class Plan:
    """Sizes of one leaderboard run (the full run, or --quick)."""

    epochs: int = EPOCHS
    finetune_epochs: int = FINETUNE_EPOCHS
    limit_batches: int | None = None
    seeds: tuple[int, ...] = (0, 1)
    val_images: int = 200
    val_steps: int = 20
    test_images: int = 200
    test_steps: int = 30
    test_restarts: int = 1
    ig_steps: int = 10
    lipschitz_samples: int = 8
    fidelity_steps: int = 10


def quick_plan() -> Plan:
    return Plan(epochs=1, finetune_epochs=1, limit_batches=2, val_images=8, val_steps=2,
                test_images=8, test_steps=2, ig_steps=2, lipschitz_samples=2, fidelity_steps=3)


def settings(plan: Plan, split: str) -> Any:
    """The RAR preset sized for this CPU: val = saliency top-k only; test = the full protocol."""
    from robust_train.evaluation import PROTOCOLS

    rar = PROTOCOLS["rar"]
    if split == "val":
        return dataclasses.replace(rar, n_samples=plan.val_images, n_steps=plan.val_steps,
                                   step_size=0.3 * 2.5 / plan.val_steps, n_restarts=1,
                                   attacks=("topk",), attack_explainers=("saliency",),
                                   explainers=())
    return dataclasses.replace(rar, n_samples=plan.test_images, n_steps=plan.test_steps,
                               step_size=max(0.01, 0.3 * 2.5 / plan.test_steps),
                               n_restarts=plan.test_restarts, ig_steps=plan.ig_steps,
                               lipschitz_samples=plan.lipschitz_samples,
                               fidelity_steps=plan.fidelity_steps)


def _tensors(split: str) -> tuple[Any, Any]:
    from robust_train.data import MNIST5kDataModule

    dm = MNIST5kDataModule(seed=0)
    dm.setup()
    return {"val": dm.val_set, "test": dm.test_set}[split].tensors


def train_job(job: dict[str, Any]) -> dict[str, Any]:
    """Train one model (in a worker: one thread), save its checkpoint, score it on val."""
    import pytorch_lightning as pl
    import torch

    from robust_train import RobustClassifier
    from robust_train.data import MNIST5kDataModule
    from robust_train.models import MNISTConvNet
    from robust_train.regularizers import get_penalty

    _quiet()
    torch.set_num_threads(1)
    plan: Plan = job["plan"]
    pl.seed_everything(job["seed"], workers=True, verbose=False)
    penalties = []
    if job["penalty"]:
        penalties = [get_penalty(job["penalty"], seed=job["seed"], **job["kwargs"])]
    lr = job.get("lr", LR)
    module = RobustClassifier(MNISTConvNet(**MODEL), penalties,
                              optimizer=lambda p: torch.optim.Adam(p, lr=lr),
                              init_checkpoint=job.get("init"))
    trainer = pl.Trainer(max_epochs=job["epochs"], accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0,
                         num_sanity_val_steps=0, limit_train_batches=plan.limit_batches)
    start = time.perf_counter()
    trainer.fit(module, datamodule=MNIST5kDataModule(batch_size=BATCH, seed=0))
    seconds = time.perf_counter() - start
    ckpt = Path(job["out"]) / f"{job['id']}.ckpt"
    trainer.save_checkpoint(ckpt)
    loss = trainer.callback_metrics.get("train/loss_epoch")
    result = {**{k: v for k, v in job.items() if k != "plan"}, "seconds": seconds,
              "final_loss": float(loss) if loss is not None else math.nan, "ckpt": str(ckpt)}
    if job.get("score_val"):
        result["val"] = evaluate(module.model, "val", plan)
    return result


def _quiet() -> None:
    import logging
    import warnings

    for name in ("lightning.pytorch", "pytorch_lightning", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")


def evaluate(model: Any, split: str, plan: Plan) -> dict[str, Any]:
    """Flat metrics of the (scaled) RAR protocol on the first images of `split`."""
    import torch

    from robust_train.evaluation import evaluate_classifier, predict

    _quiet()
    torch.set_num_threads(1)
    x, y = _tensors(split)
    model.eval()
    accuracy = float((predict(model, x, 256) == y).float().mean())  # the whole split
    r = evaluate_classifier(model, x, y, settings(plan, split), progress=False)
    out: dict[str, Any] = {"accuracy": accuracy, "n_attacked": r["n_attacked"],
                           "eval_seconds": sum(r["seconds"].values())}
    for explainer, rows in r["attacks_by_explainer"].items():
        short = "sal" if explainer == "saliency" else "ig"
        for attack, row in rows.items():
            for metric in ("topk_intersection", "kendall", "spearman"):
                out[f"{short}/{attack}/{metric}"] = row.get(metric, math.nan)
    for explainer, value in r.get("lipschitz", {}).items():
        out[f"lipschitz/{explainer}"] = _mean(value)
    for explainer, value in r.get("fidelity", {}).items():
        out[f"fidelity/{explainer}"] = _mean(value)
    return out


def _mean(value: Any) -> float:
    if isinstance(value, dict):
        for key in ("estimate", "mean", "fidelity_estimate", "value"):
            if key in value:
                return _mean(value[key])
        return math.nan
    return float(value)


def test_job(job: dict[str, Any]) -> dict[str, Any]:
    from robust_train.models import load_classifier

    return {**job, "test": evaluate(load_classifier(job["ckpt"]), "test", job["plan"])}


def choose(runs: list[dict[str, Any]], natural_val_acc: float) -> dict[str, Any]:
    """The weight rule: best val robustness within 1 point of natural val accuracy."""
    ok = [r for r in runs if r["val"]["accuracy"] >= natural_val_acc - 0.01]
    if ok:
        return max(ok, key=_val_robustness)
    return max(runs, key=lambda r: r["val"]["accuracy"])


def _val_robustness(run: dict[str, Any]) -> float:
    value = run["val"]["sal/topk/topk_intersection"]
    return value if math.isfinite(value) else -math.inf


class Runner:
    """Runs jobs on a process pool (or inline with one worker) and stops at the time budget."""

    def __init__(self, workers: int, budget_s: float) -> None:
        self.pool = ProcessPoolExecutor(workers) if workers > 1 else None
        self.deadline = time.time() + budget_s
        self.skipped: list[str] = []

    def map(self, fn: Any, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        jobs = [j for j in jobs if self._admit(j)]
        if self.pool is None:
            return [fn(j) for j in jobs if self._admit(j)]
        return list(self.pool.map(fn, jobs))

    def _admit(self, job: dict[str, Any]) -> bool:
        if time.time() < self.deadline:
            return True
        self.skipped.append(job.get("id", "?"))
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    parser.add_argument("--methods", nargs="*", default=None, help="subset of METHODS")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--budget-min", type=float, default=40.0,
                        help="no new job starts after this many minutes (results say partial)")
    parser.add_argument("--out", default=str(ROOT / "runs" / "leaderboard"))
    parser.add_argument("--md", default=None, help="markdown output (default: benchmarks/ for "
                        "the full run, --out for --quick)")
    args = parser.parse_args(argv)
    plan = quick_plan() if args.quick else Plan()
    names = args.methods or list(METHODS)
    unknown = sorted(set(names) - set(METHODS))
    if unknown:
        raise SystemExit(f"unknown --methods {unknown}; expected some of {list(METHODS)}")
    if "natural" not in names:
        names = ["natural", *names]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    md = Path(args.md) if args.md else (out if args.quick else ROOT / "benchmarks")
    start = time.time()
    runner = Runner(args.workers, args.budget_min * 60)
    results = run_all(names, plan, out, runner)
    results["wall_seconds"] = time.time() - start
    results["skipped"] = runner.skipped
    results["plan"] = dataclasses.asdict(plan)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    write_report(results, md, quick=args.quick)
    print(f"leaderboard in {time.time() - start:.0f} s -> {md}")
    return 0


def run_all(names: list[str], plan: Plan, out: Path, runner: Runner) -> dict[str, Any]:
    seeds = plan.seeds
    base = {"plan": plan, "out": str(out), "epochs": plan.epochs, "score_val": True}
    # Stage 1: natural (every seed) and every sweep value of every method on the first seed.
    jobs = [{**base, "id": f"natural_s{s}", "method": "natural", "penalty": None, "kwargs": {},
             "seed": s, "value": None} for s in seeds]
    for name in names:
        penalty, fixed, arg, values, _ = METHODS[name]
        if penalty is None:
            continue
        for v in values:
            jobs.append({**base, "id": f"{name}_{arg}{v:g}_s{seeds[0]}", "method": name,
                         "penalty": penalty, "kwargs": {**fixed, arg: v}, "seed": seeds[0],
                         "value": v})
    stage1 = runner.map(train_job, jobs)
    natural = [r for r in stage1 if r["method"] == "natural"]
    nat_val = natural[0]["val"]["accuracy"] if natural else 1.0
    chosen: dict[str, dict[str, Any]] = {}
    sweeps: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        runs = [r for r in stage1 if r["method"] == name and r["value"] is not None]
        if runs:
            sweeps[name] = runs
            chosen[name] = choose(runs, nat_val)
    # The best method: largest val robustness among the chosen within 1 point of natural.
    eligible = [c for c in chosen.values() if c["val"]["accuracy"] >= nat_val - 0.01] or list(
        chosen.values())
    best = max(eligible, key=_val_robustness) if eligible else None
    # Stage 2: the chosen settings on the other seeds; fine-tuning the natural models with the best.
    jobs = [{**{k: v for k, v in c.items() if k != "val"}, "plan": plan,
             "id": f"{c['method']}_chosen_s{s}", "seed": s, "score_val": False}
            for c in chosen.values() for s in seeds[1:]]
    if best is not None:
        jobs += [{**base, "id": f"finetune_{best['method']}_s{n['seed']}", "method": "finetune",
                  "penalty": best["penalty"], "kwargs": best["kwargs"], "seed": n["seed"],
                  "value": best["value"], "init": n["ckpt"], "epochs": plan.finetune_epochs,
                  "lr": FINETUNE_LR, "score_val": False, "base_method": best["method"]}
                 for n in natural]
    stage2 = runner.map(train_job, jobs)
    final = natural + list(chosen.values()) + stage2
    tested = runner.map(test_job, [{**r, "plan": plan} for r in final])
    for r in tested:
        r.pop("plan", None)
    return {"rows": tested, "sweeps": {k: [{kk: vv for kk, vv in r.items() if kk != "plan"}
                                           for r in v] for k, v in sweeps.items()},
            "natural_val_accuracy": nat_val, "best": best["method"] if best else None,
            "methods": {k: {"penalty": v[0], "fixed": v[1], "swept": v[2], "values": v[3],
                            "paper": v[4]} for k, v in METHODS.items() if k in names}}


# ------------------------------------------------------------------------------------ report
COLUMNS = [  # (key in row["test"], header, digits)
    ("accuracy", "test acc", 3),
    ("sal/topk/topk_intersection", "sal top-k ∩ (attack)", 3),
    ("sal/topk/kendall", "sal Kendall", 3),
    ("sal/topk/spearman", "sal Spearman", 3),
    ("sal/random_sign/topk_intersection", "sal top-k ∩ (noise)", 3),
    ("ig/topk/topk_intersection", "IG top-k ∩ (attack)", 3),
    ("ig/topk/kendall", "IG Kendall", 3),
    ("ig/topk/spearman", "IG Spearman", 3),
    ("ig/random_sign/topk_intersection", "IG top-k ∩ (noise)", 3),
    ("fidelity/saliency", "fidelity (sal)", 3),
    ("lipschitz/saliency", "Lipschitz (sal)", 2),
]


def _stats(values: list[float]) -> tuple[float, float]:
    v = [x for x in values if isinstance(x, (int, float)) and math.isfinite(x)]
    if not v:
        return math.nan, math.nan
    mean = sum(v) / len(v)
    return mean, (max(v) - min(v)) / 2


def _fmt(values: list[float], digits: int) -> str:
    mean, half = _stats(values)
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.{digits}f} ± {half:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}"


def table_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One aggregated row per method (mean and half-range over seeds)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in results["rows"]:
        key = r["method"] if r["method"] != "finetune" else f"finetune ({r['base_method']})"
        groups.setdefault(key, []).append(r)
    nat = groups.get("natural", [])
    nat_time = _stats([r["seconds"] for r in nat])[0] if nat else math.nan
    nat_sal = _stats([r["test"]["sal/topk/topk_intersection"] for r in nat])[0] if nat else 0.0
    rows = []
    for key, runs in groups.items():
        method = runs[0]["method"] if runs[0]["method"] != "finetune" else runs[0]["base_method"]
        _, _, arg, _, _ = METHODS[method]
        setting = f"{arg}={runs[0]['value']:g}" if runs[0].get("value") is not None else "-"
        seconds = [r["seconds"] for r in runs]
        sal = [r["test"]["sal/topk/topk_intersection"] for r in runs]
        rows.append({
            "method": key, "setting": setting, "n_seeds": len(runs),
            "cells": [_fmt([r["test"].get(c, math.nan) for r in runs], d) for c, _, d in COLUMNS],
            "seconds": _stats(seconds)[0], "relative_time": _stats(seconds)[0] / nat_time,
            "gain": _stats(sal)[0] - nat_sal, "gain_half": _stats(sal)[1],
            "finite": all(math.isfinite(r["final_loss"]) for r in runs),
            "accuracy": _stats([r["test"]["accuracy"] for r in runs])[0],
        })
    return rows


def pareto_plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Robustness gain (saliency top-k intersection over natural) against training time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [r for r in rows if math.isfinite(r["relative_time"]) and math.isfinite(r["gain"])]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    front, best = [], -math.inf
    for r in sorted(pts, key=lambda r: r["relative_time"]):
        if r["gain"] > best:
            front.append(r)
            best = r["gain"]
    for r in pts:
        ax.errorbar(r["relative_time"], r["gain"], yerr=r["gain_half"], fmt="o",
                    color="tab:red" if r in front else "tab:gray", capsize=3)
        ax.annotate(r["method"], (r["relative_time"], r["gain"]), textcoords="offset points",
                    xytext=(5, 4), fontsize=8)
    if front:
        ax.plot([r["relative_time"] for r in front], [r["gain"] for r in front], "--",
                color="tab:red", lw=1, label="Pareto front")
        ax.legend(loc="lower right")
    ax.set_xscale("log")
    ax.set_xlabel("training time relative to natural (same machine, same run; log)")
    ax.set_ylabel("gain in saliency top-100 intersection\nunder the RAR attack (test)")
    ax.axhline(0, color="k", lw=0.5)
    ax.set_title("MNIST-5k: robustness gain vs training cost (mean ± half-range, 2 seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(results: dict[str, Any], folder: Path, *, quick: bool) -> Path:
    """LEADERBOARD.md (table, sweeps, settings vs papers) and the Pareto plot in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = table_rows(results)
    plan = results["plan"]
    png = folder / "leaderboard_pareto.png"
    pareto_plot(rows, png)
    partial = bool(results["skipped"])
    lines = ["# MNIST-5k attributional-robustness leaderboard", ""]
    if quick:
        lines += ["**QUICK SMOKE RUN: sizes are tiny, the numbers mean nothing.**", ""]
    if partial:
        lines += [f"**PARTIAL: the time budget ran out; not run: {', '.join(results['skipped'])}.**",
                  ""]
    lines += [
        "Command: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/leaderboard.py` "
        f"(wall {results['wall_seconds'] / 60:.1f} min, {plan['seeds'].__len__()} seeds).", "",
        "| method | setting | " + " | ".join(h for _, h, _ in COLUMNS)
        + " | train s | time × natural | finite loss |",
        "|" + "---|" * (len(COLUMNS) + 5),
    ]
    for r in rows:
        lines.append(f"| {r['method']} | {r['setting']} | " + " | ".join(r["cells"])
                     + f" | {r['seconds']:.0f} | {r['relative_time']:.1f} | "
                     + ("yes" if r["finite"] else "NO") + " |")
    lines += ["", "Mean ± half the range over seeds. Attack rows: the RAR top-k attack "
              "(attack k 200, reported k 100); noise rows: random signs of the same budget.", "",
              f"![Pareto plot]({png.name})", "", "## Weight sweeps (val split, first seed)", "",
              f"Natural val accuracy: {results['natural_val_accuracy']:.3f}. Rule: the value with "
              "the largest val saliency top-k intersection whose val accuracy is within 1 point "
              "of natural; when none is, the best val accuracy. Best method by the same rule: "
              f"**{results['best']}** (fine-tuning row).", "",
              "| method | value | val acc | val sal top-k ∩ | train s | chosen |", "|---|---|---|---|---|---|"]
    chosen_ids = {r["id"] for r in results["rows"]}
    for name, runs in results["sweeps"].items():
        arg = METHODS[name][2]
        for r in runs:
            lines.append(f"| {name} | {arg}={r['value']:g} | {r['val']['accuracy']:.3f} | "
                         f"{r['val']['sal/topk/topk_intersection']:.3f} | {r['seconds']:.0f} | "
                         + ("**yes**" if r["id"] in chosen_ids else "") + " |")
    lines += ["", "## Settings here versus the papers", "",
              f"Model: MNISTConvNet(channels={MODEL['channels']}, hidden={MODEL['hidden']}) "
              f"(RAR's layout at reduced width); Adam lr {LR}, batch {BATCH}, {plan['epochs']} "
              f"epochs on the 3,500 training images (RAR: 100k steps of batch 50); fine-tuning "
              f"{plan['finetune_epochs']} epochs at lr {FINETUNE_LR}. One thread per run, "
              "runs in parallel on the 2-core machine next to other work, so times are noisy.",
              "",
              f"Evaluation: the RAR preset on the first {plan['test_images']} test images "
              f"(correctly classified ones attacked), {plan['test_steps']} steps of "
              f"{max(0.01, 0.75 / plan['test_steps']):.3g}, {plan['test_restarts']} restart(s), "
              f"IG with {plan['ig_steps']} points, Lipschitz {plan['lipschitz_samples']} samples, "
              f"fidelity {plan['fidelity_steps']} steps (paper: all 10,000 test images, 100 "
              "steps of 0.01, 3 restarts, IG 100 points). Val score: saliency top-k attack, "
              f"{plan['val_steps']} steps, first {plan['val_images']} val images.", "",
              "| method | here (fixed) | swept | paper |", "|---|---|---|---|"]
    for name, m in results["methods"].items():
        lines.append(f"| {name} | {m['fixed'] or '-'} | {m['swept'] or '-'} {m['values'] or ''} "
                     f"| {m['paper']} |")
    path = folder / "LEADERBOARD.md"
    path.write_text("\n".join(lines) + "\n")
    return path


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
