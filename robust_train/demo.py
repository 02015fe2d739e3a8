"""`robust-train demo` (`make demo`): the main job on the embedded digits data set.

Trains a baseline and a robust model with the robustness monitors on (W&B offline under the output
folder), evaluates both with the same attack suite, prints a side-by-side table and writes
<out>/report.md with plots (robustness per epoch, MIF/LIF curves, maps before/after attack).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

from robust_train.cli import lightning_main

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
HISTORY_KEYS = ("robustness/topk/topk_intersection", "robustness/mass_center/center_shift",
                "robustness/lipschitz/saliency", "fidelity/saliency/estimate", "val/acc",
                "robustness/seconds/total")


class MetricHistory(Callback):
    """Keep (epoch, value) of chosen logged metrics at the end of every training epoch.

    Keys under robustness/ and fidelity/ are kept only for the epochs the monitors evaluated
    (Lightning keeps showing the last logged value in between).
    """

    def __init__(self, monitors: list[Any], keys: tuple[str, ...] = HISTORY_KEYS) -> None:
        self.keys, self.monitors = keys, monitors
        self.history: dict[str, list[tuple[int, float]]] = {k: [] for k in keys}

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        evaluated = any(trainer.current_epoch in m.evaluated_epochs for m in self.monitors)
        for key in self.keys:
            if key.startswith(("robustness/", "fidelity/")) and not evaluated:
                continue
            if key in trainer.callback_metrics:
                self.history[key].append((trainer.current_epoch, float(trainer.callback_metrics[key])))


def train(config: str | Path, name: str, out_dir: Path, extra: list[str], monitor_every: int) -> dict[str, Any]:
    """Fit one config with a history recorder; return the best checkpoint, history and seconds.

    The config's robustness monitors run every `monitor_every` epochs without the overhead cap, so
    the per-epoch plot has points to show (the cap keeps ordinary fits under 10 %).
    """
    from robust_train.callbacks import RobustnessCallback

    cli = lightning_main(["--config", str(config), "--experiment", name,
                          "--checkpoint_root", str(out_dir / "checkpoints"),
                          "--trainer.logger.init_args.save_dir", str(out_dir), *extra], run=False)
    monitors = [cb for cb in cli.trainer.callbacks if isinstance(cb, RobustnessCallback)]
    for callback in monitors:
        callback.every_n_epochs = monitor_every
        callback.budget.max_overhead = None
    history = MetricHistory(monitors)
    cli.trainer.callbacks.append(history)
    start = time.perf_counter()
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    _finish_wandb_run()
    return {"checkpoint": cli.trainer.checkpoint_callback.best_model_path,
            "seconds": time.perf_counter() - start,
            "history": {k: v for k, v in history.history.items() if v}}


def _finish_wandb_run() -> None:
    """Close the W&B run of one fit so the next fit in this process gets a run of its own."""
    import sys

    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish()


def main(argv: list[str]) -> int:
    from robust_train.commands import evaluate_checkpoint
    from robust_train.evaluation import EvaluationSettings
    from robust_train.report import summary_table, write_report

    parser = argparse.ArgumentParser(prog="robust-train demo", description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=str(CONFIG_DIR / "digits_baseline.yaml"), help="baseline config")
    parser.add_argument("--robust", default=str(CONFIG_DIR / "digits_robust.yaml"), help="robust config")
    parser.add_argument("--out", default="runs/demo", help="folder for runs, checkpoints and the report")
    parser.add_argument("--epochs", type=int, default=None, help="override trainer.max_epochs of both configs")
    parser.add_argument("--n-samples", type=int, default=200, help="test images in the final evaluation")
    parser.add_argument("--monitor-every", type=int, default=2, help="epochs between robustness evaluations")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (small models: one thread is fastest)")
    args, extra = parser.parse_known_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    if args.epochs is not None:
        extra = [f"--trainer.max_epochs={args.epochs}", *extra]
    start = time.perf_counter()
    runs = {name: train(cfg, name, out, extra, args.monitor_every) for name, cfg in (("baseline", args.baseline), ("robust", args.robust))}
    settings = EvaluationSettings(n_samples=args.n_samples)
    results = {}
    for name, run in runs.items():
        print(f"\nevaluating {name} ({run['checkpoint']}) ...", flush=True)
        results[name] = evaluate_checkpoint(run["checkpoint"], settings)
        results[name]["training_seconds"] = run["seconds"]
        monitor = sum(v for _, v in run["history"].get("robustness/seconds/total", []))
        results[name]["monitor_share"] = monitor / run["seconds"] if run["seconds"] else float("nan")
    report = write_report(results, out, histories={n: r["history"] for n, r in runs.items()},
                          title="robust_train demo: baseline vs robust on digits")
    print("\n" + summary_table(results))
    print(f"\nwhole demo: {time.perf_counter() - start:.0f} s; report: {report}")
    print(f"W&B offline runs: {out / 'wandb'} (sync with `wandb sync {out}/wandb/offline-run-*`)")
    return 0
