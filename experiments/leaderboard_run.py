"""The leaderboard's scheduling: a process pool that runs jobs most urgent first and skips the
ones a previous run finished (RUN_DIR/jobs/<id>.json), and `Leaderboard`, which queues the
jobs as their inputs appear: CV folds, the selection, the seeds' fits, the test evaluations.

The worker function is passed in (`leaderboard.run_job`), so this module does not import
`leaderboard.py`. Selection (`Leaderboard._maybe_choose`) reads CV records only.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from experiments.leaderboard_methods import (
    EXPLAINERS,
    METHODS,
    Job,
    Plan,
    Results,
    RunResult,
    choose,
    cv_summary,
    eligible,
    paired_se,
    robustness,
)

Worker = Callable[[Job, Plan, str], RunResult]
# Eval groups and their priority for seed 0 / the other seeds (lower runs first); CV 0-1, fits
# 2 (seed 0) and 4, step profile 2.5, full-preset chunk 0 6.9 (after the cheap columns' three
# seeds, before fidelity), chunk c >= 1 7.5 + c. The attack columns of the
# cheaper explainers first, all three seeds of them before the IG column's seeds 1-2 (Grad-CAM
# and DeepLIFT cost about a saliency attack and 2x, LRP 2x, IG 9x), the faithfulness columns last.
EVAL_PRIORITY = {
    "saliency": (3, 5),
    "grad_cam": (5.5, 6.4),
    "deeplift": (5.6, 6.6),
    "integrated_gradients": (6, 8),
    "lrp": (6.2, 6.8),
    "fidelity": (7.0, 9.5),
    "faithfulness": (7.2, 9.6),
}


class Scheduler:
    """Runs jobs on a process pool (inline with one worker), most urgent first; a job whose
    result file exists for the same setting (`value`, and `Job.settings` where the result
    records them) is not run again, one stored for another setting is moved aside
    (<id>.json.stale, which export and the report do not read) and run; no job starts after
    the time budget."""

    def __init__(self, fn: Worker, plan: Plan, out: Path, workers: int, budget_s: float) -> None:
        self.fn, self.plan, self.out, self.workers = fn, plan, out, workers
        self.pool = ProcessPoolExecutor(workers) if workers > 1 else None
        self.budget_s = budget_s
        self.deadline = time.time() + budget_s
        self.queue: list[tuple[float, int, Job]] = []
        self.known: set[str] = set()
        self.skipped: list[str] = []
        self.failed: list[RunResult] = []
        self.reused = 0
        (out / "jobs").mkdir(parents=True, exist_ok=True)

    def add(self, job: Job, priority: float) -> None:
        if job.id in self.known:
            return
        self.known.add(job.id)
        self.queue.append((priority, len(self.known), job))
        self.queue.sort(key=lambda item: (item[0], item[1]))

    def _path(self, job: Job) -> Path:
        return self.out / "jobs" / f"{job.id}.json"

    def _finish(self, job: Job, call: Callable[[], RunResult]) -> RunResult:
        try:
            result = call()
        except Exception as err:  # a failed job is reported, the others go on
            print(f"job {job.id} failed: {err!r}", flush=True)
            result = {**job.record(), "failed": repr(err)}
            self.failed.append(result)
            return result
        result = {**result, "settings": job.settings()}
        self._path(job).write_text(json.dumps(result, default=str))
        return result

    def _start(self, job: Job, running: dict[Future[RunResult], Job], on_done: Any) -> None:
        path = self._path(job)
        stored = json.loads(path.read_text()) if path.is_file() else None
        why = None if stored is None else _stale(stored, job)
        if why is not None:
            # e.g. a fit kept from before the CV selection was re-run and chose another value
            stale = path.with_name(f"{job.id}.json.stale")
            path.replace(stale)
            print(f"{job.id}: {why}; moved to {stale.name}, running it again", flush=True)
            stored = None
        if stored is not None:
            self.reused += 1
            on_done(stored)
        elif time.time() > self.deadline:
            self.skipped.append(job.id)
        elif self.pool is None:
            on_done(self._finish(job, lambda: self.fn(job, self.plan, str(self.out))))
        else:
            running[self.pool.submit(self.fn, job, self.plan, str(self.out))] = job

    def run(self, on_done: Callable[[RunResult], None]) -> None:
        running: dict[Future[RunResult], Job] = {}
        while self.queue or running:
            while self.queue and len(running) < self.workers:
                _, _, job = self.queue.pop(0)
                self._start(job, running, on_done)
            if running:
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for future in done:
                    job = running.pop(future)
                    on_done(self._finish(job, future.result))
        if self.pool is not None:
            self.pool.shutdown()


def _stale(stored: RunResult, job: Job) -> str | None:
    """Why a stored result of `job` cannot be reused (None: it can). A result made for another
    swept value, or, where it records them (`Job.settings`), with other fixed options of the
    method or another version of the measures; a profile of other methods."""
    if stored.get("value") != job.value:
        return (
            f"the stored result is for {job.method} at {stored.get('value')}, "
            f"the job is at {job.value}"
        )
    if list(stored.get("names") or []) != list(job.names):
        return f"the stored result times {stored.get('names')}, the job times {list(job.names)}"
    recorded = stored.get("settings")
    if recorded is not None and recorded != job.settings():
        return f"the stored result was made with {recorded}, the job runs with {job.settings()}"
    return None


def _cv_id(name: str, value: float | None, fold: int) -> str:
    m = METHODS[name]
    return f"cv_{name}_f{fold}" if value is None else f"cv_{name}_{m.swept}{value:g}_f{fold}"


class Leaderboard:
    """Queues the run's jobs as their inputs appear and gathers the results (results.json is
    rewritten after every job, so a stopped run leaves what it measured)."""

    def __init__(
        self, names: list[str], plan: Plan, out: Path, sched: Scheduler, select_only: bool = False
    ) -> None:
        self.names, self.plan, self.out, self.sched = names, plan, out, sched
        self.select_only = select_only
        self.start = time.time()
        self.done: dict[str, RunResult] = {}
        self.chosen: dict[str, float | None] = {}
        self.summaries: dict[str, dict[float, dict[str, Any]]] = {}
        self.natural_cv: dict[str, Any] | None = None
        self.best: list[str] | None = None
        self.rank = {n: i / 100 for i, n in enumerate(names)}

    def run(self) -> Results:
        for f in range(self.plan.cv_folds):
            self.sched.add(Job("cv", _cv_id("natural", None, f), "natural", fold=f), 0)
        for name in self.names[1:]:
            if not METHODS[name].finetuned:
                self._add_cv(name, None)
        if not self.select_only:
            self._add_fits("natural")
            self.sched.add(Job("profile", "profile", "natural", names=tuple(self.names)), 2.5)
        self.sched.run(self._done)
        return self.results()

    def _add_cv(self, name: str, natural_fold: RunResult | None) -> None:
        """The CV jobs of `name` (a fine-tune: those of the fold of `natural_fold`)."""
        folds = [natural_fold["fold"]] if natural_fold else range(self.plan.cv_folds)
        for v in METHODS[name].values:
            for f in folds:
                init = natural_fold["ckpt"] if natural_fold else None
                job = Job("cv", _cv_id(name, v, f), name, value=v, fold=f, init=init)
                self.sched.add(job, 1 + self.rank[name])

    def _add_fits(self, name: str) -> None:
        """The seeds' fits of `name` at its chosen value (fine-tunes: once the seed's natural
        model is trained)."""
        m = METHODS[name]
        for s in self.plan.seeds:
            init = None
            if m.finetuned:
                natural = self.done.get(f"fit_natural_s{s}")
                if natural is None or "failed" in natural:
                    continue
                init = natural["ckpt"]
            v = self.chosen.get(name)
            job = Job("fit", f"fit_{name}_s{s}", name, seed=s, value=v, init=init)
            self.sched.add(job, (2 if s == self.plan.seeds[0] else 4) + self.rank[name])

    def _add_evals(self, fit: RunResult) -> None:
        from robust_train.evaluation.parts.base import PARTS

        s0 = fit["seed"] == self.plan.seeds[0]
        for group, (p0, p1) in EVAL_PRIORITY.items():
            if group == "faithfulness" and "faithfulness" not in PARTS:
                continue
            job = Job(
                "eval",
                f"eval_{group}_{fit['method']}_s{fit['seed']}",
                fit["method"],
                seed=fit["seed"],
                value=fit["value"],
                group=group,
                ckpt=fit["ckpt"],
            )
            self.sched.add(job, (p0 if s0 else p1) + self._eval_rank(fit["method"]))
        self._add_rar(fit)

    def _eval_rank(self, name: str) -> float:
        """Natural and the best methods' evaluations first within a priority level."""
        best = self.best or []
        if name == "natural":
            return 0.0
        if name in best:
            return (1 + best.index(name)) / 1000
        return 0.01 + self.rank[name]

    def _add_rar(self, fit: RunResult) -> None:
        """The full RAR preset in chunks, for natural and the best methods' first seed."""
        if self.best is None or fit["seed"] != self.plan.seeds[0]:
            return
        if fit["method"] not in ["natural", *self.best]:
            return
        for c in range(math.ceil(self.plan.rar_images / self.plan.rar_chunk)):
            job = Job(
                "eval",
                f"eval_rar_{fit['method']}_c{c}",
                fit["method"],
                seed=fit["seed"],
                value=fit["value"],
                group="rar",
                chunk=c,
                ckpt=fit["ckpt"],
            )
            self.sched.add(job, (6.9 if c == 0 else 7.5 + c) + self.rank[fit["method"]])

    def _done(self, r: RunResult) -> None:
        self.done[r["id"]] = r
        ok = "failed" not in r
        if ok and r["kind"] == "cv" and r["method"] == "natural":
            for name in self.names[1:]:
                if METHODS[name].finetuned:
                    self._add_cv(name, r)
        if ok and r["kind"] == "fit" and not self.select_only:
            self._add_evals(r)
            if r["method"] == "natural":
                for name in self.chosen:
                    if METHODS[name].finetuned:
                        self._add_fits(name)
        for name in self.names:
            if name not in self.chosen:
                self._maybe_choose(name)
        self._maybe_best()
        (self.out / "results.json").write_text(json.dumps(self.results(), indent=1, default=str))
        print(f"[{(time.time() - self.start) / 60:5.1f} min] {r['id']} done", flush=True)

    def _folds_of(self, name: str, value: float | None) -> list[RunResult] | None:
        """The CV records of one setting; None until every fold has finished (or failed)."""
        runs = [self.done.get(_cv_id(name, value, f)) for f in range(self.plan.cv_folds)]
        if any(r is None for r in runs):
            return None
        return [r for r in runs if r is not None]

    def _maybe_choose(self, name: str) -> None:
        """Once natural's and every setting's folds are in: the rule (CV records only)."""
        natural = self._folds_of("natural", None)
        if natural is None or any("failed" in r for r in natural):
            return
        self.natural_cv = cv_summary(natural)
        if name == "natural":
            self.chosen["natural"] = None
            return
        folds = {v: self._folds_of(name, v) for v in METHODS[name].values}
        if any(f is None for f in folds.values()):
            return
        summaries = {
            v: self._summary(f) for v, f in folds.items() if f and not any("failed" in r for r in f)
        }
        self.summaries[name] = summaries
        if summaries:
            self.chosen[name] = choose(summaries, self.natural_cv, METHODS[name].target)
            if not self.select_only:
                self._add_fits(name)

    def _summary(self, folds: list[RunResult]) -> dict[str, Any]:
        s = cv_summary(folds)
        nat = self.natural_cv or {}
        s["delta"] = s["accuracy"] - nat["accuracy"]
        s["se"] = paired_se(nat["correct"], s["correct"])
        return s

    def _maybe_best(self) -> None:
        """The best methods by CV saliency robustness (eligible chosen settings), once every
        method is chosen; queues the full RAR preset for their first seed."""
        pending = [n for n in self.names if n not in self.chosen and n not in self.summaries]
        if self.best is not None or pending or self.natural_cv is None:
            return
        scored = []
        for name, v in self.chosen.items():
            s = self.summaries.get(name, {}).get(v) if v is not None else None
            if s is not None and eligible(s, self.natural_cv):
                scored.append((robustness(s, "saliency"), name))
        self.best = [n for _, n in sorted(scored, reverse=True)[: self.plan.n_best]]
        for name in ["natural", *self.best]:
            fit = self.done.get(f"fit_{name}_s{self.plan.seeds[0]}")
            if fit is not None and "failed" not in fit:
                self._add_rar(fit)

    def results(self) -> Results:
        import dataclasses

        def slim(r: RunResult) -> dict[str, Any]:
            cv = {k: v for k, v in r.get("cv", {}).items() if k != "correct"}
            return {**r, **({"cv": cv} if "cv" in r else {})}

        summaries = {
            n: {f"{v:g}": {k: x for k, x in s.items() if k != "correct"} for v, s in d.items()}
            for n, d in self.summaries.items()
        }
        nat = {k: v for k, v in (self.natural_cv or {}).items() if k != "correct"}
        return {
            "names": self.names,
            "plan": dataclasses.asdict(self.plan),
            "methods": {n: METHODS[n].record() for n in self.names},
            "natural_cv": nat,
            "summaries": summaries,
            "chosen": self.chosen,
            "best": self.best,
            "jobs": [slim(r) for r in self.done.values()],
            "skipped": list(self.sched.skipped),
            "failed": [slim(r) for r in self.sched.failed],
            "reused": self.sched.reused,
            "wall_seconds": time.time() - self.start,
            "budget_min": self.sched.budget_s / 60,
            "out": str(self.out),
            "explainers": list(EXPLAINERS),
            "step_ms": self.done.get("profile", {}).get("step_ms"),
        }
