"""Why the VGG-BN learnt slowly on cluttered MNIST-5k (CLUTTERED.md): short natural fits of heads.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python -m experiments run cluttered_head \\
        --variant vgg_avg --variant vgg_max --variant cnn --variant vgg_avg_4stages \\
        --steps 250 --out runs/cluttered

Each variant (`VARIANTS`) is trained from seed 0 for `--steps` Adam steps at lr 1e-3 (no
schedule) on `ClutteredMNIST5kDataModule(image_size=64, rerender=True)`'s training images,
batch 64, one thread, without Lightning (a few minutes each, against the natural configs' whole
fits); then it classifies the first 500 validation images in eval mode (BatchNorm's running
statistics) and with the batch's statistics. The training loss is kept as the mean of each 25
steps (the curve), the first and last 50 steps. A result goes to `--out`/head/<variant>.json and
is skipped when present; `experiments.cluttered table` puts them on the page.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

THREE = [[16, 16], [32, 32], [64, 64]]
# variant -> (model name, keyword arguments): the half-width VGG-BN of the cluttered configs with
# each head, the same with a fourth stage (a 4 x 4 map, a wider receptive field), the small CNN
VGG = {"in_channels": 3, "input_size": 64, "hidden": 64, "mean": 0.43, "std": 0.32}
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "vgg_avg": ("vgg_bn", {**VGG, "stages": THREE, "global_pool": "avg"}),
    "vgg_max": ("vgg_bn", {**VGG, "stages": THREE, "global_pool": "max"}),
    "vgg_avg_4stages": ("vgg_bn", {**VGG, "stages": [*THREE, [128, 128]], "global_pool": "avg"}),
    "cnn": (
        "mnist_cnn",
        {
            "in_channels": 3,
            "input_size": 64,
            "channels": [16, 32],
            "hidden": 128,
            "mean": 0.43,
            "std": 0.32,
        },
    ),  # fmt: skip
}
CURVE_STEP = 25


def build(variant: str) -> nn.Module:
    """The model of `variant`, initialised from seed 0.

    Raises:
        ValueError: an unknown variant.
    """
    from robust_train.models import get_model

    if variant not in VARIANTS:
        raise ValueError(f"`variant` must be one of {sorted(VARIANTS)}, got {variant!r}")
    name, kwargs = VARIANTS[variant]
    torch.manual_seed(0)
    return get_model(name, **kwargs)


def mean_chunks(values: list[float], size: int) -> list[float]:
    """The means of consecutive chunks of `size` values (the last may be shorter).

    Examples:
        >>> mean_chunks([1.0, 3.0, 5.0, 7.0, 9.0], 2)
        [2.0, 6.0, 9.0]
    """
    return [
        sum(values[i : i + size]) / len(values[i : i + size]) for i in range(0, len(values), size)
    ]


def accuracy(model: nn.Module, x: Tensor, y: Tensor, *, train_mode: bool) -> float:
    """The accuracy on (x, y) with BatchNorm's running (eval mode) or the batch's statistics."""
    was = model.training
    model.train(train_mode)
    with torch.no_grad():
        out = float((model(x).argmax(1) == y).float().mean())
    model.train(was)
    return out


def short_fit(variant: str, steps: int) -> dict[str, Any]:
    """Train `variant` for `steps` steps (module docstring) and return its numbers."""
    from robust_train.data import ClutteredMNIST5kDataModule

    model = build(variant)
    data = ClutteredMNIST5kDataModule(image_size=64, batch_size=64, seed=0, rerender=True)
    data.setup()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses: list[float] = []
    hits: list[float] = []
    start = time.process_time()
    while len(losses) < steps:
        for x, y in data.train_dataloader():
            model.train()
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
            hits.append(float((out.argmax(1) == y).float().mean()))
            if len(losses) >= steps:
                break
    cpu = time.process_time() - start
    vx = torch.stack([data.val_set[i][0] for i in range(500)])
    vy = torch.stack([data.val_set[i][1] for i in range(500)])
    return {
        "variant": variant,
        "steps": steps,
        "cpu_seconds": cpu,
        "loss_first50": sum(losses[:50]) / len(losses[:50]),
        "loss_last50": sum(losses[-50:]) / len(losses[-50:]),
        "train_accuracy_last50": sum(hits[-50:]) / len(hits[-50:]),
        "curve": mean_chunks(losses, CURVE_STEP),
        "val_accuracy_eval": accuracy(model, vx, vy, train_mode=False),
        "val_accuracy_batch_statistics": accuracy(model, vx, vy, train_mode=True),
    }


HEAD_COLUMNS = {
    "steps": "steps",
    "loss_first50": "loss, first 50 steps",
    "loss_last50": "loss, last 50 steps",
    "train_accuracy_last50": "train accuracy, last 50 steps",
    "val_accuracy_eval": "val accuracy (running BN statistics)",
    "val_accuracy_batch_statistics": "val accuracy (batch statistics)",
    "cpu_seconds": "CPU s",
}


def head_table(folder: Path) -> dict[str, Any]:
    """The page's table of the results under `folder`, one row per variant in `VARIANTS`' order,
    the loss curve (mean of every 25 steps) last."""

    def cell(key: str, value: float) -> str:
        return str(int(value)) if key in ("steps", "cpu_seconds") else f"{value:.3f}"

    results = {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}
    rows = [
        [v, *(cell(k, results[v][k]) for k in HEAD_COLUMNS),
         " ".join(f"{c:.2f}" for c in results[v]["curve"])]
        for v in VARIANTS
        if v in results
    ]  # fmt: skip
    columns = ["variant", *HEAD_COLUMNS.values(), f"loss curve (mean of each {CURVE_STEP} steps)"]
    return {"columns": columns, "align": "|---" * len(columns) + "|", "rows": rows}


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    folder = Path(args.out) / "head"
    folder.mkdir(parents=True, exist_ok=True)
    for variant in args.variant:
        target = folder / f"{variant}.json"
        if target.exists():
            print(f"{variant}: done ({target})")
            continue
        result = short_fit(variant, args.steps)
        target.write_text(json.dumps(result, indent=1))
        print(variant, json.dumps(result), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS), default=[])
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--out", default="runs/cluttered")
    args = parser.parse_args(argv)
    if not args.variant:
        parser.error("`--variant` is required")
    if args.steps < 1:
        parser.error(f"`--steps` must be at least 1, got {args.steps}")
    run(args)


if __name__ == "__main__":
    main()
