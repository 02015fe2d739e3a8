"""The faithfulness correlation beside the fidelity estimate on the MNIST-5k pair (FAITHFULNESS.md).

`main` runs the page's two measurements: `robust-train compare` of the shipped pair with the
fidelity and faithfulness parts (the first table), then each choice the two measures differ in
(signed or |IG| maps, logit or probability, mean or zero fill), one at a time, on the same test
images (the second table). `--models` takes another pair (the page's prose names the robust model
its numbers were measured on). It prints what it measures; the page's tables are the results file
`experiments/results/faithfulness.json`, and `python -m experiments page faithfulness` writes
the page from it and its prose.
"""

from __future__ import annotations

import argparse
from pathlib import Path

PAIR = ("mnist5k_baseline", "mnist5k_robust")  # the shipped checkpoints


def compare_pair(models: list[str], n_images: int, out: Path) -> int:
    """The first table: `robust-train compare` on the pair, fidelity and faithfulness parts."""
    from robust_train.app.commands import compare_main

    return compare_main(
        [*models, "--parts", "fidelity", "faithfulness", "--explainers", "saliency",
         "integrated_gradients", "--n-samples", str(n_images), "--ig-steps", "10", "--no-wandb",
         "--out", str(out)]
    )  # fmt: skip


def variants(models: list[str], n_images: int) -> dict[str, dict[str, float]]:
    """The second table: each measure with one choice swapped, per model of the pair."""
    import torch
    from torch.utils.data import DataLoader

    from robust_train.core.resources import resolve_file
    from robust_train.data import MNIST5kDataModule
    from robust_train.explain import integrated_gradients
    from robust_train.metrics.functional import (
        faithfulness_correlation,
        fidelity_curves,
        fidelity_estimate,
    )
    from robust_train.models import load_classifier

    dm = MNIST5kDataModule(seed=0)
    dm.setup("test")
    x, _ = next(iter(DataLoader(dm.test_set, batch_size=n_images)))
    out: dict[str, dict[str, float]] = {}
    for name in models:
        model = load_classifier(resolve_file(name, "checkpoints", announce=None))
        with torch.no_grad():
            y = model(x).argmax(1)
        ig = integrated_gradients(model, x, y, n_steps=10).detach()
        signed, absolute = ig.sum(1), ig.abs().sum(1)
        row = out.setdefault(name, {})
        for label, maps, kw in [
            ("FC signed, logit", signed, {}),
            ("FC |IG|, logit", absolute, {}),
            ("FC signed, probability", signed, {"score": "probability"}),
            ("FC signed, logit, zero fill", signed, {"perturbation": "zero"}),
        ]:
            kw = {"perturbation": "mean", **kw}
            r = faithfulness_correlation(model, x, y, maps, seed=0, **kw)
            row[label] = float(r.nanmean())
        for label, maps in [("fidelity |IG| order", absolute), ("fidelity signed order", signed)]:
            curves = fidelity_curves(model, x, y, maps, perturbation="mean")
            row[label] = float(fidelity_estimate(curves).mean())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=200, help="first test images measured")
    parser.add_argument("--out", type=Path, default=Path("runs/experiments/faithfulness"))
    parser.add_argument("--models", nargs=2, default=list(PAIR), help="natural, robust checkpoint")
    parser.add_argument("--skip-compare", action="store_true", help="only the second table")
    args = parser.parse_args(argv)
    if not args.skip_compare:
        code = compare_pair(args.models, args.images, args.out)
        if code:
            return code
    for name, row in variants(args.models, args.images).items():
        for label, value in row.items():
            print(f"{name:<18} {label:<30} {value:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
