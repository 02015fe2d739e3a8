"""Grad-CAM and DeepLIFT on MNIST-5k: the surrogate decision, fine-tuning for them, carry-over.

Three parts, each printing a markdown table and writing JSON under --out (numbers and commands
are recorded in benchmarks/NEW_EXPLAINERS.md):

- `surrogate`: on the shipped natural model (checkpoints/mnist5k_baseline.ckpt), the direct
  top-k attack on each new map (L_inf 0.3, 50 sign steps of 0.01, k = 100, measured at k = 100,
  first 200 correctly classified test images) with its direction taken on the model itself and
  on the softplus_10 surrogate (`smooth_relus`), beside random signs of the same budget. Decides
  `piecewise_constant` in each explainer's registration.
- `sweep --explainer NAME --weights W...`: fine-tune the natural model 2 epochs (Adam 2e-3,
  per-step cosine to 0, as configs/mnist5k_finetune_smoothness.yaml) with
  `ExplanationSmoothness(explainer=NAME, radius=0.3, distance="cosine")` at each weight; score
  each on the VAL split (accuracy on all 500, the direct attack on NAME on the first 100
  correctly classified); rule: the largest val robustness whose val accuracy is within 1 point
  of natural's. Also times a natural 6-epoch fit in the same process (CPU time) for the cost.
- `table --model LABEL=CKPT ...`: test accuracy (1,000 images) and the direct attack on each of
  saliency, grad_cam and deeplift (top-100 intersection, 200 correctly classified test images),
  random signs beside, for each model.

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.new_explainers_finetune surrogate
    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.new_explainers_finetune sweep \\
        --explainer grad_cam --weights 10 30 100 300
    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.new_explainers_finetune table \\
        --model natural=checkpoints/mnist5k_baseline.ckpt ...
    add --quick for a smoke run (seconds).
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]

BASELINE = ROOT / "checkpoints" / "mnist5k_baseline.ckpt"
MODEL = {"channels": [16, 32], "hidden": 128}
ATTACK = {"epsilon": 0.3, "step_size": 0.01, "n_steps": 50, "k": 100, "measure_k": 100}
EXPLAINERS = ("saliency", "grad_cam", "deeplift")
BATCH, FINETUNE_EPOCHS, NATURAL_EPOCHS, LR, FINETUNE_LR = 64, 2, 6, 3e-3, 2e-3


class Surrogate:
    """A registered explainer seen as an unregistered callable: the attack then declares it
    piecewise constant and takes its direction on the softplus surrogate."""

    def __init__(self, name: str) -> None:
        from robust_train.explain import get_explainer

        self.fn, self.__name__ = get_explainer(name), name

    def __call__(self, model: Any, x: Any, t: Any, *, create_graph: bool = False) -> Any:
        return self.fn(model, x, t, create_graph=create_graph)


def split(name: str) -> tuple[Any, Any]:
    from robust_train.data import MNIST5kDataModule

    dm = MNIST5kDataModule(seed=0)
    dm.setup()
    return {"val": dm.val_set, "test": dm.test_set}[name].tensors


def attack(model: Any, x: Any, y: Any, explainer: Any, n: int, **options: Any) -> dict[str, Any]:
    """The direct attack on the first `n` correctly classified images: per-image top-k
    intersection (NaN where the attack could not be measured: a constant clean map, or a zero
    direction at every step, e.g. a map with fewer than k non-zero pixels), and its mean."""
    from robust_train._runtime import predict

    keep = (predict(model, x, 256) == y).nonzero().squeeze(1)[:n]
    start = time.process_time()
    r = _attack(model, x[keep], y[keep], explainer, ATTACK | options)
    values = r.topk_intersection.where(r.measured, torch.nan)
    return {
        "topk": float(values.nanmean()),
        "per_image": values.tolist(),
        "n": int(r.measured.sum()),
        "n_images": len(keep),
        "label_kept": float(r.label_kept.float().mean()),
        "cpu_s": time.process_time() - start,
    }


def common_mean(results: list[dict[str, Any]]) -> list[float]:
    """Each result's mean over the images every one of them measured (same images), and the
    number of those images last."""
    values = torch.tensor([r["per_image"] for r in results])
    both = torch.isfinite(values).all(0)
    return [float(v[both].mean()) for v in values] + [int(both.sum())]


def _attack(model: Any, x: Any, y: Any, explainer: Any, settings: dict[str, Any]) -> Any:
    from robust_train.attacks import fragility_attack

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fragility_attack(model, x, y, explainer=explainer, seed=0, **settings)


def surrogate(args: argparse.Namespace) -> dict[str, Any]:
    from robust_train.models import load_classifier

    model, (x, y) = load_classifier(BASELINE), split("test")
    rows = {}
    for name in ("grad_cam", "deeplift"):
        rows[name] = {
            "model itself": attack(model, x, y, name, args.images, surrogate_beta=None),
            "softplus_10 surrogate": attack(model, x, y, Surrogate(name), args.images),
            "random signs": attack(model, x, y, name, args.images, objective="random_sign"),
        }
    lines = [
        "| explainer | direction | top-100 ∩ (own measured images) | measured of attacked "
        "| top-100 ∩ (images all three measured) | CPU s |",
        "|---|---|---|---|---|---|",
    ]
    for name, by in rows.items():
        *common, n_common = common_mean(list(by.values()))
        for (how, r), mean in zip(by.items(), common, strict=True):
            lines.append(
                f"| {name} | {how} | {r['topk']:.3f} | {r['n']} of {r['n_images']} | "
                f"{mean:.3f} (n={n_common}) | {r['cpu_s']:.0f} |"
            )
    print("\n".join(lines))
    return rows


def finetune(
    explainer: str, weight: float, out: Path, quick: bool, detach_clean: bool = False
) -> tuple[Any, float, Path]:
    """Fine-tune the natural model; return (model, fit CPU seconds, checkpoint)."""
    from robust_train.regularizers import ExplanationSmoothness

    term = ExplanationSmoothness(
        weight=weight,
        explainer=explainer,
        radius=0.3,
        distance="cosine",
        seed=0,
        detach_clean=detach_clean,
    )
    name = f"{explainer}_w{weight:g}{'_detached' if detach_clean else ''}.ckpt"
    return fit([term], FINETUNE_EPOCHS, FINETUNE_LR, out / name, quick)


def fit(
    penalties: list[Any], epochs: int, lr: float, ckpt: Path, quick: bool,
    softplus_beta: float | None = None,
) -> Any:  # fmt: skip
    import pytorch_lightning as pl

    from robust_train import RobustClassifier
    from robust_train.data import MNIST5kDataModule
    from robust_train.models import MNISTConvNet

    pl.seed_everything(0, workers=True, verbose=False)
    limit = 2 if quick else None
    steps = epochs * (limit or math.ceil(3500 / BATCH))
    tune = bool(penalties) or softplus_beta is not None  # a fine-tune of the baseline
    module = RobustClassifier(
        MNISTConvNet(**MODEL),
        penalties,
        optimizer=lambda p: torch.optim.Adam(p, lr=lr),
        lr_scheduler=(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=steps))
        if tune
        else None,
        lr_scheduler_interval="step",
        init_checkpoint=str(BASELINE) if tune else None,
        softplus_beta=softplus_beta,
    )
    trainer = pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        limit_train_batches=limit,
    )
    start = time.process_time()
    trainer.fit(module, datamodule=MNIST5kDataModule(batch_size=BATCH, seed=0))
    seconds = time.process_time() - start
    trainer.save_checkpoint(ckpt)
    return module.model.eval(), seconds, ckpt


def accuracy(model: Any, x: Any, y: Any) -> float:
    from robust_train._runtime import predict

    return float((predict(model, x, 256) == y).float().mean())


def sweep(args: argparse.Namespace) -> dict[str, Any]:
    from robust_train.models import load_classifier

    x, y = split("val")
    natural = load_classifier(BASELINE)
    _, natural_s, _ = fit([], NATURAL_EPOCHS, LR, args.out / "natural.ckpt", args.quick)
    base = {"val_acc": accuracy(natural, x, y), "natural_fit_cpu_s": natural_s}
    base["val_attack"] = attack(natural, x, y, args.explainer, args.images)["topk"]
    runs = []
    for weight in args.weights:
        model, seconds, ckpt = finetune(
            args.explainer, weight, args.out, args.quick, args.detach_clean
        )
        r = {"weight": weight, "val_acc": accuracy(model, x, y), "fit_cpu_s": seconds}
        r["val_attack"] = attack(model, x, y, args.explainer, args.images)["topk"]
        r["ckpt"] = str(ckpt)
        runs.append(r)
        print(json.dumps(r), flush=True)
    ok = [r for r in runs if r["val_acc"] >= base["val_acc"] - 0.01 - 1e-9]
    chosen = max(ok, key=lambda r: r["val_attack"]) if ok else max(runs, key=lambda r: r["val_acc"])
    lines = [
        f"natural: val acc {base['val_acc']:.3f}, val top-100 ∩ {base['val_attack']:.3f}, "
        f"6-epoch fit {natural_s:.0f} CPU s"
    ]
    lines += ["| weight | val acc | val top-100 ∩ (attack) | fit CPU s | × natural fit | chosen |"]
    lines.append("|---|---|---|---|---|---|")
    for r in runs:
        mark = "**yes**" if r is chosen else ""
        lines.append(
            f"| {r['weight']:g} | {r['val_acc']:.3f} | {r['val_attack']:.3f} | "
            f"{r['fit_cpu_s']:.0f} | {r['fit_cpu_s'] / natural_s:.2f} | {mark} |"
        )
    print("\n".join(lines))
    return {"natural": base, "runs": runs, "chosen": chosen}


def attack_rows(
    specs: list[str], explainers: Any, images: int, attack_fn: Any = None, show: Any = None
) -> dict[str, Any]:
    """Per `label=checkpoint` spec: test accuracy and, per explainer, `attack_fn` (default this
    module's `attack`) directly and with random signs on the first `images` correctly classified
    test images; prints `show(row)` (default the row) after each model."""
    from robust_train.models import load_classifier

    attack_fn = attack_fn or attack
    x, y = split("test")
    rows: dict[str, Any] = {}
    for spec in specs:
        label, path = spec.split("=", 1)
        model = load_classifier(path)
        row: dict[str, Any] = {"test_acc": accuracy(model, x, y)}
        for name in explainers:
            row[name] = attack_fn(model, x, y, name, images)
            row[f"{name}/random"] = attack_fn(model, x, y, name, images, objective="random_sign")
        rows[label] = row
        print(label, json.dumps(show(row) if show else row), flush=True)
    return rows


def table(args: argparse.Namespace) -> dict[str, Any]:
    rows = attack_rows(args.model, EXPLAINERS, args.images)
    print(attack_table(rows, EXPLAINERS))
    return rows


def attack_table(rows: dict[str, Any], explainers: tuple[str, ...]) -> str:
    """Markdown: a row per model, test accuracy and, per explainer, the direct attack's mean
    top-k intersection (random signs) [images measured]."""
    head = " | ".join(f"{n}: attack (random) [measured]" for n in explainers)
    lines = [f"| model | test acc | {head} |", "|---|---|" + "---|" * len(explainers)]
    for label, row in rows.items():
        cells = " | ".join(
            f"{row[n]['topk']:.3f} ({row[n + '/random']['topk']:.3f}) [{row[n]['n']}]"
            for n in explainers
        )
        lines.append(f"| {label} | {row['test_acc']:.3f} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("surrogate", "sweep", "table"))
    parser.add_argument("--explainer", default="grad_cam", choices=("grad_cam", "deeplift"))
    parser.add_argument("--weights", type=float, nargs="+", default=[10.0, 30.0, 100.0])
    parser.add_argument(
        "--detach-clean", action="store_true", help="sweep: the clean map without a graph"
    )
    parser.add_argument("--model", nargs="+", default=[f"natural={BASELINE}"])
    parser.add_argument("--images", type=int, default=None, help="attacked images")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "new_explainers")
    parser.add_argument("--quick", action="store_true", help="smoke run: few images and steps")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    for name in ("lightning.pytorch", "pytorch_lightning", "lightning_fabric"):
        __import__("logging").getLogger(name).setLevel("ERROR")
    if args.images is None:
        args.images = 4 if args.quick else (100 if args.part == "sweep" else 200)
    if args.quick:
        ATTACK["n_steps"] = 2
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"surrogate": surrogate, "sweep": sweep, "table": table}[args.part](args)
    tag = f"{args.part}_{args.explainer}" if args.part == "sweep" else args.part
    tag += "_detached" if args.detach_clean else ""
    (args.out / f"{tag}.json").write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
