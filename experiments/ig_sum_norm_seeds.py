"""IG-SUM-NORM (Chen et al. 2019, RAR's headline method) at the paper's beta on three seeds.

The leaderboard's `ig_sum_norm` row trained at beta = 0.1 (RAR's MNIST value) without the
cross-validation step, seeds 0-2: each seed's fit on the 4,000-image pool (the leaderboard's
5 epochs, Adam 3e-3, inner attack epsilon warmed up over the first 64 steps), then the
leaderboard's test evaluation of integrated gradients and saliency (top-k attack, worst
direction per image, noise at the budget) on the first 200 correctly classified test images, and
test accuracy on all 1,000. The natural rows are the leaderboard's own natural jobs of the same
seeds (`--natural RUN_DIR`, a leaderboard run folder). Writes one JSON file per job to --out and
prints the table that experiments/LEADERBOARD.md's IG-SUM-NORM section quotes.

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.ig_sum_norm_seeds --out runs/ig_sum_norm \\
        --natural runs/leaderboard_v6
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from experiments.leaderboard import run_job
from experiments.leaderboard_methods import Job, Plan, quick_plan

BETA = 0.1  # RAR's MNIST beta
GROUPS = ("integrated_gradients", "saliency")
KEYS = {
    "IG top-k attack": "attack/integrated_gradients/topk/topk_intersection",
    "IG noise": "attack/integrated_gradients/random_sign/topk_intersection",
    "saliency top-k attack": "attack/saliency/topk/topk_intersection",
}


def jobs(seed: int, out: Path) -> list[Job]:
    """The fit of `seed` and its eval jobs (the eval jobs read the fit's checkpoint)."""
    fit = Job("fit", f"fit_ig_sum_norm_s{seed}", "ig_sum_norm", seed=seed, value=BETA)
    ckpt = str(out / "ckpt" / f"{fit.id}.ckpt")
    evals = [
        Job("eval", f"eval_{g}_ig_sum_norm_s{seed}", "ig_sum_norm", seed=seed, value=BETA,
            group=g, ckpt=ckpt)
        for g in GROUPS
    ]  # fmt: skip
    return [fit, *evals]


def run(seeds: list[int], out: Path, plan: Plan) -> None:
    (out / "jobs").mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        for job in jobs(seed, out):
            path = out / "jobs" / f"{job.id}.json"
            if path.is_file():
                continue
            result = run_job(job, plan, str(out))
            path.write_text(json.dumps(result))
            print(f"{job.id} done in {result['cpu_s']:.0f} CPU s", flush=True)


def _measure(folder: Path, job_id: str, key: str) -> float:
    path = folder / "jobs" / f"{job_id}.json"
    if not path.is_file():
        return math.nan
    test = json.loads(path.read_text()).get("test", {})
    return float(test.get(key, math.nan))


def table(seeds: list[int], out: Path, natural: Path | None) -> str:
    """Markdown rows: per seed, accuracy and the KEYS of IG-SUM-NORM and natural."""
    lines = ["| model | seed | test accuracy | " + " | ".join(KEYS) + " |",
             "|---|---|---|" + "---|" * len(KEYS)]  # fmt: skip
    for name, folder, method in (
        ("natural", natural, "natural"),
        ("IG-SUM-NORM", out, "ig_sum_norm"),
    ):
        if folder is None:
            continue
        for seed in seeds:
            acc = _measure(folder, f"eval_saliency_{method}_s{seed}", "accuracy")
            cells = [
                _measure(folder, f"eval_{k.split('/')[1]}_{method}_s{seed}", k)
                for k in KEYS.values()
            ]
            lines.append(
                f"| {name} | {seed} | {acc:.3f} | " + " | ".join(f"{c:.3f}" for c in cells) + " |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("runs/ig_sum_norm"))
    p.add_argument("--natural", type=Path, default=None, help="a leaderboard run folder")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    p.add_argument("--table-only", action="store_true")
    args = p.parse_args(argv)
    if not args.table_only:
        run(args.seeds, args.out, quick_plan() if args.quick else Plan())
    print(table(args.seeds, args.out, args.natural))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
