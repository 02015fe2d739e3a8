"""Is a cluttered fine-tune's lost accuracy stale BatchNorm statistics? (CLUTTERED.md)

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python -m experiments run cluttered_batchnorm \\
        --model resnet18/e12_em_r8_mix_evalmode_self15_e4_s0=PATH.ckpt --out runs/cluttered

For each checkpoint (`ARCH/KIND=PATH`, as `experiments.cluttered eval`): its test accuracy on
the first `--images` test images of `ClutteredMNIST5kDataModule(image_size=64)` as stored, and
again with every BatchNorm's running statistics replaced by their exact average over the 3,500
training images in batches of `BATCH` (`robust_train.callbacks.recalibrate_batchnorm`; weights
unchanged), the mean |log| ratio of the stored to the recomputed running variances, and the
accuracy of its natural model (`experiments.cluttered.natural_of`, read from `--out`/jobs). A
checkpoint's result goes to `--out`/batchnorm/<arch>_<kind>.json and is skipped when present;
`experiments.cluttered table` puts them on the page.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from experiments.cluttered import natural_of, pending_models, per_model_arguments, test_data

BATCH = 64  # the fits' batch size


def accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """Top-1 accuracy of `model` in eval mode on (`x`, `y`), in batches of 250."""
    model.eval()
    with torch.no_grad():
        pairs = zip(x.split(250), y.split(250), strict=True)
        hits = sum(int((model(a).argmax(1) == b).sum()) for a, b in pairs)
    return hits / len(y)


def recalibrated(model: nn.Module, train: Tensor, x: Tensor, y: Tensor) -> dict[str, float]:
    """`model`'s accuracy on (`x`, `y`) before and after its BatchNorm statistics are recomputed
    on `train` (in batches of `BATCH`), and the mean over layers of the mean |log| ratio of the
    stored to the recomputed running variances. `model` keeps the recomputed statistics.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
        >>> train = torch.randn(128, 2)
        >>> out = recalibrated(net, train, train[:8], torch.zeros(8, dtype=torch.long))
        >>> round(out["bn_log_var_gap"], 2) > 0  # the stored statistics were the initial ones
        True
    """
    from robust_train.callbacks import recalibrate_batchnorm
    from robust_train.callbacks.batchnorm import batchnorm_layers

    before = accuracy(model, x, y)
    layers = batchnorm_layers(model)
    stored = [layer.running_var.clone() for layer in layers]  # type: ignore[union-attr]
    recalibrate_batchnorm(model, train.split(BATCH))
    gaps = [
        float((var / layer.running_var).log().abs().mean())  # type: ignore[operator]
        for var, layer in zip(stored, layers, strict=True)
    ]
    return {
        "accuracy": before,
        "accuracy_recomputed_bn": accuracy(model, x, y),
        "bn_log_var_gap": sum(gaps) / len(gaps),
    }


def natural_accuracy(label: str, jobs: Path) -> tuple[str | None, float | None]:
    """The natural model `label` is compared with among the results under `jobs`, and its
    accuracy; (None, None) when none is there."""
    results = [json.loads(p.read_text()) for p in sorted(jobs.glob("*.json"))]
    by_label = {r["label"]: r for r in results if "natural" in r["label"]}
    natural = natural_of(label, by_label)
    return natural, None if natural is None else by_label[natural]["accuracy"]


def run(args: argparse.Namespace) -> None:
    from robust_train.data import ClutteredMNIST5kDataModule
    from robust_train.models import load_classifier

    torch.set_num_threads(1)
    folder = Path(args.out) / "batchnorm"
    folder.mkdir(parents=True, exist_ok=True)
    x, y, _ = test_data(args.images)
    data = ClutteredMNIST5kDataModule(image_size=64, seed=0)
    data.setup("fit")
    train = torch.stack([data.train_set[i][0] for i in range(len(data.train_set))])
    for label, path, target in pending_models(args.model, folder):
        natural, natural_acc = natural_accuracy(label, Path(args.out) / "jobs")
        result: dict[str, Any] = {"label": label, "checkpoint": path, "natural": natural}
        result["natural_accuracy"] = natural_acc
        result.update(recalibrated(load_classifier(path), train, x, y))
        result["train_images"] = len(train)
        target.write_text(json.dumps(result, indent=1) + "\n")
        print(label, json.dumps(result), flush=True)


def main(argv: list[str] | None = None) -> None:
    run(per_model_arguments(argv, __doc__.splitlines()[0], images=1000))


if __name__ == "__main__":
    main()
