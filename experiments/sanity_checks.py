"""Sanity checks of the shipped MNIST-5k pair, the "map = input" reference and LENS (SANITY.md).

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.sanity_checks [--images 64]

On the first `--images` test images of `MNIST5kDataModule` (the correctly classified ones for
the attacks) and each shipped checkpoint it prints:

1. the sanity part (`robust_train.evaluation.parts.sanity`, k 100): each map's top-100
   intersection and Spearman with the map of the same architecture with every layer
   re-initialised (cascading, seed 0) and with the input itself;
2. the reference "map = input" under the analytic corner of the L_inf 0.3 ball (its clean top-100
   lowered by 0.3, every other pixel raised by 0.3, clipped to [0, 1]; no label constraint, so
   the attack's figure is at least this) and under full-budget random signs (x + 0.3 s,
   clipped; the worst of 10 label-keeping draws and their mean), and the `fragility_attack`
   top-k attack on `input_reference` with the label kept (100 steps of 0.01, k 100, attack k
   200 as in RAR and 100 as the corner);
3. the top-k and LENS (3x3) intersections of the saliency and IG maps under the same top-k
   attack (1 restart, 100 steps), so the part of the drop that is one-pixel shifts shows.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

CHECKPOINTS = {
    "natural": "checkpoints/mnist5k_baseline.ckpt",
    "robust": "checkpoints/mnist5k_robust.ckpt",
}
EPS, K = 0.3, 100


def test_images(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    from robust_train.data import MNIST5kDataModule

    data = MNIST5kDataModule()
    data.setup("test")
    x, y = zip(*(data.test_dataloader().dataset[i] for i in range(n)), strict=True)
    return torch.stack(x), torch.as_tensor(y)


def sanity_rows(model: Any, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    from robust_train.evaluation import EvaluationSettings, evaluate_classifier

    settings = EvaluationSettings(
        parts=("sanity",), n_samples=len(x), measure_k=K, ig_steps=16, seed=0,
        explainers=("saliency", "input_x_gradient", "integrated_gradients", "lrp"),
    )  # fmt: skip
    return evaluate_classifier(model, x, y, settings, progress=False)["measures"]


def reference_rows(model: Any, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """ "map = input" under the analytic corner, full-budget signs and the top-k attack."""
    from robust_train.attacks import fragility_attack
    from robust_train.core.runtime import predict
    from robust_train.explain import importance_map
    from robust_train.explain.similarity import topk_intersection, topk_mask

    keep = predict(model, x, 256) == y
    x, y = x[keep], y[keep]
    clean = importance_map(x)
    top = topk_mask(clean, K)[:, None]
    corner = torch.where(top, x - EPS, x + EPS).clamp(0, 1)
    g = torch.Generator().manual_seed(0)
    draws = []
    for _ in range(10):
        signs = torch.randint(0, 2, x.shape, generator=g).float() * 2 - 1
        noisy = (x + EPS * signs).clamp(0, 1)
        kept = predict(model, noisy, 256) == y
        value = topk_intersection(clean, importance_map(noisy), K)
        draws.append(torch.where(kept, value, torch.nan))
    stacked = torch.stack(draws)
    attacks = {
        k: fragility_attack(
            model,
            x,
            y,
            explainer="input_reference",
            objective="topk",
            epsilon=EPS,
            n_steps=100,
            step_size=0.01,
            k=k,
            measure_k=K,
            seed=0,
        )  # fmt: skip
        for k in (200, 100)
    }
    return {
        "n": float(len(x)),
        "corner topk": float(topk_intersection(clean, importance_map(corner), K).mean()),
        "corner label kept": float((predict(model, corner, 256) == y).float().mean()),
        "signs worst of 10": float(_worst(stacked).nanmean()),
        "signs mean": float(stacked.nanmean()),
        **{
            f"attack (attack k {k}) {m}": float(getattr(a, f).nanmean())
            for k, a in attacks.items()
            for m, f in (("topk", "topk_intersection"), ("lens", "lens_topk"))
        },
    }


def _worst(draws: torch.Tensor) -> torch.Tensor:
    """Per image the lowest value over the label-keeping draws (NaN where none kept it)."""
    low = torch.where(draws.isnan(), torch.inf, draws).amin(0)
    return torch.where(low.isinf(), torch.nan, low)


def lens_rows(model: Any, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    from robust_train.attacks import fragility_attack
    from robust_train.core.runtime import predict
    from robust_train.explain import get_explainer

    keep = predict(model, x, 256) == y
    out = {}
    for name, explainer in (
        ("saliency", "saliency"),
        ("IG", get_explainer("integrated_gradients", n_steps=10, baseline=0.0)),
    ):
        result = fragility_attack(
            model, x[keep], y[keep], explainer=explainer, objective="topk", epsilon=EPS,
            n_steps=100, step_size=0.01, k=200, measure_k=K, seed=0,
        )  # fmt: skip
        out[f"{name} topk"] = float(result.topk_intersection.nanmean())
        out[f"{name} lens"] = float(result.lens_topk.nanmean())
    return out


def main(argv: list[str] | None = None) -> None:
    from robust_train.models import load_classifier

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--skip-lens", action="store_true", help="leave out section 3 (slow)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    x, y = test_images(args.images)
    for name, path in CHECKPOINTS.items():
        model = load_classifier(path)
        start = time.perf_counter()
        print(f"## {name} ({path}), {len(x)} test images")
        for key, value in sanity_rows(model, x, y).items():
            if key.startswith("sanity/"):
                print(f"{key}: {value:.3f}")
        for key, value in reference_rows(model, x, y).items():
            print(f"map = input, {key}: {value:.3f}")
        if not args.skip_lens:
            for key, value in lens_rows(model, x, y).items():
                print(f"top-k attack, {key}: {value:.3f}")
        print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
