"""Cheaper robustness: what the shipped fine-tune recipe costs and keeps when its penalty runs on
a fraction of each batch, on every k-th step, or for one epoch only.

Every variant fine-tunes the shipped natural model (checkpoints/mnist5k_baseline.ckpt) with the
recipe of configs/mnist5k_finetune_smoothness.yaml (penalty, optimiser, per-step cosine decay,
batch 64, seed 0), or with the penalty and learning rate of the shipped robust recipe
(configs/mnist5k_finetune_every_map.yaml) where a variant says so, through a real `Trainer.fit`, in
one process, one after the other; a natural fine-tune (cross-entropy only, same optimiser) runs
first and last, and its mean epoch time is the unit of cost. The clock is the process CPU time of
each training epoch (one torch thread; validation off), so other jobs on the shared machine do not
count. Robustness: the saliency top-100 intersection under a top-k attack (eps 0.3, 50 steps of
0.01, attack k 200, measured k 100, correctly classified images only, as in RAR) on the first
`--images` (200) test images, and the accuracy on the whole 1,000-image test split. Two
training seeds by default.

Run from the repository root:

    python -m experiments.cheaper_robustness            # about 10 min on one loaded core
    python -m experiments.cheaper_robustness --quick    # a smoke run: 12 steps, 4 images

`--variants` picks some of `VARIANTS` (among them the recipe shipped now,
configs/mnist5k_finetune_every_map.yaml, and its penalty on every second step); `--shipped` adds
a row for the shipped robust checkpoint itself, measured the same way.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import yaml
from torch.utils.data import DataLoader

from experiments.support import quiet_trainer
from robust_train import RobustClassifier
from robust_train.core.resources import shipped_checkpoint
from robust_train.data import MNIST5kDataModule
from robust_train.evaluation import EvaluationSettings, evaluate_classifier
from robust_train.models import load_classifier
from robust_train.regularizers import ExplanationSmoothness, MultiMapSmoothness

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "mnist5k_finetune_smoothness.yaml"
EVERY_MAP = ROOT / "configs" / "mnist5k_finetune_every_map.yaml"  # the shipped robust recipe
START = shipped_checkpoint("mnist5k_baseline")
NATURAL_EPOCHS = 6  # the shipped natural model's training (experiments/LEADERBOARD.md)
KEY = "attack/saliency/topk/topk_intersection"
# The chance levels the engine measures beside the attack on the same images: a random map's
# top-100 intersection with each clean map (no attack), "map = input" under the same attack, and
# the share of images whose saliency map keeps more of its top-100 than "map = input" does.
LEVELS = {
    "random": "fragility/saliency/random_topk",
    "input": "attack/input_reference/topk/topk_intersection",
    "beats_input": "attack/saliency/topk/beats_input",
}

# name -> (penalty options beyond the recipe's, or None for cross-entropy only; epochs); the
# option "softplus_beta" is the model's (every ReLU a Softplus(beta), kept when measured), not
# the penalty's. The next four are the leaderboard's chosen settings of its beta-smoothing rows
# and of finetune_smoothness (experiments/LEADERBOARD.md), timed here side by side; the last is
# the recipe shipped then (finetune_ixg_softplus) with its penalty on every second step. The
# option "recipe": "every_map" takes the penalty (`MultiMapSmoothness`) and the learning rate of
# the recipe shipped now (configs/mnist5k_finetune_every_map.yaml) instead.
VARIANTS: dict[str, tuple[dict[str, Any] | None, int]] = {
    "full (the recipe)": ({}, 2),
    "batch_fraction 0.5": ({"batch_fraction": 0.5}, 2),
    "batch_fraction 0.25": ({"batch_fraction": 0.25}, 2),
    "every_n_steps 2": ({"every_n_steps": 2}, 2),
    "every_n_steps 4": ({"every_n_steps": 4}, 2),
    "one epoch": ({}, 1),
    "finetune_smoothness (batch_fraction 0.25, weight 10)": (
        {"batch_fraction": 0.25, "weight": 10.0}, 2
    ),
    "beta_smoothing (Softplus(1), cross-entropy only)": ({"softplus_beta": 1.0, "weight": 0.0}, 2),
    "finetune_smoothness_softplus (Softplus(1), batch_fraction 0.25, weight 5)": (
        {"softplus_beta": 1.0, "batch_fraction": 0.25, "weight": 5.0}, 2
    ),
    "finetune_ixg_softplus (Softplus(2), input x gradient, batch_fraction 0.25, weight 20)": (
        {"softplus_beta": 2.0, "explainer": "input_x_gradient", "batch_fraction": 0.25,
         "weight": 20.0}, 2
    ),
    "ixg_softplus every 2nd step (the recipe shipped before every_map, every_n_steps 2)": (
        {"softplus_beta": 2.0, "explainer": "input_x_gradient", "batch_fraction": 0.25,
         "weight": 20.0, "every_n_steps": 2}, 2
    ),
    "every_map (the recipe shipped now)": ({"recipe": "every_map"}, 2),
    "every_map every 2nd step (every_n_steps 2)": ({"recipe": "every_map", "every_n_steps": 2}, 2),
    "every_map one epoch": ({"recipe": "every_map"}, 1),
}  # fmt: skip
SHIPPED = "mnist5k_robust.ckpt (the file shipped now, no fine-tune)"


class EpochClock(pl.Callback):
    """CPU seconds of every training epoch."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._start = 0.0

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.process_time()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.seconds.append(time.process_time() - self._start)


def recipe(path: Path = RECIPE) -> tuple[dict[str, Any], float]:
    """The penalty options and the learning rate of the fine-tune config at `path`."""
    config = yaml.safe_load(path.read_text())
    penalty = dict(config["model"]["penalties"][0]["init_args"])
    return penalty, float(config["model"]["optimizer"]["init_args"]["lr"])


def fine_tune(
    options: dict[str, Any] | None, epochs: int, loader: DataLoader, max_steps: int, seed: int
) -> tuple[torch.nn.Module, list[float]]:
    """Fine-tune a fresh copy of the natural model; the model and its epoch CPU times. The
    seed sets the batch order and the penalty's perturbations (the recipe's seed is 0)."""
    pl.seed_everything(seed, verbose=False)
    options = None if options is None else dict(options)
    every_map = options is not None and options.pop("recipe", None) == "every_map"
    penalty, lr = recipe(EVERY_MAP if every_map else RECIPE)
    model = load_classifier(START)
    penalty["seed"] = seed
    beta = None if options is None else options.pop("softplus_beta", None)
    terms: list[Any] = []
    if options is not None and options.get("weight", 1.0) > 0:
        term = MultiMapSmoothness if every_map else ExplanationSmoothness
        terms = [term(**{**penalty, **options})]
    steps = epochs * len(loader) if max_steps < 0 else min(max_steps, epochs * len(loader))
    module = RobustClassifier(
        model,
        terms,
        softplus_beta=beta,
        optimizer=lambda p: torch.optim.Adam(p, lr=lr),
        lr_scheduler=lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=steps),
        lr_scheduler_interval="step",
    )
    clock = EpochClock()
    trainer = quiet_trainer(max_epochs=epochs, max_steps=max_steps, callbacks=[clock])
    trainer.fit(module, train_dataloaders=loader)
    return module.model.eval(), clock.seconds


def measure(model: torch.nn.Module, test: tuple[torch.Tensor, torch.Tensor], n: int) -> dict:
    """Test accuracy, the saliency top-100 intersection under the top-k attack and its chance
    levels on the same images (`LEVELS`)."""
    x, y = test
    with torch.no_grad():
        accuracy = float((model(x).argmax(1) == y).float().mean())
    settings = EvaluationSettings(
        parts=("fragility",),
        attacks=("topk",),
        explainers=("saliency",),
        n_samples=n,
        epsilon=0.3,
        step_size=0.01,
        n_steps=50,
        k=200,
        measure_k=100,
        ensemble=False,  # the page's protocol: one attack (see its prose)
    )
    result = evaluate_classifier(model, x, y, settings, progress=False)
    return {
        "accuracy": accuracy,
        "topk": result["measures"][KEY],
        "ci": result["intervals"][KEY],
        "n": result["counts"][KEY],
        **{name: result["measures"][key] for name, key in LEVELS.items()},
    }


def table(rows: list[dict[str, Any]], natural_epoch: float) -> str:
    lines = [
        "| variant | seed | epochs | CPU s / epoch | epoch cost (natural epochs) | fine-tune cost "
        "(natural epochs) | recipe vs natural training | test accuracy | saliency top-100 "
        "under attack (95% CI) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        per_epoch = sum(r["seconds"]) / len(r["seconds"])
        total = sum(r["seconds"]) / natural_epoch
        whole = (NATURAL_EPOCHS + total) / NATURAL_EPOCHS
        lo, hi = r["ci"]
        lines.append(
            f"| {r['name']} | {r['seed']} | {len(r['seconds'])} | {per_epoch:.1f} | "
            f"{per_epoch / natural_epoch:.2f} | {total:.2f} | {whole:.2f}x | "
            f"{r['accuracy']:.3f} | {r['topk']:.3f} ({lo:.3f}-{hi:.3f}), n={r['n']} |"
        )
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]], natural_epoch: float) -> str:
    """Per variant, the mean over seeds (and the seeds' range) of cost, accuracy and top-100."""
    lines = [
        "| variant | seeds | fine-tune cost (natural epochs) | recipe vs natural training | "
        "test accuracy | saliency top-100 under attack (range over seeds) |" + LEVEL_HEAD,
        "|---|---|---|---|---|---|" + "---|" * len(LEVELS),
    ]
    for name in dict.fromkeys(r["name"] for r in rows):
        group = [r for r in rows if r["name"] == name]
        cost = sum(sum(r["seconds"]) for r in group) / len(group) / natural_epoch
        accuracy = sum(r["accuracy"] for r in group) / len(group)
        topk = [r["topk"] for r in group]
        lines.append(
            f"| {name} | {len(group)} | {cost:.2f} | "
            f"{(NATURAL_EPOCHS + cost) / NATURAL_EPOCHS:.2f}x | {accuracy:.3f} | "
            f"{sum(topk) / len(topk):.3f} ({min(topk):.3f}-{max(topk):.3f}) |" + _levels(group)
        )
    return "\n".join(lines)


LEVEL_HEAD = (
    " random map top-100 ∩ (no attack) | map = input top-100 under the same attack |"
    " share of images saliency keeps more than map = input |"
)


def _levels(group: list[dict[str, Any]]) -> str:
    """The `LEVELS` cells of a summary row: each the mean over the group's runs."""
    means = [sum(r[name] for r in group) / len(group) for name in LEVELS]
    return "".join(f" {m:.3f} |" for m in means)


def shipped_row(images: int, test: tuple[torch.Tensor, torch.Tensor]) -> str:
    """The summary table's row of the shipped robust checkpoint itself, measured as the variants
    are (no fine-tune, so no cost; its 95% interval over images in place of a seeds' range)."""
    r = measure(load_classifier(shipped_checkpoint("mnist5k_robust")), test, images)
    lo, hi = r["ci"]
    return (
        f"| {SHIPPED} | - | - | - | {r['accuracy']:.3f} | "
        f"{r['topk']:.3f} (95% CI {lo:.3f}-{hi:.3f}), n={r['n']} |" + _levels([r])
    )


def chosen(names: list[str] | None) -> list[tuple[str, tuple[dict[str, Any] | None, int]]]:
    """The VARIANTS named (a name or a unique prefix of one), in VARIANTS' order; all for None."""
    if names is None:
        return list(VARIANTS.items())
    keep = set()
    for name in names:
        hits = [v for v in VARIANTS if v == name] or [v for v in VARIANTS if v.startswith(name)]
        if len(hits) != 1:
            raise SystemExit(
                f"--variants: {name!r} matches {len(hits)} of {list(VARIANTS)}; give one of them"
            )
        keep.add(hits[0])
    return [(v, VARIANTS[v]) for v in VARIANTS if v in keep]


def store_summary(path: Path, key: str) -> Path:
    """The first table of a file `--out` wrote (the summary) into results/cheaper.json as table
    `key` (replacing one of that name), and CHEAPER.md written from its prose. Returns the page.

    Raises:
        ValueError: the file holds no markdown table.
    """
    import json

    from experiments.pages import RESULTS, tables_page

    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    if start is None:
        raise ValueError(f"no table in {str(path)!r}")
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    block = lines[start:end]
    table = {"columns": block[0][2:-2].split(" | "), "align": block[1],
             "rows": [row[2:-2].split(" | ") for row in block[2:]]}  # fmt: skip
    results = RESULTS / "cheaper.json"
    data = json.loads(results.read_text())
    data["tables"][key] = table
    results.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return tables_page("CHEAPER.md")


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m experiments.cheaper_robustness``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=200, help="test images attacked")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 12 steps, 4 images, one seed"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="training seeds")
    parser.add_argument(
        "--variants", nargs="+", default=None, metavar="NAME",
        help="only these VARIANTS (names, or unique prefixes of them); default all",
    )  # fmt: skip
    parser.add_argument(
        "--shipped", action="store_true",
        help="also measure the shipped robust checkpoint itself (a row of the summary)",
    )  # fmt: skip
    parser.add_argument(
        "--store", nargs=2, default=None, metavar=("FILE", "KEY"),
        help="no run: the summary table of FILE (an --out file) into CHEAPER.md as table KEY",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="write the table to this file")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.store is not None:
        if not Path(args.store[0]).is_file():
            parser.error(f"--store {args.store[0]!r}: no such file")
        print(store_summary(Path(args.store[0]), args.store[1]))
        return
    torch.set_num_threads(args.threads)
    images, max_steps = (4, 12) if args.quick else (args.images, -1)
    if args.quick:
        args.seeds = args.seeds[:1]
    data = MNIST5kDataModule(batch_size=64, seed=0)
    data.setup("fit")
    data.setup("test")
    loader = data.train_dataloader()
    test = next(iter(DataLoader(data.test_set, batch_size=len(data.test_set))))
    started = time.perf_counter()
    natural_runs: list[list[float]] = []
    rows = []
    plan = [("natural", (None, 2)), *chosen(args.variants), ("natural", (None, 2))]
    for seed in args.seeds:
        for i, (name, (options, epochs)) in enumerate(plan):
            model, seconds = fine_tune(options, epochs, loader, max_steps, seed)
            if name == "natural":
                natural_runs.append(seconds)
                if i:  # the natural run at the end: timing only
                    continue
            rows.append({"name": name, "seed": seed, "seconds": seconds})
            rows[-1].update(measure(model, test, images))
            print(f"seed {seed} {name}: {rows[-1]}", flush=True)
    natural = [s for run in natural_runs for s in run]
    unit = sum(natural) / len(natural)
    head = summary(rows, unit) + (f"\n{shipped_row(images, test)}" if args.shipped else "")
    text = head + "\n\nPer run:\n\n" + table(rows, unit)
    per_run = ", ".join(f"{sum(r) / len(r):.2f}" for r in natural_runs)
    note = (
        f"Natural epoch: {unit:.2f} CPU s (mean epoch of each natural run, in order: {per_run}); "
        f"whole benchmark {time.perf_counter() - started:.0f} s wall."
    )
    print(text, note, sep="\n")
    if args.out is not None:
        args.out.write_text(text + "\n\n" + note + "\n")


if __name__ == "__main__":
    main()
