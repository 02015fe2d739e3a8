"""`robust-train demo`: the main job on the embedded default data set (scikit-learn's digits)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from robust_train.cli import lightning_main

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


def train(config: str | Path, *, out_dir: str | Path = "runs/demo", extra: list[str] | None = None) -> dict[str, float]:
    """Fit one config, test its best checkpoint, and return test metrics, penalties and seconds."""
    start = time.perf_counter()
    cli = lightning_main(["--config", str(config), "--checkpoint_root", str(Path(out_dir) / "checkpoints"),
                          "--trainer.logger.init_args.save_dir", str(out_dir), *(extra or [])], run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    seconds = time.perf_counter() - start
    penalties = {k: float(v) for k, v in cli.trainer.callback_metrics.items() if "penalty/" in k and k.endswith("_epoch")}
    (test,) = cli.trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path="best", verbose=False)
    ckpt = cli.trainer.checkpoint_callback.best_model_path if cli.trainer.checkpoint_callback else ""
    return {"test/acc": float(test["test/acc"]), "seconds": seconds, **penalties, "checkpoint": ckpt}  # type: ignore[dict-item]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="robust-train demo", description=__doc__)
    parser.add_argument("--config", default=str(CONFIG_DIR / "digits_smoothness.yaml"))
    parser.add_argument("--out", default="runs/demo", help="folder for runs and checkpoints")
    args, extra = parser.parse_known_args(argv)
    result = train(args.config, out_dir=args.out, extra=extra)
    print(f"\nconfig: {args.config}")
    print(f"test accuracy: {result['test/acc']:.4f}   training time: {result['seconds']:.1f} s")
    for key, value in result.items():
        if "penalty/" in key:
            print(f"{key.removesuffix('_epoch')} (last epoch mean): {value:.5f}")
    print(f"checkpoint: {result['checkpoint']}")
    return 0
