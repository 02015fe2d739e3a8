"""What the every-map recipe's cheaper settings cost in robustness, on proxies that fit a CPU.

The image-folder recipe (configs/imagefolder_resnet18_every_map.yaml) is too slow to fine-tune at
224 x 224 on a CPU, so its levers (the share of each batch that carries the penalty, the ascent
steps) are compared on a proxy (`--proxy`):

- "mnist5k" (default): the shipped natural MNIST-5k model (checkpoints/mnist5k_baseline.ckpt)
  fine-tuned with the MNIST every-map recipe (configs/mnist5k_finetune_every_map.yaml: the same
  three maps and weights, radius 0.3, Adam, per-step cosine decay, batch 64, 2 epochs), measured
  under its budget (eps 0.3);
- "cluttered": a torchvision ResNet-18 (`TorchvisionClassifier`, random init, 10 classes) trained
  `--natural-epochs` on the cluttered MNIST-5k images (`--size`, RGB), then fine-tuned with the
  image-folder recipe's penalty and optimiser (radius 8/255), measured at eps 8/255.

Each variant changes only the lever's options from the recipe and starts from the same natural
model; a natural fine-tune (cross-entropy only) runs beside them. Measured on the first
`--images` test images: the accuracy on the whole test split, and the top-k intersection
(k = an eighth of the pixels) of the saliency, input x gradient and Grad-CAM maps under the
package's top-k attack (`evaluate_classifier`, one attack of `--attack-steps` steps of 2 eps /
steps, correctly classified images). Cost: the process CPU seconds of each fine-tune epoch (one
torch thread). Every model and result is a file under `--run-dir`; a rerun skips what is there.

    python -m experiments run every_map_levers --run-dir /tmp/levers
    python -m experiments run every_map_levers --quick --run-dir /tmp/levers_quick
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import yaml
from torch.utils.data import DataLoader

from experiments.cheaper_robustness import EpochClock
from experiments.support import quiet_trainer
from robust_train import RobustClassifier
from robust_train.core.resources import shipped_checkpoint
from robust_train.data import ClutteredMNIST5kDataModule, MNIST5kDataModule
from robust_train.evaluation import EvaluationSettings, evaluate_classifier
from robust_train.models import TorchvisionClassifier, load_classifier
from robust_train.regularizers import MultiMapSmoothness

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {
    "cluttered": ROOT / "configs" / "imagefolder_resnet18_every_map.yaml",
    "mnist5k": ROOT / "configs" / "mnist5k_finetune_every_map.yaml",
}
EXPLAINERS = ("saliency", "input_x_gradient", "grad_cam")

# name -> the penalty options changed from the recipe's (None: cross-entropy only); a fraction of
# 0.125 penalises batch / 8 images (4 of 32, 8 of 64), 0.09 three of 32 (6 of 64)
VARIANTS: dict[str, dict[str, Any] | None] = {
    "natural fine-tune": None,
    "recipe (batch_fraction 0.2, 1 ascent step)": {},
    "batch_fraction 0.125, 1 ascent step": {"batch_fraction": 0.125},
    "batch_fraction 0.125, 0 ascent steps": {"batch_fraction": 0.125, "n_ascent_steps": 0},
    "batch_fraction 0.09, 1 ascent step": {"batch_fraction": 0.09},
    "batch_fraction 0.2, 0 ascent steps": {"n_ascent_steps": 0},
}


def recipe(proxy: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The MultiMapSmoothness options and the optimiser's options of the proxy's config."""
    config = yaml.safe_load(CONFIGS[proxy].read_text())
    (term,) = [
        p for p in config["model"]["penalties"] if p["class_path"].endswith("MultiMapSmoothness")
    ]
    return dict(term["init_args"]), dict(config["model"]["optimizer"]["init_args"])


def train(
    model: torch.nn.Module, options: dict[str, Any] | None, loader: DataLoader, args: Any
) -> list[float]:
    """Train `model` in place (penalty options or None); the CPU seconds of each epoch."""
    penalty, optimiser = recipe(args.proxy)
    terms = [] if options is None else [MultiMapSmoothness(**{**penalty, **options})]
    if args.proxy == "mnist5k":  # Adam, cosine decay per step over the 2 epochs (110 steps)
        module = RobustClassifier(
            model, terms, optimizer=lambda p: torch.optim.Adam(p, **optimiser),
            lr_scheduler=lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=110),
            lr_scheduler_interval="step",
        )  # fmt: skip
    else:
        module = RobustClassifier(
            model, terms, optimizer=lambda p: torch.optim.AdamW(p, **optimiser)
        )
    clock = EpochClock()
    epochs = args.epochs if options is not None or args.fine_tune else args.natural_epochs
    trainer = quiet_trainer(max_epochs=epochs, max_steps=args.max_steps, callbacks=[clock])
    trainer.fit(module, train_dataloaders=loader)
    return clock.seconds


def measure(model: torch.nn.Module, test: tuple[torch.Tensor, torch.Tensor], args: Any) -> dict:
    """Test accuracy; each map's top-k intersection under the top-k attack at 8/255."""
    x, y = test
    model.eval()
    with torch.no_grad():
        accuracy = float((model(x).argmax(1) == y).float().mean())
    pixels = x.shape[-1] * x.shape[-2]
    epsilon = 0.3 if args.proxy == "mnist5k" else 8 / 255
    settings = EvaluationSettings(
        parts=("fragility",),
        attacks=("topk",),
        explainers=EXPLAINERS,
        n_samples=args.images,
        epsilon=epsilon,
        step_size=2 * epsilon / args.attack_steps,
        n_steps=args.attack_steps,
        k=pixels // 8,
        measure_k=pixels // 8,
        ensemble=False,
        input_reference=False,
    )
    result = evaluate_classifier(
        model, x[: args.images], y[: args.images], settings, progress=False
    )
    out: dict[str, Any] = {"accuracy": accuracy}
    for name in EXPLAINERS:
        key = f"attack/{name}/topk/topk_intersection"
        out[name] = {"topk": result["measures"][key], "ci": result["intervals"][key]}
    return out


def fresh_model(args: Any) -> torch.nn.Module:
    if args.proxy == "mnist5k":
        return load_classifier(shipped_checkpoint("mnist5k_baseline")).train()
    return TorchvisionClassifier("resnet18", num_classes=10, weights=None)


def natural_model(loader: DataLoader, run_dir: Path, args: Any) -> dict[str, Any]:
    """The natural model's state dict (trained once, then read from the run directory)."""
    if args.proxy == "mnist5k":
        return fresh_model(args).state_dict()
    path = run_dir / "natural.pt"
    if not path.exists():
        torch.manual_seed(0)
        model = TorchvisionClassifier("resnet18", num_classes=10, weights=None)
        args.fine_tune = False
        seconds = train(model, None, loader, args)
        torch.save(model.state_dict(), path)
        (run_dir / "natural.json").write_text(json.dumps({"seconds": seconds}) + "\n")
    return torch.load(path, weights_only=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", type=Path, required=True, help="models and results go here")
    parser.add_argument("--proxy", default="mnist5k", choices=sorted(CONFIGS))
    parser.add_argument("--size", type=int, default=64, help="cluttered: image side (>= 32)")
    parser.add_argument("--natural-epochs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2, help="fine-tune epochs per variant")
    parser.add_argument(
        "--fine-tune-steps", type=int, default=-1, help="at most this many steps per variant"
    )
    parser.add_argument("--images", type=int, default=200, help="test images attacked")
    parser.add_argument("--attack-steps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="smoke: 3 steps, 4 images")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    args.max_steps = 3 if args.quick else -1
    if args.quick:
        args.images, args.attack_steps = 4, 2
    torch.set_num_threads(args.threads)
    args.run_dir.mkdir(parents=True, exist_ok=True)
    if args.proxy == "mnist5k":
        data: Any = MNIST5kDataModule(batch_size=64, seed=0)
    else:
        data = ClutteredMNIST5kDataModule(image_size=args.size, batch_size=32, seed=0)
    data.setup("fit")
    data.setup("test")
    loader = data.train_dataloader()
    test = next(iter(DataLoader(data.test_set, batch_size=len(data.test_set))))
    start = natural_model(loader, args.run_dir, args)
    args.fine_tune = True
    if not args.quick:
        args.max_steps = args.fine_tune_steps
    for i, (name, options) in enumerate(VARIANTS.items()):
        path = args.run_dir / f"variant_{i}.json"
        if path.exists():
            print(f"{name}: {path.read_text().strip()}", flush=True)
            continue
        pl.seed_everything(0, verbose=False)
        model = fresh_model(args)
        model.load_state_dict(start)
        seconds = train(model, options, loader, args)
        row = {"name": name, "options": options, "seconds": seconds, **measure(model, test, args)}
        path.write_text(json.dumps(row) + "\n")
        print(f"{name}: {json.dumps(row)}", flush=True)
    print(table(args.run_dir))


def table(run_dir: Path) -> str:
    """The results under `run_dir` as a markdown table: per variant the fine-tune's CPU seconds
    per epoch (and relative to the natural fine-tune), accuracy, and each map's top-k
    intersection under attack (95% interval)."""
    rows = [json.loads(p.read_text()) for p in sorted(run_dir.glob("variant_*.json"))]
    natural = next((r for r in rows if r["options"] is None), None)
    unit = sum(natural["seconds"]) / len(natural["seconds"]) if natural else float("nan")
    lines = [
        "| variant | CPU s / epoch | vs natural | test accuracy | "
        + " | ".join(f"{e} top-k under attack" for e in EXPLAINERS)
        + " |",
        "|---|---|---|---|" + "---|" * len(EXPLAINERS),
    ]
    for r in rows:
        epoch = sum(r["seconds"]) / max(len(r["seconds"]), 1)
        cells = [
            f"{r[e]['topk']:.3f} ({r[e]['ci'][0]:.3f}-{r[e]['ci'][1]:.3f})" for e in EXPLAINERS
        ]
        lines.append(
            f"| {r['name']} | {epoch:.1f} | {epoch / unit:.2f}x | {r['accuracy']:.3f} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
