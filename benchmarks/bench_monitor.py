"""Share of training wall time spent in the robustness callbacks at their default settings.

For each config (default: configs/digits_baseline.yaml and configs/digits_smoothness.yaml) the
Trainer is built by robust_train.app.lightning_cli.lightning_main(..., run=False) with no logger,
no progress bar and checkpoints in a temporary folder; the robustness monitors the config lists
are removed from trainer.callbacks. It is fitted side by side: without a monitor, with a default
RobustnessMonitor() appended to trainer.callbacks, and (when the monitor has an overhead cap that
skips scheduled epochs) with RobustnessMonitor(max_overhead=None), which runs every epoch.
Reported:
- logged share: the sum over epochs of `robustness/seconds/total` (what the monitor logs) divided
  by the wall time of trainer.fit with the monitor;
- hook share: the same with the wall time of every RobustnessMonitor.run call measured around it
  (adds the logging calls);
- CPU share: the hook share in process CPU time (insensitive to other processes' load);
- extra share: (fit with monitor - fit without) / fit with monitor in process CPU time, a
  cross-check from two separate fits: on a shared machine identical fits differ by up to +-12 %,
  so it is only meaningful with several rounds (--repeats);
and the logged seconds of each part (fragility, Lipschitz, fidelity).

    python -m benchmarks.bench_monitor [--quick] [--no-write] [--max-epochs 20] [--profile]
"""

from __future__ import annotations

import cProfile
import inspect
import io
import pstats
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

from benchmarks import bench_utils as bu
from robust_train.app.lightning_cli import lightning_main
from robust_train.callbacks import RobustnessCallback, RobustnessMonitor

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [ROOT / "configs" / "digits_baseline.yaml", ROOT / "configs" / "digits_smoothness.yaml"]
LIMIT = 0.10
PARTS = ("fragility", "lipschitz", "fidelity")


class TimedMonitor(RobustnessMonitor):
    """RobustnessMonitor that keeps every report's scalars and the wall time of each run."""

    def __init__(self, profile: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.reports: list[dict[str, float]] = []
        self.run_seconds: list[float] = []
        self.run_cpu_seconds: list[float] = []
        self.profile_text: str | None = None
        self._profile = profile

    def run(self, trainer, pl_module, **kwargs):
        profiler = cProfile.Profile() if self._profile and not self.reports else None
        start, cpu = time.perf_counter(), time.process_time()
        if profiler is not None:
            profiler.enable()
        report = super().run(trainer, pl_module, **kwargs)
        if profiler is not None:
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
            self.profile_text = out.getvalue()
        self.run_seconds.append(time.perf_counter() - start)
        self.run_cpu_seconds.append(time.process_time() - cpu)
        self.reports.append({k: float(v) for k, v in report.scalars.items()})
        return report


def fit_seconds(
    config: Path, folder: str, args, monitor: TimedMonitor | None, warmup: bool = False
) -> tuple[float, float]:
    """(wall, process CPU) seconds of trainer.fit for `config`, with `monitor` appended."""
    extra = [f"--trainer.max_epochs={1 if warmup else args.max_epochs}"]
    if args.quick or warmup:
        extra += ["--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1"]
    cli = lightning_main(
        [
            "--config",
            str(config),
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            f"--checkpoint_root={folder}",
            f"--trainer.default_root_dir={folder}",
            *extra,
        ],
        run=False,
    )
    callbacks = cli.trainer.callbacks  # the configs' own monitors are replaced by `monitor`
    callbacks[:] = [c for c in callbacks if not isinstance(c, RobustnessCallback)]
    if monitor is not None:
        callbacks.append(monitor)
    start, cpu = time.perf_counter(), time.process_time()
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return time.perf_counter() - start, time.process_time() - cpu


def modes() -> dict[str, dict[str, object]]:
    """Monitor settings to compare: the defaults and, when the monitor has an overhead cap
    (`max_overhead`, which skips scheduled epochs to stay under it), the uncapped cost."""
    out: dict[str, dict[str, object]] = {"default": {}}
    if "max_overhead" in inspect.signature(RobustnessCallback.__init__).parameters:
        out["every epoch (max_overhead=None)"] = {"max_overhead": None}
    return out


def run_config(config: Path, args) -> tuple[list[list[object]], list[str]]:
    """Fits without and with the monitor, side by side; one row per monitor mode."""
    quick = dict(n_samples=8, n_steps=2, lipschitz_samples=2, fidelity_steps=4)
    settings = modes()
    without, fits = [], {mode: [] for mode in settings}
    for _ in range(args.rounds):  # side by side: without, default, uncapped, without, ...
        with tempfile.TemporaryDirectory() as folder:
            without.append(fit_seconds(config, folder, args, None))
        for mode, kwargs in settings.items():
            monitor = TimedMonitor(
                profile=args.profile and mode == "default",
                **(quick if args.quick else {}),
                **kwargs,
            )
            with tempfile.TemporaryDirectory() as folder:
                fits[mode].append((fit_seconds(config, folder, args, monitor), monitor))
    rows, verdicts = [], []
    for mode, results in fits.items():
        best = min(range(args.rounds), key=lambda i: results[i][0][0])  # least disturbed round
        (fit_with, cpu_with), monitor = results[best]
        fit_without, cpu_without = without[best]
        logged = sum(h["robustness/seconds/total"] for h in monitor.reports)
        parts = [sum(h.get(f"robustness/seconds/{p}", 0.0) for h in monitor.reports) for p in PARTS]
        rows.append(
            [
                config.name,
                mode,
                len(monitor.reports),
                fit_without,
                fit_with,
                logged,
                *parts,
                logged / fit_with,
                sum(monitor.run_seconds) / fit_with,
                sum(monitor.run_cpu_seconds) / cpu_with,
                (cpu_with - cpu_without) / cpu_with,
            ]
        )
        if monitor.profile_text:
            print(f"cProfile of the first monitor run, {config.name}:\n{monitor.profile_text}")
        if mode == "default":
            share = bu.verdict(logged / fit_with, LIMIT)
            verdicts.append(f"- {config.name}, {mode}: logged share <= {LIMIT:.0%}: {share}")
        else:
            verdicts.append(
                f"- {config.name}, {mode}: logged share {logged / fit_with:.2f} "
                "(the uncapped cost; not a target)"
            )
    return rows, verdicts


def main(argv: Sequence[str] | None = None) -> str:
    parser = bu.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", type=Path, default=CONFIGS)
    parser.add_argument("--max-epochs", type=int, default=None, help="default 20 (1 with --quick)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="print cProfile of the first monitor run of each config",
    )
    args = parser.parse_args(argv)
    device = bu.setup_torch(args)
    if device.type != "cpu":
        raise SystemExit("bench_monitor runs the digits configs, which train on the CPU")
    args.max_epochs = args.max_epochs or (1 if args.quick else 20)
    args.rounds = args.repeats or 1
    warnings.filterwarnings("ignore")
    record = bu.Record("bench_monitor", args, device, argv)
    with tempfile.TemporaryDirectory() as folder:  # imports and lazy initialisation, untimed
        monitor = TimedMonitor(n_samples=4, n_steps=1)
        fit_seconds(args.configs[0], folder, args, monitor, warmup=True)
    rows, verdicts = [], []
    for config in args.configs:
        config_rows, lines = run_config(config, args)
        rows += config_rows
        verdicts += lines
    header = [
        "config",
        "monitor",
        "monitor runs",
        "fit s (no monitor)",
        "fit s (monitor)",
        "logged s",
        "fragility s",
        "lipschitz s",
        "fidelity s",
        "logged share",
        "hook share",
        "CPU share",
        "extra share",
    ]
    record.add(
        f"### RobustnessMonitor() at default settings, {args.max_epochs} epoch(s), "
        f"{args.rounds} round(s)\n\n" + bu.table(header, rows)
    )
    record.add("Targets:\n\n" + "\n".join(verdicts))
    return record.finish()


if __name__ == "__main__":
    main()
