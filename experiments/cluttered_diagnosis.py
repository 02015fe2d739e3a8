"""Why a fine-tuned ResNet-18's Grad-CAM loses its fidelity on cluttered MNIST-5k (CLUTTERED.md).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python -m experiments run cluttered_diagnosis \\
        --model resnet18/natural_s0=PATH.ckpt --model resnet18/every_map_s0=PATH.ckpt \\
        --out runs/cluttered

For each checkpoint (`ARCH/KIND=PATH`, as `experiments.cluttered eval`), on the first `--images`
test images of `ClutteredMNIST5kDataModule(image_size=64)` and its 1,000 test images:

- the BatchNorm question: the test accuracy in eval mode (running statistics) and with each
  BatchNorm's statistics recomputed on 512 clean training images; the mean |log| ratio of the
  running variances to those recomputed ones (how far the penalty's forwards of perturbed points
  moved them); the cosine between each image's Grad-CAM map in eval mode and in training mode
  (batch statistics of 12 images, the penalised sub-batch's size);
- the map question: Grad-CAM's fidelity (AUC_LIF - AUC_MIF, 10 steps) at `backbone.layer2`,
  `layer3` and `layer4` (ResNet) or the default layer, its relevance mass on the digit's mask,
  and its peak-to-mean ratio (a flat map's is 1); saliency's fidelity beside.

A checkpoint's result goes to `--out`/diagnosis/<arch>_<kind>.json and is skipped when present;
`experiments.cluttered table` puts them on the page.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from experiments.cluttered import pending_models, per_model_arguments, test_data

LAYERS = {"resnet18": ("backbone.layer2", "backbone.layer3", "backbone.layer4")}
BATCH = 12  # the penalised sub-batch: 0.2 of 64


def recomputed_statistics(model: nn.Module, images: Tensor) -> nn.Module:
    """A copy of `model` whose BatchNorms hold the statistics of `images` (cumulative)."""
    out = copy.deepcopy(model)
    norms = [m for m in out.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for bn in norms:
        bn.reset_running_stats()
        bn.momentum = None
    out.train()
    with torch.no_grad():
        for i in range(0, len(images), 64):
            out(images[i : i + 64])
    return out.eval()


def batchnorm_numbers(model: nn.Module, x: Tensor, y: Tensor) -> dict[str, float]:
    from robust_train.core.runtime import predict
    from robust_train.data import ClutteredMNIST5kDataModule

    data = ClutteredMNIST5kDataModule(image_size=64, seed=0)
    data.setup("fit")
    train = torch.stack([data.train_set[i][0] for i in range(512)])
    fresh = recomputed_statistics(model, train)
    pairs = [
        (a, b)
        for a, b in zip(model.modules(), fresh.modules(), strict=True)
        if isinstance(a, nn.modules.batchnorm._BatchNorm)
    ]
    gap = [float((a.running_var / b.running_var).log().abs().mean()) for a, b in pairs]
    return {
        "accuracy": float((predict(model, x, 256) == y).float().mean()),
        "accuracy_recomputed_bn": float((predict(fresh, x, 256) == y).float().mean()),
        "bn_log_var_gap": sum(gap) / len(gap) if gap else math.nan,
    }


def map_numbers(model: nn.Module, arch: str, x: Tensor, y: Tensor, m: Tensor) -> dict[str, float]:
    from robust_train.metrics.functional import fidelity_curves, fidelity_estimate
    from robust_train.regularizers.multi_map import gradient_family_maps

    def fidelity(maps: Tensor) -> float:
        curves = fidelity_curves(model, x, y, maps, n_steps=10, seed=0)
        return float(fidelity_estimate(curves).mean())

    out: dict[str, float] = {}
    layers = LAYERS.get(arch, (None,))
    for layer in layers:
        maps = gradient_family_maps(model, x, y, ["saliency", "grad_cam"], layer=layer)
        key = "grad_cam" if layer is None else f"grad_cam@{layer.split('.')[-1]}"
        out[f"fidelity/{key}"] = fidelity(maps["grad_cam"])
        if layer == layers[0]:
            flat, mask = maps["grad_cam"].flatten(1), m.flatten(1).float()
            mass = (flat * mask).sum(1) / flat.sum(1).clamp_min(1e-12)
            peak = flat.amax(1) / flat.mean(1).clamp_min(1e-12)
            out["relevance_mass/grad_cam"] = float(mass.mean())
            out["peak_to_mean/grad_cam"] = float(peak.median())
            out["fidelity/saliency"] = fidelity(maps["saliency"])
            batch_maps = copy.deepcopy(model).train()
            in_train = torch.cat([
                gradient_family_maps(batch_maps, x[i : i + BATCH], y[i : i + BATCH],
                                     ["grad_cam"], layer=layer)["grad_cam"]
                for i in range(0, len(x), BATCH)
            ])  # fmt: skip
            cosine = nn.functional.cosine_similarity(flat, in_train.flatten(1), dim=1)
            out["cosine_eval_vs_batch/grad_cam"] = float(cosine.mean())
    return out


def run(args: argparse.Namespace) -> None:
    from robust_train.models import load_classifier

    torch.set_num_threads(1)
    folder = Path(args.out) / "diagnosis"
    folder.mkdir(parents=True, exist_ok=True)
    x, y, m = test_data()
    n = args.images
    for label, path, target in pending_models(args.model, folder):
        model = load_classifier(path)
        result: dict[str, Any] = {"label": label, "checkpoint": path, "images": n}
        result.update(batchnorm_numbers(model, x, y))
        result.update(map_numbers(model, label.split("/")[0], x[:n], y[:n], m[:n]))
        target.write_text(json.dumps(result, indent=1))
        print(label, json.dumps(result), flush=True)


def main(argv: list[str] | None = None) -> None:
    run(per_model_arguments(argv, __doc__.splitlines()[0], images=48))


if __name__ == "__main__":
    main()
