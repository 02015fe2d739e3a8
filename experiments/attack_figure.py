"""The README's figure: one top-k attack on the saliency maps of a natural and a robust model.

For each model (a row) and each of a few test images: the clean saliency map, and the map of the
attacked input (an L_inf change of at most `--epsilon` that keeps the predicted label), with the
share of the clean top-k pixels the attacked map keeps. Both models are attacked on the same
images with the same settings (`robust_train.attacks.fragility_attack`, the top-k objective).

    python -m experiments.attack_figure                       # the shipped MNIST-5k pair
    python -m experiments.attack_figure --natural a.ckpt --robust b.ckpt --out fig.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from robust_train.attacks import fragility_attack  # noqa: E402
from robust_train.data import MNIST5kDataModule  # noqa: E402
from robust_train.models import load_classifier  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "docs" / "images" / "attack_natural_vs_robust.png"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--natural", default="mnist5k_baseline", help="checkpoint or shipped name")
    parser.add_argument("--robust", default="mnist5k_robust", help="checkpoint or shipped name")
    parser.add_argument("--images", type=int, nargs="+", default=[0, 1, 2], help="test indices")
    parser.add_argument("--epsilon", type=float, default=0.3)
    parser.add_argument("--n-steps", type=int, default=50)
    parser.add_argument("--step-size", type=float, default=0.01)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--out", type=Path, default=OUT)
    return parser.parse_args(argv)


def attack(name: str, x: torch.Tensor, args: argparse.Namespace):
    model = load_classifier(name)
    with torch.no_grad():
        target = model(x).argmax(1)
    return fragility_attack(
        model, x, target, explainer="saliency", objective="topk", epsilon=args.epsilon,
        n_steps=args.n_steps, step_size=args.step_size, k=args.k, seed=0,
    )  # fmt: skip


def draw(results: dict[str, object], args: argparse.Namespace) -> None:
    n = len(args.images)
    fig, axes = plt.subplots(2, 2 * n, figsize=(2.0 * 2 * n, 4.6), squeeze=False)
    for row, (label, result) in enumerate(results.items()):
        for i in range(n):
            kept = float(result.topk_intersection[i])  # type: ignore[attr-defined]
            for j, (maps, title) in enumerate(
                ((result.clean_map, "clean map"), (result.attacked_map, f"attacked: {kept:.2f}"))  # type: ignore[attr-defined]
            ):
                ax = axes[row, 2 * i + j]
                ax.imshow(maps[i].detach().numpy(), cmap="hot")
                ax.set_xticks([])
                ax.set_yticks([])
                ax.set_title(title, fontsize=9)
                if 2 * i + j == 0:
                    ax.set_ylabel(label, fontsize=10)
    fig.suptitle(
        f"saliency maps before and after a top-k attack (L_inf {args.epsilon}, same label): "
        f"share of the top-{args.k} pixels kept",
        fontsize=10,
    )
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    torch.manual_seed(0)
    data = MNIST5kDataModule(seed=0)
    data.setup("test")
    x = data.test_set.tensors[0][args.images]
    results = {
        f"natural\n({Path(args.natural).stem})": attack(args.natural, x, args),
        f"robust\n({Path(args.robust).stem})": attack(args.robust, x, args),
    }
    draw(results, args)


if __name__ == "__main__":
    main()
