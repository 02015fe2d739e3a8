"""Where a Grad-CAM map's mass falls on cluttered MNIST-5k (CLUTTERED.md): on the digit, next
to it, or further away.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python -m experiments run cluttered_mass \\
        --model cnn/natural_s1=PATH.ckpt --model cnn/em_w3_r8_e16_s1=PATH.ckpt --out runs/cluttered

For each checkpoint (`ARCH/KIND=PATH`, as `experiments.cluttered eval`), on the test images the
model classifies correctly among the first `--images` of `ClutteredMNIST5kDataModule(
image_size=64)`: each clean Grad-CAM map (the page's layer, `experiments.cluttered`), normalised
to sum 1, split into its share on the digit's mask (the relevance mass accuracy), on a ring of
`RING` pixels around the mask (the mask dilated, less the mask) and on the rest of the image;
the share of its mass in its `TOP_K` highest pixels (how peaked it is); the share in pixels
below a tenth of its maximum (its floor); and the share on the mask of the map squared (the
target `MultiMapSmoothness(teacher_powers=[2])` holds a model to when this model is the
teacher). A checkpoint's result goes to `--out`/mass/<arch>_<kind>.json and is skipped when
present; `experiments.cluttered table` puts them on the page.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from experiments.cluttered import (
    explainers_for,
    pending_models,
    per_model_arguments,
    test_data,
)

RING = 4  # pixels around the mask: Grad-CAM's cells on the small CNN are 4 x 4 pixels
TOP_K = 512  # the page's k: an eighth of the 64 x 64 pixels
FLOOR = 0.1  # a pixel below this share of its map's maximum is the map's floor


def mass_regions(
    maps: Tensor, masks: Tensor, ring: int = RING, k: int = TOP_K
) -> dict[str, Tensor]:
    """Per map, the shares of its mass on `masks`, on a ring of `ring` pixels around them and
    elsewhere (they sum to 1), in its `k` highest pixels, and below `FLOOR` of its maximum; and
    the share of the squared map's mass on `masks`.

    Args:
        maps: non-negative maps (B, H, W).
        masks: boolean or 0/1 masks (B, H, W).
        ring: the ring's width in pixels (a square neighbourhood: the mask max-pooled).
        k: how many highest pixels make the map's top.

    Returns:
        {"mask", "ring", "far", "top_k", "floor", "squared"}: each a (B,) tensor of shares in
        [0, 1].

    Example:
        >>> maps, masks = torch.ones(1, 4, 4), torch.zeros(1, 4, 4, dtype=torch.bool)
        >>> maps[0, 0, 0], masks[0, 0, 0] = 2.0, True
        >>> shares = mass_regions(maps, masks, ring=1, k=2)
        >>> {key: round(float(v), 4) for key, v in shares.items() if key != "floor"}
        {'mask': 0.1176, 'ring': 0.1765, 'far': 0.7059, 'top_k': 0.1765, 'squared': 0.2105}
    """
    m = masks.float()
    near = F.max_pool2d(m[:, None], 2 * ring + 1, stride=1, padding=ring)[:, 0]
    flat = maps.flatten(1)
    p = flat / flat.sum(1, keepdim=True).clamp_min(1e-12)
    mask, band = m.flatten(1), (near - m).flatten(1)
    low = flat < FLOOR * flat.amax(1, keepdim=True)
    squared = flat.clamp_min(0) ** 2
    squared = squared / squared.sum(1, keepdim=True).clamp_min(1e-12)
    return {
        "mask": (p * mask).sum(1),
        "ring": (p * band).sum(1),
        "far": (p * (1 - near.flatten(1))).sum(1),
        "top_k": p.topk(min(k, p.shape[1]), dim=1).values.sum(1),
        "floor": (p * low).sum(1),
        "squared": (squared * mask).sum(1),
    }


def measure(label: str, path: str, images: int) -> dict[str, Any]:
    """One checkpoint's mean shares (`mass_regions`) over its correctly classified images."""
    from robust_train.explain import get_explainer
    from robust_train.explain.maps import importance_map
    from robust_train.models import load_classifier

    model = load_classifier(path).eval()
    x, y, m = test_data(images)
    with torch.no_grad():
        correct = model(x).argmax(1) == y
    (name,) = explainers_for(label.split("/")[0], ("grad_cam",))
    explain = get_explainer(name) if isinstance(name, str) else name
    maps = importance_map(explain(model, x[correct], y[correct])).detach()
    shares = mass_regions(maps, m[correct])
    out: dict[str, Any] = {"label": label, "checkpoint": path, "images": int(correct.sum())}
    out.update({key: float(value.mean()) for key, value in shares.items()})
    return out


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    folder = Path(args.out) / "mass"
    folder.mkdir(parents=True, exist_ok=True)
    for label, path, target in pending_models(args.model, folder):
        result = measure(label, path, args.images)
        target.write_text(json.dumps(result, indent=1))
        print(label, json.dumps(result), flush=True)


def main(argv: list[str] | None = None) -> None:
    run(per_model_arguments(argv, __doc__.splitlines()[0], images=40))


if __name__ == "__main__":
    main()
