"""The random-map chance levels beside the leaderboard's cheap-protocol table, measured.

The cheap protocol's table (experiments/LEADERBOARD.md, from the job results page.json names)
prints a top-k and a LENS intersection under attack per map. A uniformly random map's top-k
level is the expectation k/N whatever the model (`experiments.chance`), but its LENS level
depends on each clean map (the share of the image within one pixel of its top-k set), so it has
to be measured on the models of the table. This module measures both, per image, on the images
of each stored map job: the model of the job is loaded from a leaderboard run folder (`--lb`,
its `ckpt/fit_<method>_s<seed>.ckpt`, trained there when missing, as every leaderboard study
does) and checked to be the one measured (its correctly classified test images begin with the
job's images and its test accuracy is the job's); the engine then runs the job's own settings
(`experiments.leaderboard.attack_settings`, "test") with the noise attack alone, whose clean maps
and seeded random maps are those of the attack run (an attack never changes them).

The levels go to experiments/results/leaderboard/chance_<jobs file stem>.json (per job id: the
images, `fragility/<map>/random_topk` and `random_lens` per image), which page.json names under
"chance"; `python -m experiments page leaderboard` then prints the measured LENS levels in the
table's random-map row.

    OMP_NUM_THREADS=1 nice -n 10 python -m experiments.leaderboard_chance --lb runs/leaderboard/lb
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import math
from pathlib import Path
from typing import Any

from experiments.pages import RESULTS

FOLDER = RESULTS / "leaderboard"
KEYS = ("fragility/{m}/random_topk", "fragility/{m}/random_lens")


def map_jobs(path: Path) -> list[dict[str, Any]]:
    """The stored eval jobs of one map each (the table's attack columns) of a job file."""
    from experiments.leaderboard_methods import EXPLAINERS

    with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as f:
        jobs = [json.loads(line) for line in f if line.strip()]
    return [j for j in jobs if j["kind"] == "eval" and j.get("group") in EXPLAINERS and "test" in j]


def is_the_jobs_model(correct: list[int], n_test: int, test: dict[str, Any]) -> bool:
    """Whether a model whose correctly classified test images are `correct` (of `n_test`) can
    be the one a stored job measured: the job's images are its first correct ones (the
    leaderboard's rule) and its test accuracy is the job's.

    Example:
        >>> is_the_jobs_model([0, 2, 3], 4, {"indices": [0, 2], "accuracy": 0.75})
        True
        >>> is_the_jobs_model([0, 1, 3], 4, {"indices": [0, 2], "accuracy": 0.75})
        False
    """
    first = correct[: len(test["indices"])] == list(test["indices"])
    return first and math.isclose(len(correct) / n_test, test["accuracy"])


def job_levels(job: dict[str, Any], lb_dir: Path) -> dict[str, Any]:
    """The random-map levels of one stored map job, on its images, by its settings.

    Raises:
        SystemExit: the run folder's model of the job is not the model the job measured.
    """
    from experiments.leaderboard import _quiet, attack_settings, test_split
    from experiments.leaderboard_ensemble import model_path, noise_only_per_image
    from experiments.leaderboard_methods import Plan
    from robust_train.core.runtime import predict
    from robust_train.models import load_classifier

    test, group = job["test"], job["group"]
    ckpt = model_path(job["method"], job["seed"], job["value"], lb_dir)
    model = load_classifier(ckpt)
    _quiet()
    x, y = test_split()
    correct = (predict(model, x, 256) == y).nonzero().squeeze(1).tolist()
    if not is_the_jobs_model(correct, len(y), test):
        raise SystemExit(f"--lb {lb_dir}: {ckpt} is not the model {job['id']} measured")
    idx = test["indices"]
    settings = dataclasses.replace(
        attack_settings(Plan(), (group,), "test", len(idx)), input_reference=False
    )
    per_image = noise_only_per_image(model, x, y, idx, settings)
    out: dict[str, Any] = {"indices": idx}
    for key in (k.format(m=group) for k in KEYS):
        out[key] = [round(v, 6) if math.isfinite(v) else None for v in per_image[key]]
    return out


def measure(jobs_file: Path, lb_dir: Path, target: Path) -> list[str]:
    """`job_levels` of every map job of `jobs_file` that `target` does not hold yet, written to
    `target` after each job (a stopped run resumes); the ids measured."""
    stored = json.loads(target.read_text()) if target.is_file() else {}
    stored.setdefault("jobs_file", jobs_file.name)
    levels = stored.setdefault("levels", {})
    done = []
    for job in map_jobs(jobs_file):
        if job["id"] in levels:
            continue
        levels[job["id"]] = job_levels(job, lb_dir)
        target.write_text(json.dumps(stored) + "\n")
        done.append(job["id"])
        print(f"{job['id']}: measured", flush=True)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.leaderboard_chance", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--lb", required=True, help="the leaderboard run folder of the models")
    parser.add_argument(
        "--jobs", default=None, help="the job file (default: the one page.json names)"
    )
    args = parser.parse_args(argv)
    meta = json.loads((FOLDER / "page.json").read_text())
    jobs_file = Path(args.jobs) if args.jobs else FOLDER / meta["jobs"]
    if not jobs_file.is_file():
        raise SystemExit(f"--jobs {str(jobs_file)!r}: no such file")
    if not Path(args.lb).is_dir():
        raise SystemExit(f"--lb {args.lb!r}: no such folder")
    target = FOLDER / f"chance_{jobs_file.name.split('.')[0]}.json"
    print(f"{len(measure(jobs_file, Path(args.lb), target))} jobs measured -> {target}")
    return 0


if __name__ == "__main__":
    import os
    import sys

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
