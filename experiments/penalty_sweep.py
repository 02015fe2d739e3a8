"""Which penalty makes digits saliency maps most robust, at what accuracy and training cost?

Trains the digits configs (and weight variants) with the same seed and epochs, then runs the
top-k and random-sign attacks (eps 0.1, k 8, 50 steps) on the saliency maps of the first 200
test images, and the Lipschitz estimate. Adds the table to experiments/PENALTY_SWEEP.md
(its prose and results files).

    .venv/bin/python -m experiments.penalty_sweep [--epochs 20] [--threads 1] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "baseline": ("digits_baseline", []),
    "smoothness w=1": ("digits_smoothness", []),
    "smoothness w=3": ("digits_smoothness", ["--model.penalties.init_args.weight=3.0"]),
    "curvature w=0.001": ("digits_curvature", ["--model.penalties.init_args.weight=0.001"]),
    "curvature w=0.01": ("digits_curvature", ["--model.penalties.init_args.weight=0.01"]),
    "curvature w=0.1": ("digits_curvature", ["--model.penalties.init_args.weight=0.1"]),
    "gradnorm w=1": ("digits_gradnorm", []),
    "softplus b=10": ("digits_softplus", []),
}


def run(name: str, config: str, extra: list[str], epochs: int, out: Path) -> dict[str, float]:
    from robust_train.app.checkpoint_io import heldout_tensors
    from robust_train.app.lightning_cli import lightning_main
    from robust_train.evaluation import EvaluationSettings, evaluate_classifier
    from robust_train.models import load_classifier

    args = [
        "--config",
        str(ROOT / "configs" / f"{config}.yaml"),
        *extra,
        f"--trainer.max_epochs={epochs}",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--checkpoint_root",
        str(out),
        "--experiment",
        name.replace(" ", "_").replace("=", ""),
    ]
    cli = lightning_main(args, run=False)
    start = time.perf_counter()
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    seconds = time.perf_counter() - start
    best = cli.trainer.checkpoint_callback.best_model_path
    model = load_classifier(best)
    meta = torch.load(best, map_location="cpu", weights_only=False)["robust_train"]
    x, y, acc = heldout_tensors(meta["datamodule"], 400, model=model)
    settings = EvaluationSettings(
        n_samples=200,
        attacks=("random_sign", "topk"),
        explainers=("saliency",),
        lipschitz_samples=16,
        fidelity_steps=10,
        ensemble=False,  # the page's protocol: one attack (see its prose)
    )
    r = evaluate_classifier(model, x, y, settings, progress=False)
    return {
        "test acc": acc,
        "topk: top-k": r["attacks"]["topk"]["topk_intersection"],
        "topk: Spearman": r["attacks"]["topk"]["spearman"],
        "random: top-k": r["attacks"]["random_sign"]["topk_intersection"],
        "Lipschitz": r["lipschitz"]["saliency"]["mean"],
        "fidelity": r["fidelity"]["saliency"]["estimate"]["mean"],
        "train s": seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", nargs="+", default=None)
    parser.add_argument("--out", default="runs/penalty_sweep")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = {}
    for name, (config, extra) in VARIANTS.items():
        if args.only and name not in args.only:
            continue
        rows[name] = run(name, config, extra, args.epochs, Path(args.out))
        print(name, {k: round(v, 4) for k, v in rows[name].items()}, flush=True)
    cols = list(next(iter(rows.values())))
    lines = [
        f"## {datetime.datetime.now():%Y-%m-%d %H:%M}: "
        f"penalty sweep on digits ({args.epochs} epochs)",
        "",
        f"Command: `.venv/bin/python -m experiments.penalty_sweep {' '.join(argv or [])}`  ",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch "
        f"{torch.__version__}, {args.threads} thread(s), load average {os.getloadavg()[0]:.1f}",
        "",
        "| variant | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    lines += [
        f"| {n} | "
        + " | ".join(f"{r[c]:.3f}" if c != "train s" else f"{r[c]:.0f}" for c in cols)
        + " |"
        for n, r in rows.items()
    ]
    text = "\n".join(lines) + "\n\n"
    print(text)
    from experiments.pages import page_text, store_page

    store_page("PENALTY_SWEEP.md", page_text("PENALTY_SWEEP.md") + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(__import__("sys").argv[1:]))
