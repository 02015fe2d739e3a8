"""DeepLIFT (rescale rule) against Captum's `DeepLift` where Captum's per-module hooks
lose its own rules (experiments/MEASUREMENTS.md, section "DeepLIFT against Captum").

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.deeplift_captum

For each small network (random weights, seeds 0-2, 4 images of 16x16, a zero and a random
baseline): the largest |ours - Captum| over the largest |ours| (relative difference), and each
one's completeness gap |sum of attributions - (f_t(x) - f_t(x0))| (Captum's
`return_convergence_delta`), absolute and over |f_t(x) - f_t(x0)|.
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from robust_train.explain import deeplift


def _head(channels: int, side: int) -> list[nn.Module]:
    return [nn.Flatten(), nn.Linear(channels * side * side, 10)]


LAYOUTS: dict[str, Callable[[], nn.Module]] = {
    "conv, MaxPool2d, conv (reference: Captum's rules apply)": lambda: nn.Sequential(
        nn.Conv2d(1, 6, 3, padding=1), nn.MaxPool2d(2), nn.Conv2d(6, 6, 3, padding=1),
        nn.ReLU(), *_head(6, 8),
    ),
    "ReLU -> MaxPool2d": lambda: nn.Sequential(
        nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), *_head(6, 8),
    ),
    "MaxPool2d -> ReLU": lambda: nn.Sequential(
        nn.Conv2d(1, 6, 3, padding=1), nn.MaxPool2d(2), nn.ReLU(), *_head(6, 8),
    ),
    "ReLU -> ReLU": lambda: nn.Sequential(
        nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.ReLU(), *_head(6, 16),
    ),
    "ReLU -> Sigmoid": lambda: nn.Sequential(
        nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.Sigmoid(), *_head(6, 16),
    ),
}  # fmt: skip


def captum(model: nn.Module, x: torch.Tensor, t: torch.Tensor, base: torch.Tensor) -> Any:
    from captum.attr import DeepLift

    torch.use_deterministic_algorithms(False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DeepLift(model).attribute(x, baselines=base, target=t, return_convergence_delta=True)


def compare(model: nn.Module, x: torch.Tensor, base: torch.Tensor) -> dict[str, float]:
    t = model(x).argmax(1)
    ours = deeplift(model, x, t, baseline=base).detach()
    ref, delta = captum(model, x, t, base)
    gap = (model(x) - model(base)).gather(1, t[:, None]).squeeze(1).detach()
    own = (ours.sum(dim=(1, 2, 3)) - gap).abs()
    return {
        "relative_difference": float((ours - ref).abs().max() / ours.abs().max()),
        "captum_gap": float(delta.abs().max()),
        "captum_gap_relative": float((delta.abs() / gap.abs()).max()),
        "ours_gap": float(own.max()),
        "ours_gap_relative": float((own / gap.abs()).max()),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0]).parse_args(argv)
    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    for name, build in LAYOUTS.items():
        rows = []
        for seed in range(3):
            torch.manual_seed(seed)
            model = build().eval()
            x = torch.rand(4, 1, 16, 16)
            for base in (torch.zeros_like(x), torch.rand(4, 1, 16, 16)):
                rows.append(compare(model, x, base))
        out[name] = {k: [min(r[k] for r in rows), max(r[k] for r in rows)] for k in rows[0]}
        print(f"| {name} | " + " | ".join(f"{a:.2g}-{b:.2g}" for a, b in out[name].values()) + " |")
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
