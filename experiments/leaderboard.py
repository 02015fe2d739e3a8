"""The attributional-robustness leaderboard on MNIST-5k: every method, same model, same tuning.

Every method of `leaderboard_methods.METHODS` whose penalty is registered gets the same grid
size (GRID_SIZE settings, fixed in the table before the run) and the same selection rule:
2-fold cross-validation over the 4,000 train+val images (the rule: `leaderboard_methods`'
docstring, `choose`). The chosen setting of each method is trained on the whole pool with three
seeds (fine-tunes from the natural model of the same seed) and evaluated on the test split:
accuracy on all 1,000 images, and on the first `Plan.test_images` correctly classified ones the
top-k attack (RAR: attack k 200, reported k 100, L_inf 0.3) of `Plan.test_steps` steps, every
candidate direction run and the worst kept per image, and noise at the budget (x + 0.3 * random
signs, the worst of 10 draws), aimed in turn at saliency, integrated gradients (`Plan.ig_steps`
points), Grad-CAM (with the fidelity of its maps beside), LRP and DeepLIFT, each with its share of
blank clean maps; the fidelity estimate, faithfulness correlation and Lipschitz estimate of
saliency and IG. Every column of the report compares the models on the test images all of them
measured (each job records its per-image values and their test indices). Natural and the three
methods with the best CV robustness then get the full RAR preset (100 steps of 0.01, 3
restarts) on `Plan.rar_images` correctly classified test images (seed 0).

Jobs run most important first (CV, seed-0 fits and saliency, the other seeds, the other
explainers' attacks, the full preset, faithfulness), so a run stopped by --budget-min leaves
complete slices. Each job writes RUN_DIR/jobs/<id>.json; a restarted run skips the jobs that have
one. At the end (or with --report RUN_DIR) experiments/LEADERBOARD.md and the trade-off plots are
written. Every method takes tens of CPU minutes, so a whole run is split over several runs:
`--export` writes its job results to one file that is committed (experiments/results/leaderboard/,
gzip-compressed when the name ends in .gz),
`--restore` puts them back into a run folder on another machine, which trains again only the
models later jobs need.

The page opens with every row under the attack ensemble (`experiments.leaderboard_ensemble`:
natural, finetune_every_map, PGD adversarial and Gaussian-noise training, 3 seeds, the same test
images, chance levels beside), whose exported job file page.json names under "ensemble"; this
run's one-attack columns follow as the cheap protocol.

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.leaderboard --out runs/lb6 \
        --restore experiments/results/leaderboard/v6.jsonl.gz
    .venv/bin/python -m experiments.leaderboard --out runs/lb6 \
        --export experiments/results/leaderboard/v6.jsonl.gz
    .venv/bin/python -m experiments.leaderboard --quick --out /tmp/lb   # smoke run, seconds
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # not POSIX: two workers may train the same model (atomic write, time lost)
    fcntl = None  # type: ignore[assignment]

from experiments.leaderboard_methods import (
    BATCH,
    EXPLAINERS,
    FINETUNE_LR,
    LR,
    METHODS,
    MODEL,
    SHORT,
    Job,
    Plan,
    RunResult,
    available,
    cv_folds,
    quick_plan,
)
from experiments.leaderboard_run import Leaderboard, Scheduler
from experiments.support import read_text, write_text

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------- data
@functools.lru_cache(maxsize=1)
def _splits() -> Any:
    from robust_train.data import MNIST5kDataModule

    dm = MNIST5kDataModule(seed=0)
    dm.setup()
    return dm


def pool_split() -> tuple[Any, Any]:
    """The 4,000 train+val images (train first), the only data selection sees."""
    import torch

    dm = _splits()
    (xt, yt), (xv, yv) = dm.train_set.tensors, dm.val_set.tensors
    return torch.cat([xt, xv]), torch.cat([yt, yv])


def test_split() -> tuple[Any, Any]:
    """The 1,000 test images: read by eval jobs only."""
    return _splits().test_set.tensors


# ------------------------------------------------------------------------------ training
def _quiet() -> None:
    import logging
    import warnings

    import torch

    for name in ("lightning.pytorch", "pytorch_lightning", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)


def _train_indices(job: Job, plan: Plan) -> list[int]:
    if job.kind == "fit":
        return list(range(len(pool_split()[1])))
    folds = cv_folds(k=plan.cv_folds)
    return sorted(i for f, fold in enumerate(folds) if f != job.fold for i in fold)


def _epochs(job: Job, plan: Plan) -> int:
    tuned = METHODS[job.method].finetuned
    if job.kind == "cv":
        return plan.cv_finetune_epochs if tuned else plan.cv_epochs
    return plan.finetune_epochs if tuned else plan.epochs


def _classifier(job: Job, steps: int) -> Any:
    """MNISTConvNet(MODEL) with the job's penalty, Adam (the method's `lr`, else a fine-tune:
    FINETUNE_LR, cosine to 0 over `steps`, from `job.init`)."""
    import torch

    from robust_train import RobustClassifier
    from robust_train.models import MNISTConvNet
    from robust_train.regularizers import get_penalty

    m = METHODS[job.method]
    terms = [get_penalty(m.penalty, seed=job.seed, **job.kwargs())] if m.penalty else []
    lr = m.lr or (FINETUNE_LR if m.finetuned else LR)
    scheduler = None
    if m.finetuned:
        scheduler = lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=steps)  # noqa: E731
    return RobustClassifier(
        MNISTConvNet(**MODEL),
        terms,
        optimizer=lambda p: torch.optim.Adam(p, lr=lr),
        lr_scheduler=scheduler,
        lr_scheduler_interval="step",
        init_checkpoint=job.init,
        on_nonfinite="skip",
        softplus_beta=job.softplus_beta(),
    )


def ensure_model(path: str | None, producer: Job, plan: Plan, out: Path) -> str:
    """`path` when that checkpoint exists, else the model of `producer` (the "cv" or "fit" job
    that saved it) from this run folder, trained again when it is not there either: a run
    restored from exported results (`--restore`) has the results but not the models."""
    if path and Path(path).is_file():
        return path
    local = out / "ckpt" / f"{producer.id}.ckpt"
    locks = out / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{producer.id}.lock", "w") as lock:
        if fcntl is not None:  # a second worker that needs the same model waits for the first
            fcntl.flock(lock, fcntl.LOCK_EX)
        if not local.is_file():
            train(producer, plan, out)
    return str(local)


def _natural_of(job: Job) -> Job:
    """The natural job a fine-tune starts from: the same CV fold, or the same seed's fit."""
    if job.kind == "cv":
        return Job("cv", f"cv_natural_f{job.fold}", "natural", fold=job.fold)
    return Job("fit", f"fit_natural_s{job.seed}", "natural", seed=job.seed)


def _fit_of(job: Job) -> Job:
    """The fit job whose model an eval job reads (a fine-tune finds its natural model when
    trained: `train`)."""
    return Job("fit", f"fit_{job.method}_s{job.seed}", job.method, seed=job.seed, value=job.value)


def train(job: Job, plan: Plan, out: Path) -> tuple[Any, RunResult]:
    """Train the model of a "cv" or "fit" job, save its checkpoint; (model, result)."""
    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from experiments.support import quiet_trainer

    cpu = time.process_time()
    if METHODS[job.method].finetuned:
        job = dataclasses.replace(job, init=ensure_model(job.init, _natural_of(job), plan, out))
    retrain_cpu_s = time.process_time() - cpu  # a restored run's natural model trained again
    _quiet()
    pl.seed_everything(job.seed, workers=True, verbose=False)
    x, y = pool_split()
    idx = torch.tensor(_train_indices(job, plan))
    loader = DataLoader(TensorDataset(x[idx], y[idx]), batch_size=BATCH, shuffle=True)
    epochs = _epochs(job, plan)
    steps = epochs * (plan.limit_batches or len(loader))
    module = _classifier(job, steps)
    trainer = quiet_trainer(max_epochs=epochs, limit_train_batches=plan.limit_batches)
    start = time.perf_counter()
    trainer.fit(module, train_dataloaders=loader)
    result = job.record()
    result["seconds"] = time.perf_counter() - start
    result["steps"] = steps
    loss = trainer.callback_metrics.get("train/loss_epoch")
    result["final_loss"] = float(loss) if loss is not None else math.nan
    ckpt = out / "ckpt" / f"{job.id}.ckpt"
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    partial = ckpt.with_name(f"{ckpt.name}.{os.getpid()}.part")  # two workers may retrain it
    trainer.save_checkpoint(partial)
    os.replace(partial, ckpt)
    result["ckpt"] = str(ckpt)
    result["retrain_cpu_s"] = retrain_cpu_s  # not this job's cost: `run_job` leaves it out
    module.model.eval()
    return module.model, result


# ---------------------------------------------------------------------------- evaluation
def attack_settings(plan: Plan, explainers: tuple[str, ...], kind: str, n: int) -> Any:
    """The RAR preset (attack k 200, reported k 100, L_inf 0.3, zero IG baseline) sized by kind:
    "cv" (top-k only, few steps), "test" (the leaderboard attack and random signs), "rar" (the
    full preset: 100 steps of 0.01, 3 restarts, IG 10 points)."""
    from robust_train.evaluation import PROTOCOLS

    rar = dataclasses.replace(
        PROTOCOLS["rar"], n_samples=max(1, n), explainers=explainers, parts=("fragility",)
    )
    # the "map = input" reference: attacked once per model (saliency group, full preset)
    rar = dataclasses.replace(rar, input_reference=kind == "rar" or explainers == ("saliency",))
    if kind == "rar":
        return dataclasses.replace(
            rar, n_steps=plan.rar_steps, n_restarts=plan.rar_restarts, ig_steps=plan.ig_steps
        )
    steps, ig = (
        (plan.cv_steps, plan.cv_ig_steps) if kind == "cv" else (plan.test_steps, plan.ig_steps)
    )
    return dataclasses.replace(
        rar,
        n_steps=steps,
        step_size=0.3 * 2.5 / steps,
        n_restarts=1,
        ig_steps=ig,
        attacks=("topk",) if kind == "cv" else ("random_sign", "topk"),
        input_reference=rar.input_reference and kind != "cv",
        fidelity_steps=plan.fidelity_steps,  # of Grad-CAM's fidelity beside its attack
    )


def _measures(model: Any, x: Any, y: Any, settings: Any, masks: Any = None) -> dict[str, Any]:
    """The means of the evaluation (accuracy left out: the caller measures it on the whole
    split) and `per_image`: key -> each image's value (None: not measured), for the report's
    same-image columns; with `masks` (the ground truth of data that has it) the localisation
    of the clean and attacked maps too (the report's localisation columns)."""
    from robust_train.evaluation import evaluate_classifier
    from robust_train.evaluation.measures import measure_of

    if len(x) == 0:
        return {}
    r = evaluate_classifier(model, x, y, settings, progress=False, masks=masks)
    out: dict[str, Any] = {
        k: float(v)
        for k, v in r["measures"].items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "accuracy"
    }
    out["per_image"] = {
        k: [v if math.isfinite(v) else None for v in values]
        for k, values in r["per_image"].items()
        if k != "accuracy" and measure_of(k).reduce == "mean"
    }
    return out


def score_heldout(model: Any, job: Job, plan: Plan) -> dict[str, Any]:
    """A CV fold model on its held-out fold: per-image correctness, and the val top-k attack on
    saliency, IG and the method's target explainer (first correctly classified images)."""
    import torch

    from robust_train.core.runtime import predict

    x, y = pool_split()
    held = torch.tensor(cv_folds(k=plan.cv_folds)[job.fold or 0])
    correct = predict(model, x[held], 256) == y[held]
    keep = held[correct][: plan.cv_attack_images]
    explainers = tuple(
        dict.fromkeys(("saliency", "integrated_gradients", METHODS[job.method].target))
    )
    m = _measures(model, x[keep], y[keep], attack_settings(plan, explainers, "cv", len(keep)))
    out: dict[str, Any] = {"correct": correct.int().tolist(), "n_attacked": len(keep)}
    for ex in explainers:
        out[f"{SHORT[ex]}/topk"] = m.get(f"attack/{ex}/topk/topk_intersection", math.nan)
    return out


GROUPS = (*EXPLAINERS, "fidelity", "faithfulness", "rar")


def evaluate_test(job: Job, plan: Plan, out: str) -> dict[str, Any]:
    """One eval group of a trained model on the test split (first correctly classified)."""
    from robust_train.core.runtime import predict
    from robust_train.evaluation import PROTOCOLS
    from robust_train.models import load_classifier

    _quiet()
    x, y = test_split()
    cpu = time.process_time()
    model = load_classifier(ensure_model(job.ckpt, _fit_of(job), plan, Path(out)))
    retrain_cpu_s = time.process_time() - cpu  # a restored run's model trained again: not eval
    correct = (predict(model, x, 256) == y).nonzero().squeeze(1)
    out: dict[str, Any] = {"accuracy": float(len(correct) / len(y))}
    if job.group == "rar":
        keep = correct[(job.chunk or 0) * plan.rar_chunk :][: plan.rar_chunk]
        settings = attack_settings(plan, ("saliency", "integrated_gradients"), "rar", len(keep))
    elif job.group in EXPLAINERS:
        keep = correct[: plan.test_images]
        settings = attack_settings(plan, (job.group,), "test", len(keep))
    else:
        keep = correct[: plan.test_images]
        parts = ("fidelity", "lipschitz") if job.group == "fidelity" else ("faithfulness",)
        settings = dataclasses.replace(
            PROTOCOLS["rar"], n_samples=max(1, len(keep)), parts=parts,
            explainers=("saliency", "integrated_gradients"), ig_steps=plan.ig_steps,
            lipschitz_samples=plan.lipschitz_samples, fidelity_steps=plan.fidelity_steps,
        )  # fmt: skip
    out.update(_measures(model, x[keep], y[keep], settings))
    out["n_images"] = len(keep)
    out["indices"] = keep.tolist()  # test-split index of each per-image value
    out["retrain_cpu_s"] = retrain_cpu_s
    return out


def step_profile(names: list[str], plan: Plan, n_steps: int = 8) -> dict[str, float]:
    """Milliseconds per training step (batch 64, one thread, one process, one method after the
    other) of every method at its paper value: the cost measure (the grid's weights do not change
    a step's work)."""
    import statistics

    import torch

    from robust_train import RobustClassifier
    from robust_train.models import MNISTConvNet
    from robust_train.regularizers import get_penalty

    _quiet()
    x, y = pool_split()
    n_steps = 3 if plan.limit_batches else n_steps
    out = {}
    for name in names:
        m = METHODS[name]
        torch.manual_seed(0)
        at_paper = Job("profile", name, name, value=m.paper_value)
        terms = [get_penalty(m.penalty, seed=0, **at_paper.kwargs())] if m.penalty else []
        module = RobustClassifier(
            MNISTConvNet(**MODEL), terms, softplus_beta=at_paper.softplus_beta()
        )
        opt = torch.optim.Adam(module.parameters(), lr=LR)
        times = []
        for i in range(n_steps + 2):
            xb, yb = x[i * BATCH : (i + 1) * BATCH], y[i * BATCH : (i + 1) * BATCH]
            start = time.perf_counter()
            loss = module.training_step((xb, yb), i)
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - start)
        out[name] = 1000 * statistics.median(times[2:])
    return out


def run_job(job: Job, plan: Plan, out: str) -> RunResult:
    """Run one job in a worker (one thread) and return its result."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cpu = time.process_time()
    start = time.perf_counter()
    if job.kind in ("cv", "fit"):
        model, result = train(job, plan, Path(out))
        if job.kind == "cv":
            result["cv"] = score_heldout(model, job, plan)
    elif job.kind == "eval":
        result = job.record()
        result["test"] = evaluate_test(job, plan, out)
    elif job.kind == "profile":
        result = job.record()
        result["step_ms"] = step_profile(list(job.names), plan)
    else:
        raise ValueError(f"unknown job kind {job.kind!r}")
    result["wall_s"] = time.perf_counter() - start  # type: ignore[typeddict-unknown-key]
    test: dict[str, Any] = result.get("test", {})  # type: ignore[assignment]
    retrain = result.get("retrain_cpu_s", 0.0) + test.get("retrain_cpu_s", 0.0)
    result["cpu_s"] = time.process_time() - cpu - retrain  # type: ignore[typeddict-unknown-key]
    return result


# ------------------------------------------------------------------------- command line
def parser() -> argparse.ArgumentParser:
    """The command line of the leaderboard (a run, or --report)."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    p.add_argument("--methods", nargs="*", default=None, help="subset of METHODS")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--budget-min", type=float, default=60.0,
        help="no new job starts after this many minutes (the report then says partial)",
    )  # fmt: skip
    p.add_argument("--out", default=str(ROOT / "runs" / "leaderboard_v3"))
    p.add_argument(
        "--md", default=None,
        help="markdown output folder (default: experiments/ for the full run, --out for --quick)",
    )  # fmt: skip
    p.add_argument("--select-only", action="store_true", help="stop after the CV selection")
    p.add_argument(
        "--report", default=None, metavar="RUN_DIR",
        help="only rewrite the report from RUN_DIR (its results.json and jobs/)",
    )  # fmt: skip
    p.add_argument(
        "--export", default=None, metavar="JSONL",
        help="only write the job results of --out to one JSON-lines file (what is committed: "
        "experiments/results/leaderboard/<run>.jsonl.gz), checkpoints not included",
    )  # fmt: skip
    p.add_argument(
        "--restore", default=None, metavar="JSONL",
        help="before running, write the job results of an --export file into --out/jobs (those "
        "not already there): the run goes on where the exported one stopped; trainings whose "
        "checkpoints are not on this machine run again",
    )  # fmt: skip
    return p


def export_jobs(out: Path, path: Path) -> int:
    """Write every job result of the run folder `out` to `path`, one JSON object a line."""
    files = sorted((out / "jobs").glob("*.json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, "".join(json.dumps(json.loads(f.read_text())) + "\n" for f in files))
    return len(files)


def restore_jobs(path: Path, out: Path) -> int:
    """Write the job results of an `export_jobs` file into `out`/jobs, keeping those there."""
    jobs = out / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    written = 0
    for line in read_text(path).splitlines():
        result = json.loads(line)
        target = jobs / f"{result['id']}.json"
        if not target.is_file():
            target.write_text(json.dumps(result))
            written += 1
    return written


def results_from_jobs(path: Path, methods: list[str], out: Path) -> dict[str, Any]:
    """The results of a run rebuilt from its exported job results (`--export`): the jobs are
    restored into `out` and the run is replayed with no time for new jobs, so nothing trains."""
    restore_jobs(path, out)
    plan = Plan()
    sched = Scheduler(run_job, plan, out, 1, 0.0)
    results = Leaderboard(methods, plan, out, sched).run()
    results["quick"] = False
    return json.loads(json.dumps(results, default=str))  # as results.json holds them


def committed_results(out: Path) -> dict[str, Any]:
    """The results of the run the page shows, from the committed files page.json names (its job
    results replayed in the folder `out`, and the random map's measured levels under "chance",
    `experiments.leaderboard_chance`)."""
    from experiments.pages import RESULTS

    meta = json.loads((RESULTS / "leaderboard" / "page.json").read_text())
    results = results_from_jobs(RESULTS / "leaderboard" / meta["jobs"], meta["methods"], out)
    results["out"] = meta["out"]
    if meta.get("chance"):
        results["chance"] = json.loads((RESULTS / "leaderboard" / meta["chance"]).read_text())
    return results


def write_page(page: str = "LEADERBOARD.md") -> Path:
    """experiments/LEADERBOARD.md and its plots (docs/images/) from the committed job results
    (experiments/results/leaderboard/page.json names the file, methods and run folder) and the
    page's prose (experiments/prose/<page>)."""
    import tempfile

    from experiments.leaderboard_ensemble_report import page_lines
    from experiments.leaderboard_report import write_report
    from experiments.pages import IMAGES, PROSE, RESULTS, read_prose

    with tempfile.TemporaryDirectory() as tmp:
        results = committed_results(Path(tmp))
    prose = read_prose(PROSE / page)
    ensemble = page_lines(RESULTS / "leaderboard")
    return write_report(
        results, ROOT / "experiments", images=IMAGES, prose=prose, ensemble=ensemble
    )


def main(argv: list[str] | None = None) -> int:
    from experiments.leaderboard_report import write_report

    args = parser().parse_args(argv)
    if args.report:
        results = json.loads((Path(args.report) / "results.json").read_text())
        write_report(results, Path(args.md) if args.md else ROOT / "experiments")
        return 0
    if args.export:
        n = export_jobs(Path(args.out), Path(args.export))
        print(f"{n} job results -> {args.export}")
        return 0
    if args.workers < 1:
        raise SystemExit(f"--workers must be >= 1, got {args.workers}")
    try:
        names = available(args.methods)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    plan = quick_plan() if args.quick else Plan()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.restore and not Path(args.restore).is_file():
        raise SystemExit(f"--restore: no such file {args.restore!r}")
    if args.restore:
        print(f"{restore_jobs(Path(args.restore), out)} job results restored into {out}/jobs")
    md = Path(args.md) if args.md else (out if args.quick else ROOT / "experiments")
    sched = Scheduler(run_job, plan, out, args.workers, args.budget_min * 60)
    board = Leaderboard(names, plan, out, sched, select_only=args.select_only)
    results = board.run()
    results["quick"] = args.quick
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    write_report(results, md)
    print(f"leaderboard in {results['wall_seconds']:.0f} s -> {md}", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
