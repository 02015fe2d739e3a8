"""The GPU path in one short run (< 4 minutes on one GPU): bf16 training with a penalty, attacks.

1. `Trainer.fit` of `RobustClassifier(ResNet18CIFAR)` on 32x32 synthetic RGB images with
   `precision="bf16-mixed"`, plain and with the smoothness penalty (1 sample), a few steps each
   after a warm-up: images per second, and the penalty's throughput relative to plain training.
2. The fragility attack (top-k) on CUDA beside its bare loop (benchmarks/eval_peers.bare_attack),
   saliency and integrated gradients (10 points), MNISTConvNet(16, 32, 128) on 28x28 images, with
   `torch.cuda.synchronize` around every timed call.

Writes a small JSON and a markdown summary (`--out`, default benchmarks/gpu_check_results.*).
`--cpu-smoke` runs the same code on the CPU at toy sizes (a few seconds), so the script is known
to work before a GPU machine is available; its numbers mean nothing.

    bash benchmarks/gpu_check.sh                # on a GPU machine
    bash benchmarks/gpu_check.sh --cpu-smoke    # anywhere
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from benchmarks import eval_peers as peers

HERE = Path(__file__).resolve().parent


def _clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def fit_throughput(penalty: bool, args: argparse.Namespace, device: torch.device) -> float:
    """Images per second of `Trainer.fit` steps after `args.warmup` warm-up steps."""
    import pytorch_lightning as pl

    from robust_train import RobustClassifier
    from robust_train.data import SyntheticDataModule
    from robust_train.models import ResNet18CIFAR
    from robust_train.regularizers import ExplanationSmoothness

    times: list[float] = []

    class Clock(pl.Callback):
        def on_train_batch_end(self, *_: object) -> None:
            times.append(_clock(device))

    total = args.warmup + args.steps
    dm = SyntheticDataModule(
        num_samples=args.batch * total, image_size=32, seed=0, batch_size=args.batch
    )
    terms = [ExplanationSmoothness(n_samples=1, seed=0)] if penalty else None
    module = RobustClassifier(ResNet18CIFAR(width=args.width), penalties=terms)
    trainer = pl.Trainer(
        accelerator=device.type,
        devices=1,
        precision=args.precision,
        max_steps=total,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Clock()],
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=dm)
    measured = times[args.warmup - 1 :]
    return args.batch * (len(measured) - 1) / (measured[-1] - measured[0])


def time_call(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median seconds of `fn` over `repeats` calls after one warm-up call."""
    fn()
    samples = []
    for _ in range(repeats):
        start = _clock(device)
        fn()
        samples.append(_clock(device) - start)
    return sorted(samples)[len(samples) // 2]


def attack_ratios(args: argparse.Namespace, device: torch.device) -> dict[str, dict[str, float]]:
    """Attack seconds and ratio to its bare loop, saliency and IG, 28x28."""
    from robust_train.attacks import fragility_attack
    from robust_train.explain import get_explainer
    from robust_train.models import MNISTConvNet

    torch.manual_seed(0)
    model = MNISTConvNet(channels=(16, 32), hidden=128).to(device).eval()
    x = torch.rand(args.images, 1, 28, 28, device=device)
    target = model(x).argmax(1).detach()
    out = {}
    for name, ig_steps in (("saliency", None), ("integrated_gradients", args.ig_steps)):
        explainer = (
            name if ig_steps is None else get_explainer(name, n_steps=ig_steps, baseline=0.0)
        )
        kw = dict(epsilon=0.3, step_size=0.01, n_steps=args.attack_steps, k=200)
        attack = time_call(
            lambda e=explainer, kw=kw: fragility_attack(
                model, x, target, explainer=e, measure_k=100, seed=0, **kw
            ),
            device,
            args.repeats,
        )
        bare = time_call(
            lambda s=ig_steps, kw=kw: peers.bare_attack(model, x, target, ig_steps=s, **kw),
            device,
            args.repeats,
        )
        out[name] = {"attack_s": attack, "bare_s": bare, "ratio": attack / bare}
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="toy sizes on the CPU")
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "gpu_check_results",
        help="results path without suffix (.json and .md are written)",
    )
    args = parser.parse_args(argv)
    smoke = args.cpu_smoke
    if not smoke and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device; run with --cpu-smoke to test the script")
    device = torch.device("cpu" if smoke else "cuda")
    torch.set_num_threads(1 if smoke else torch.get_num_threads())
    args.precision = "bf16-mixed"
    args.batch, args.width = (8, 4) if smoke else (128, 64)
    args.warmup, args.steps = (2, 2) if smoke else (10, 40)
    args.images, args.attack_steps = (4, 2) if smoke else (100, 20)
    args.ig_steps, args.repeats = (2, 1) if smoke else (10, 3)
    warnings.filterwarnings("ignore")
    start = time.perf_counter()
    plain = fit_throughput(False, args, device)
    smooth = fit_throughput(True, args, device)
    results: dict[str, object] = {
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu (smoke)",
        "torch": torch.__version__,
        "fit": {
            "plain_images_per_s": plain,
            "smoothness_images_per_s": smooth,
            "smoothness_relative_throughput": smooth / plain,
            "batch": args.batch,
            "precision": args.precision,
            "measured_steps": args.steps,
        },
        "attack": attack_ratios(args, device),
    }
    results["seconds"] = time.perf_counter() - start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(_markdown(results, smoke))
    print(_markdown(results, smoke))
    return results


def _markdown(r: dict, smoke: bool) -> str:
    fit, attack = r["fit"], r["attack"]
    lines = [
        f"# gpu_check{' (CPU smoke: numbers mean nothing)' if smoke else ''}",
        "",
        f"device {r['device']}, torch {r['torch']}, {r['seconds']:.0f} s in all",
        "",
        f"- ResNet18CIFAR 32x32 {fit['precision']} fit, batch {fit['batch']}: plain "
        f"{fit['plain_images_per_s']:.0f} img/s, smoothness (1 sample) "
        f"{fit['smoothness_images_per_s']:.0f} img/s = "
        f"{fit['smoothness_relative_throughput']:.2f}x plain throughput",
    ]
    for name, a in attack.items():
        lines.append(
            f"- fragility attack ({name}), 28x28: {a['attack_s']:.3f} s, bare loop "
            f"{a['bare_s']:.3f} s, ratio {a['ratio']:.2f}"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
