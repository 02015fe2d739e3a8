"""The attributional-robustness leaderboard on MNIST-5k: every method, same model, same budget.

Trains natural training and every registered method (`robust_train.regularizers.PENALTIES`) on
MNIST-5k (3,500 train / 500 val / 1,000 test) with the same model, optimizer and epochs; picks
each method's weight by a small sweep scored on the VAL split; trains the chosen setting with a
second seed; evaluates every chosen model with the RAR protocol (`PROTOCOLS["rar"]`, CPU-sized)
on the same test images; adds a fine-tuning row (the natural models fine-tuned with the best
method). Writes benchmarks/LEADERBOARD.md, benchmarks/leaderboard_pareto.png and, in --out,
results.json and the checkpoints.

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.leaderboard [--workers 2] [--budget-min 40]
    .venv/bin/python -m benchmarks.leaderboard --quick --out /tmp/lb   # smoke run, seconds

Weight rule (stated in the output): among a method's sweep values, the largest val robustness
(saliency top-k intersection under the val attack) whose val accuracy is within 1 point of the
natural model's, allowing for the noise of the 500-image val split (`eligible`: the drop may
exceed 1 point by 1.645 standard errors of the paired per-image difference, so a setting is
excluded only when val shows it loses more than 1 point); when none is, the value with the best
val accuracy.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from benchmarks.leaderboard_methods import (
    BATCH,
    FINETUNE_LR,
    FINETUNED,
    LR,
    METHODS,
    MODEL,
    TRAIN_IMAGES,
    Plan,
    Results,
    RunResult,
    TestJob,
    TrainJob,
    choose,
    eligible,
    quick_plan,
    val_robustness,
)
from benchmarks.leaderboard_report import write_report

ROOT = Path(__file__).resolve().parents[1]


def settings(plan: Plan, split: str) -> Any:
    """The RAR preset sized for this CPU: val = saliency top-k only; test = the full protocol."""
    from robust_train.evaluation import PROTOCOLS

    rar = PROTOCOLS["rar"]
    if split == "val":
        return dataclasses.replace(
            rar,
            n_samples=plan.val_images,
            n_steps=plan.val_steps,
            step_size=0.3 * 2.5 / plan.val_steps,
            n_restarts=1,
            attacks=("topk",),
            attack_explainers=("saliency",),
            parts=("fragility",),
        )
    return dataclasses.replace(
        rar,
        n_samples=plan.test_images,
        n_steps=plan.test_steps,
        step_size=max(0.01, 0.3 * 2.5 / plan.test_steps),
        n_restarts=plan.test_restarts,
        ig_steps=plan.ig_steps,
        lipschitz_samples=plan.lipschitz_samples,
        fidelity_steps=plan.fidelity_steps,
    )


def _tensors(split: str) -> tuple[Any, Any]:
    from robust_train.data import MNIST5kDataModule

    dm = MNIST5kDataModule(seed=0)
    dm.setup()
    return {"val": dm.val_set, "test": dm.test_set}[split].tensors


def train_job(job: TrainJob) -> RunResult:
    """Train one model (in a worker: one thread), save its checkpoint, score it on val."""
    import pytorch_lightning as pl
    import torch

    from robust_train.data import MNIST5kDataModule

    _quiet()
    torch.set_num_threads(1)
    pl.seed_everything(job.seed, workers=True, verbose=False)
    module = _classifier(job)
    trainer = _trainer(job)
    start = time.perf_counter()
    trainer.fit(module, datamodule=MNIST5kDataModule(batch_size=BATCH, seed=0))
    seconds = time.perf_counter() - start
    ckpt = Path(job.out) / f"{job.id}.ckpt"
    trainer.save_checkpoint(ckpt)
    loss = trainer.callback_metrics.get("train/loss_epoch")
    result = job.record()
    result["seconds"] = seconds
    result["final_loss"] = float(loss) if loss is not None else math.nan
    result["ckpt"] = str(ckpt)
    if job.score_val:
        result["val"] = evaluate(module.model, "val", job.plan)
    if job.run_test:
        result["test"] = evaluate(module.model, "test", job.plan)
    return result


def _classifier(job: TrainJob) -> Any:
    """The RobustClassifier of `job`: MNISTConvNet(MODEL), its penalty, Adam at its rate (and the
    per-step cosine decay to 0 of a fine-tuning job), started from `job.init` when it has one."""
    import torch

    from robust_train import RobustClassifier
    from robust_train.models import MNISTConvNet
    from robust_train.regularizers import get_penalty

    penalties = []
    if job.penalty:
        penalties = [get_penalty(job.penalty, seed=job.seed, **job.kwargs)]
    scheduler = None
    if job.cosine:  # fine-tuning: the rate decays to 0 over the fit's steps
        steps = job.epochs * (job.plan.limit_batches or math.ceil(TRAIN_IMAGES / BATCH))
        scheduler = lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=steps)  # noqa: E731
    return RobustClassifier(
        MNISTConvNet(**MODEL),
        penalties,
        optimizer=lambda p: torch.optim.Adam(p, lr=job.lr),
        lr_scheduler=scheduler,
        lr_scheduler_interval="step",
        init_checkpoint=job.init,
    )


def _trainer(job: TrainJob) -> Any:
    """A quiet CPU Trainer of `job.epochs` epochs, no validation loop, no logger."""
    import pytorch_lightning as pl

    return pl.Trainer(
        max_epochs=job.epochs,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        limit_train_batches=job.plan.limit_batches,
    )


def _quiet() -> None:
    import logging
    import warnings

    for name in ("lightning.pytorch", "pytorch_lightning", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")


def evaluate(model: Any, split: str, plan: Plan) -> dict[str, Any]:
    """Flat metrics of the (scaled) RAR protocol on the first images of `split`."""
    import torch

    from robust_train._runtime import predict
    from robust_train.evaluation import evaluate_classifier

    _quiet()
    torch.set_num_threads(1)
    x, y = _tensors(split)
    model.eval()
    correct = predict(model, x, 256) == y  # the whole split
    r = evaluate_classifier(model, x, y, settings(plan, split), progress=False)
    m = r["measures"]
    out: dict[str, Any] = {
        "accuracy": float(correct.float().mean()),
        "n_attacked": m["n_attacked"],
        "eval_seconds": sum(r["seconds"].values()),
    }
    if split == "val":  # per image, for the paired accuracy comparison of the weight rule
        out["correct"] = correct.int().tolist()
    for key, value in m.items():
        parts = key.split("/")
        if parts[0] == "attack" and parts[-1] in ("topk_intersection", "kendall", "spearman"):
            short = "sal" if parts[1] == "saliency" else "ig"
            out[f"{short}/{parts[2]}/{parts[3]}"] = value
        elif parts[0] == "lipschitz" or (parts[0] == "fidelity" and parts[-1] == "fidelity"):
            out[f"{parts[0]}/{parts[1]}"] = value
    return out


def test_job(job: TestJob) -> RunResult:
    """Evaluate a saved run on the test split."""
    from robust_train.models import load_classifier

    result = job.record()
    result["test"] = evaluate(load_classifier(job.run["ckpt"]), "test", job.plan)
    return result


Job = TrainJob | TestJob


class Scheduler:
    """Runs jobs on a process pool (inline with one worker), most urgent first; no job starts
    after the time budget; `on_done` may queue follow-up jobs."""

    def __init__(self, workers: int, budget_s: float) -> None:
        self.workers = workers
        self.pool = ProcessPoolExecutor(workers) if workers > 1 else None
        self.budget_s = budget_s
        self.deadline = time.time() + budget_s
        self.queue: list[tuple[float, int, Callable[[Any], RunResult], Job]] = []
        self.skipped: list[str] = []
        self._count = 0

    def add(self, fn: Callable[[Any], RunResult], job: Job, priority: float) -> None:
        self._count += 1
        self.queue.append((priority, self._count, fn, job))
        self.queue.sort(key=lambda item: (item[0], item[1]))

    def run(self, on_done: Callable[[RunResult], None]) -> None:
        running: dict[Future[RunResult], Job] = {}
        while self.queue or running:
            while self.queue and len(running) < max(1, self.workers):
                _, _, fn, job = self.queue.pop(0)
                if time.time() > self.deadline:
                    self.skipped.append(job.id)
                    continue
                if self.pool is None:
                    on_done(fn(job))
                    continue
                running[self.pool.submit(fn, job)] = job
            if running:
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for future in done:
                    job = running.pop(future)
                    try:
                        on_done(future.result())
                    except Exception as err:  # a failed run is reported, the others go on
                        print(f"job {job.id} failed: {err!r}", flush=True)
                        on_done({**job.record(), "failed": repr(err)})
        if self.pool is not None:
            self.pool.shutdown()


def parser() -> argparse.ArgumentParser:
    """The command line of the leaderboard (run, --ship or --report)."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    p.add_argument("--methods", nargs="*", default=None, help="subset of METHODS")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--budget-min",
        type=float,
        default=40.0,
        help="no new job starts after this many minutes (results say partial)",
    )
    p.add_argument("--out", default=str(ROOT / "runs" / "leaderboard"))
    p.add_argument(
        "--md",
        default=None,
        help="markdown output (default: benchmarks/ for the full run, --out for --quick)",
    )
    p.add_argument(
        "--ship",
        default=None,
        metavar="RUN_DIR",
        help="instead of running: export the natural and the best method's first-seed models of "
        "RUN_DIR/results.json to checkpoints/mnist5k_{baseline,robust}.ckpt and rewrite the report",
    )
    p.add_argument("--ship-to", default=str(ROOT / "checkpoints"), help="folder of --ship")
    p.add_argument(
        "--report",
        default=None,
        metavar="RUN_DIR",
        help="only rewrite the report from RUN_DIR/results.json",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.report:
        results = json.loads((Path(args.report) / "results.json").read_text())
        write_report(results, Path(args.md) if args.md else ROOT / "benchmarks", quick=False)
        return 0
    if args.ship:
        results = json.loads((Path(args.ship) / "results.json").read_text())
        results["step_ms"] = step_profile(results)
        results["shipped"] = ship(results, Path(args.ship_to))
        results["out"] = args.ship
        (Path(args.ship) / "results.json").write_text(json.dumps(results, indent=1, default=str))
        write_report(results, Path(args.md) if args.md else ROOT / "benchmarks", quick=False)
        return 0
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
    board = Leaderboard(names, plan, out, Scheduler(args.workers, args.budget_min * 60))
    results = board.run()
    write_report(results, md, quick=args.quick)
    print(f"leaderboard in {results['wall_seconds']:.0f} s -> {md}", flush=True)
    return 0


class Leaderboard:
    """The run: sweeps on the first seed, then per method (as soon as its sweep is done) the test
    evaluation of the chosen run and the other seeds; the fine-tuning row once every sweep is
    done. results.json is rewritten after every job, so a stopped run leaves what it measured."""

    def __init__(self, names: list[str], plan: Plan, out: Path, scheduler: Scheduler) -> None:
        self.names, self.plan, self.out, self.sched = names, plan, out, scheduler
        self.start = time.time()
        self.rows: list[RunResult] = []
        self.sweeps: dict[str, list[RunResult]] = {n: [] for n in names if n != "natural"}
        self.natural: list[RunResult] = []
        self.chosen: dict[str, RunResult] = {}
        self.best: RunResult | None = None
        self.failed: list[RunResult] = []

    def _job(self, **kw: Any) -> TrainJob:
        return TrainJob(
            **{"plan": self.plan, "out": str(self.out), "epochs": self.plan.epochs, **kw}
        )

    def run(self) -> Results:
        seeds = self.plan.seeds
        for s in seeds:
            self.sched.add(
                train_job,
                self._job(
                    id=f"natural_s{s}",
                    method="natural",
                    penalty=None,
                    seed=s,
                    score_val=s == seeds[0],
                    run_test=True,
                ),
                0,
            )
        for rank, name in enumerate(self.names):
            if METHODS[name].penalty is not None and name not in FINETUNED:
                self._schedule_sweep(name, 1 + rank)  # fine-tuned: once natural is trained
        self.sched.run(self._done)
        return self.results()

    def _schedule_sweep(self, name: str, priority: float) -> None:
        """The val sweep of `name` on the first seed; one value (not swept): every seed starts
        now, each evaluated on test in its job."""
        m, seeds = METHODS[name], self.plan.seeds
        single = len(m.values) == 1
        for v in m.values:
            for s in seeds if single else seeds[:1]:
                self.sched.add(
                    train_job,
                    self._job(
                        id=f"{name}_{m.swept}{v:g}_s{s}",
                        method=name,
                        penalty=m.penalty,
                        kwargs={**m.fixed, m.swept: v},
                        seed=s,
                        value=v,
                        score_val=s == seeds[0],
                        run_test=single,
                    ),
                    priority,
                )

    def _finetune_job(self, name: str, natural: RunResult, **kw: Any) -> TrainJob:
        """A run of fine-tuned method `name` starting from the natural run `natural`."""
        return self._job(
            method=name,
            penalty=METHODS[name].penalty,
            seed=natural["seed"],
            init=natural["ckpt"],
            epochs=self.plan.finetune_epochs,
            lr=FINETUNE_LR,
            cosine=True,
            **kw,
        )

    def _natural_run(self, seed: int) -> RunResult | None:
        return next((n for n in self.natural if n["seed"] == seed), None)

    def _schedule_finetuned_sweeps(self, natural: RunResult) -> None:
        """The first seed's natural model is trained: sweep each fine-tuned method from it."""
        for rank, name in enumerate(self.names):
            if name not in FINETUNED:
                continue
            m = METHODS[name]
            for v in m.values:
                self.sched.add(
                    train_job,
                    self._finetune_job(
                        name,
                        natural,
                        id=f"{name}_{m.swept}{v:g}_s{natural['seed']}",
                        kwargs={**m.fixed, m.swept: v},
                        value=v,
                        score_val=True,
                    ),
                    1 + rank,
                )

    def _done(self, r: RunResult) -> None:
        if "failed" in r:
            self.failed.append(r)
        elif r["method"] == "natural" and r.get("score_val"):
            self.natural.insert(0, r)
            self._schedule_finetuned_sweeps(r)
        elif r["method"] == "natural":
            self.natural.append(r)
        elif "val" in r and r["method"] in self.sweeps and "test" not in r:
            self.sweeps[r["method"]].append(r)
        elif "val" in r and r["method"] in self.sweeps and len(METHODS[r["method"]].values) == 1:
            self.sweeps[r["method"]].append(r)  # a single value's first seed: tested already
        if "test" in r and "failed" not in r:
            self.rows.append(r)
        for name in self.sweeps:
            if name not in self.chosen:
                self._maybe_choose(name)
        self._maybe_finetune()
        (self.out / "results.json").write_text(json.dumps(self.results(), indent=1, default=str))
        print(f"[{(time.time() - self.start) / 60:5.1f} min] {r['id']} done", flush=True)

    def _natural_scored(self) -> dict[str, Any]:
        """Val scores of the first seed's natural model (empty until it is trained)."""
        return next((n["val"] for n in self.natural if "val" in n), {})

    def _natural_val(self) -> float | None:
        return self._natural_scored().get("accuracy")

    def _natural_correct(self) -> list[int] | None:
        """Per val image: the weight rule's paired reference."""
        return self._natural_scored().get("correct")

    def _maybe_choose(self, name: str) -> None:
        nat = self._natural_val()
        runs = self.sweeps[name]
        if nat is None or not runs or len(runs) < len(METHODS[name].values):
            return
        if name in FINETUNED and len(self.natural) < len(self.plan.seeds):
            return  # the other seeds start from their natural models: wait for them
        c = choose(runs, nat, self._natural_correct())
        self.chosen[name] = c
        if len(METHODS[name].values) == 1 and name not in FINETUNED:
            return  # not swept: every seed was scheduled (and tested) from the start
        self.sched.add(test_job, TestJob(c, self.plan), -1)
        for s in self.plan.seeds[1:]:
            self.sched.add(train_job, self._chosen_job(name, c, s), 0.5)

    def _chosen_job(self, name: str, chosen: RunResult, seed: int) -> TrainJob:
        """The chosen setting of `name` trained (and tested) on another seed: a fine-tuned
        method from that seed's natural model, the others from scratch."""
        natural = self._natural_run(seed)
        if name in FINETUNED and natural is not None:
            return self._finetune_job(
                name,
                natural,
                id=f"{name}_chosen_s{seed}",
                kwargs=chosen["kwargs"],
                value=chosen["value"],
                run_test=True,
            )
        return TrainJob.of(
            chosen,
            self.plan,
            id=f"{name}_chosen_s{seed}",
            seed=seed,
            score_val=False,
            run_test=True,
        )

    def _maybe_finetune(self) -> None:
        nat = self._natural_val()
        pending = [n for n in self.sweeps if n not in self.chosen and self._could_finish(n)]
        if self.best is not None or nat is None or pending or not self.chosen:
            return
        if len(self.natural) < len(self.plan.seeds):
            return
        scratch = [c for c in self.chosen.values() if c["method"] not in FINETUNED]
        if not scratch:
            return
        ok = [c for c in scratch if eligible(c, nat, self._natural_correct())]
        self.best = max(ok or scratch, key=val_robustness)
        b = self.best
        for n in self.natural:
            self.sched.add(
                train_job,
                self._job(
                    id=f"finetune_{b['method']}_s{n['seed']}",
                    method="finetune",
                    penalty=b["penalty"],
                    kwargs=b["kwargs"],
                    seed=n["seed"],
                    value=b["value"],
                    init=n["ckpt"],
                    epochs=self.plan.finetune_epochs,
                    lr=FINETUNE_LR,
                    cosine=True,
                    run_test=True,
                    base_method=b["method"],
                ),
                0.25,
            )

    def _robust_pick(self) -> str | None:
        """The shipped robust model's method: the weight rule over every chosen method, the
        fine-tuned ones included (their val runs start from the first seed's natural model)."""
        nat = self._natural_val()
        if nat is None or not self.chosen:
            return None
        return choose(list(self.chosen.values()), nat, self._natural_correct())["method"]

    def _could_finish(self, name: str) -> bool:
        """False when a sweep run of `name` failed or was skipped (it will never be chosen)."""
        lost = {f["id"] for f in self.failed} | set(self.sched.skipped)
        return not any(i.startswith(f"{name}_") for i in lost)

    def results(self) -> Results:
        return {
            "rows": self.rows,
            "sweeps": self.sweeps,
            "natural_val_accuracy": self._natural_val(),
            "best": self.best["method"] if self.best else None,
            "robust": self._robust_pick(),
            "methods": {k: v.record() for k, v in METHODS.items() if k in self.names},
            "wall_seconds": time.time() - self.start,
            "budget_min": self.sched.budget_s / 60,
            "out": str(self.out),
            "skipped": list(self.sched.skipped),
            "failed": self.failed,
            "plan": dataclasses.asdict(self.plan),
        }


# ------------------------------------------------------------------------------- shipping
def step_profile(results: Results, n_steps: int = 10) -> dict[str, float]:
    """Milliseconds per training step (batch 64, one thread, one process, one after the other)
    of natural training and of every method at its chosen setting: a steadier cost measure
    than the runs' wall times, which share the machine with the other runs and other work."""
    import statistics

    import torch

    from robust_train import RobustClassifier
    from robust_train.data import MNIST5kDataModule
    from robust_train.models import MNISTConvNet
    from robust_train.regularizers import get_penalty

    _quiet()
    torch.set_num_threads(1)
    dm = MNIST5kDataModule(seed=0)
    dm.setup()
    x, y = dm.train_set.tensors
    settings = {"natural": None}
    for r in results["rows"]:
        if r["method"] not in ("natural", "finetune"):
            settings[r["method"]] = (r["penalty"], r["kwargs"])
    out = {}
    for name, setting in settings.items():
        torch.manual_seed(0)
        terms = [get_penalty(setting[0], seed=0, **setting[1])] if setting else []
        module = RobustClassifier(MNISTConvNet(**MODEL), terms)
        opt = torch.optim.Adam(module.parameters(), lr=LR)
        times = []
        for i in range(n_steps):
            xb, yb = x[i * BATCH : (i + 1) * BATCH], y[i * BATCH : (i + 1) * BATCH]
            start = time.perf_counter()
            loss = module.training_step((xb, yb), i)
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - start)
        out[name] = 1000 * statistics.median(times[2:])
    return out


def ship(results: Results, folder: Path) -> dict[str, dict[str, Any]]:
    """Export natural seed 0 and the best method's first-seed run (small files) and measure
    their accuracy on the whole 1,000-image test split as the test suite does."""
    import torch

    from robust_train._checkpoint_io import export_checkpoint
    from robust_train._runtime import predict
    from robust_train.models import load_classifier

    seed = results["plan"]["seeds"][0]
    rows = {(r["method"], r["seed"]): r for r in results["rows"]}
    picks = {
        "mnist5k_baseline": rows[("natural", seed)],
        "mnist5k_robust": rows[(results.get("robust") or results["best"], seed)],
    }
    x, y = _tensors("test")
    shipped = {}
    for name, run in picks.items():
        dst = export_checkpoint(run["ckpt"], folder / f"{name}.ckpt")
        with torch.no_grad():
            acc = float((predict(load_classifier(dst), x, 256) == y).float().mean())
        shipped[name] = {
            "run": run["id"],
            "accuracy": acc,
            "bytes": dst.stat().st_size,
            "seconds": run["seconds"],
            "sal": run["test"]["sal/topk/topk_intersection"],
            "ig": run["test"]["ig/topk/topk_intersection"],
        }
    return shipped


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
