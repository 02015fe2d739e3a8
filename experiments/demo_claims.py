"""The demo over seeds: the ranges `robust-train demo` checks its claim against.

Runs `robust-train demo --seed S --out OUT/seed_S` at the demo's default settings for each seed
(its final evaluation is the `demo_ensemble` protocol, the reduced attack ensemble; a few CPU
minutes each), reads each run's results.json, and writes robust minus natural per map (the top-k
intersection under the attacks aimed at it, each image's worst) and the accuracy change as ranges
over the seeds, rounded outwards to 4 decimals so each seed lies inside, to the package data file
the demo reads (robust_train/assets/results/demo_claims.json), with the protocol's name.

    python -m experiments run demo_claims --seeds 0 1 2 3 4
    python -m experiments run demo_claims --seeds 0 1 2 3 4 --from-runs   # runs already there

A seed whose run folder already holds its results.json is read, not run again, so an interrupted
run resumes at the first unfinished seed (`--rerun` runs every seed again).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any


def ranges(per_seed: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Mean, and minimum and maximum rounded outwards to 4 decimals, of each key over the seeds.

    Raises:
        ValueError: no seed, or seeds with different keys.
    """
    if not per_seed or any(set(g) != set(per_seed[0]) for g in per_seed):
        raise ValueError(f"per_seed: expected seeds with the same keys, got {per_seed!r}")
    out = {}
    for key in per_seed[0]:
        values = [g[key] for g in per_seed]
        out[key] = {
            "mean": round(sum(values) / len(values), 4),
            "min": math.floor(min(values) * 1e4) / 1e4,
            "max": math.ceil(max(values) * 1e4) / 1e4,
        }
    return out


def claims(seeds: list[int], per_seed: list[dict[str, float]]) -> dict[str, Any]:
    """The claims file's content from each seed's `robust_train.app.demo.gain`."""
    from robust_train.app.demo import CLAIMS_FILE, PROTOCOL

    measured = ranges(per_seed)
    about = json.loads(CLAIMS_FILE.read_text())["about"]
    return {
        "about": about,
        "protocol": PROTOCOL,
        "seeds": list(seeds),
        "gains": {k: v for k, v in measured.items() if k != "accuracy"},
        "accuracy_change": measured["accuracy"],
    }


def main(argv: list[str] | None = None) -> int:
    from robust_train.app import demo

    parser = argparse.ArgumentParser(prog="python -m experiments run demo_claims")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, default=Path("runs/demo_claims"))
    parser.add_argument("--results", type=Path, default=demo.CLAIMS_FILE, help="file to write")
    parser.add_argument("--from-runs", action="store_true", help="read the runs, run nothing")
    parser.add_argument(
        "--rerun", action="store_true", help="run the seeds whose results.json is there again"
    )
    args = parser.parse_args(argv)
    per_seed = []
    for seed in args.seeds:
        out = args.out / f"seed_{seed}"
        done = (out / "results.json").is_file() and not args.rerun
        if not (args.from_runs or done):
            demo.main(["--seed", str(seed), "--out", str(out)])
        per_seed.append(demo.gain(json.loads((out / "results.json").read_text())))
    args.results.write_text(json.dumps(claims(args.seeds, per_seed), indent=1) + "\n")
    print(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
