"""`robust-train demo` (`make demo`): the main job on real data, MNIST-5k.

Trains the natural model (`configs/mnist5k_baseline.yaml`), fine-tunes it with the shipped robust
recipe (`configs/mnist5k_finetune_every_map.yaml`: 2 epochs of one penalty over the saliency, input
x gradient and Grad-CAM maps, on the ReLU network just trained), both with the robustness monitors
on (one W&B offline run per model under the output folder); evaluates both with the reduced attack
ensemble `demo_ensemble` (`robust_train.evaluation.PROTOCOLS["demo_ensemble"]`) on every reported
map (saliency, integrated gradients, Grad-CAM, LRP, DeepLIFT: the top-k attack aimed at each as
an ensemble of attacked sets, surrogate betas, restarts and a random search, each image's worst
kept, beside random-sign noise of the same budget, a random map and "map = input"); prints the
protocol with its members and cost, a side-by-side table and the claim (robust minus natural
top-k intersection on each map, accuracy change) with whether each number falls in the range
measured over seeds; writes <out>/report.md with the attack figure, the MIF/LIF curves and the
robustness per epoch.

`--data cluttered_mnist5k` runs the same pair on cluttered MNIST-5k
(`robust_train.data.ClutteredMNIST5kDataModule`: the digits coloured, scaled and placed at random
over photographs, 64 x 64 RGB, with a mask of each digit), from
`configs/cluttered_mnist5k_baseline.yaml` and `configs/cluttered_mnist5k_finetune_every_map.yaml`,
evaluated by the demo protocol at the L_inf budget of RGB images, 8/255 (20 sign steps of
2 x 8/255 / 20), which also scores each map's localisation against the masks; the claim's ranges
were measured on MNIST-5k, so they are printed as a reference, not a check.

Checkpoint rule: both models are evaluated at the end of their last epoch (`last.ckpt`), and the
fine-tune starts from the natural model's `last.ckpt`; the penalty's robustness grows until the
last epoch of the fine-tune.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

from robust_train.app.shipped_files import file_argument
from robust_train.core.history import History
from robust_train.core.resources import assets_dir

CONFIG_DIR = assets_dir().resolve() / "configs"  # the shipped configs (package data)
NATURAL_CONFIG = CONFIG_DIR / "mnist5k_baseline.yaml"
ROBUST_CONFIG = CONFIG_DIR / "mnist5k_finetune_every_map.yaml"
# `--data`: the natural and fine-tune configs of each data set the demo runs on, its title, and
# the demo protocol's budget there (None: the protocol's own, RAR's L_inf 0.3 for digits).
DATA: dict[str, dict[str, Any]] = {
    "mnist5k": {
        "configs": (NATURAL_CONFIG, ROBUST_CONFIG),
        "title": "MNIST-5k",
        "epsilon": None,
    },
    "cluttered_mnist5k": {
        "configs": (
            CONFIG_DIR / "cluttered_mnist5k_baseline.yaml",
            CONFIG_DIR / "cluttered_mnist5k_finetune_every_map.yaml",
        ),
        "title": "cluttered MNIST-5k (64 x 64 RGB)",
        "epsilon": 8 / 255,
    },
}
HISTORY_KEYS = (
    "robustness/attack/saliency/topk/topk_intersection",
    "robustness/attack/saliency/mass_center/center_shift",
    "robustness/lipschitz/saliency/lipschitz",
    "robustness/fidelity/saliency/fidelity",
    "val/acc",
    "robustness/seconds/total",
)
HISTORY_NOTE = (
    "What the monitors logged while training:\nthe same few validation images each time,\n"
    "3-step attacks: read it as a trend. The robust\nline starts at the natural model's last "
    "epoch\n(the weights its fine-tune starts from).\n\nThe printed table is the final "
    "evaluation\nof the last epochs: {n_samples} test images,\n{n_steps}-step attacks."
)
# The maps the demo attacks and claims (`robust_train.explain.reported_explainers()`), each with
# the top-k attack aimed at it; the label its claim line prints.
MAPS = {
    "saliency": "saliency",
    "integrated_gradients": "integrated-gradients",
    "grad_cam": "Grad-CAM",
    "lrp": "LRP",
    "deeplift": "DeepLIFT",
}
TOPK = {name: f"attack/{name}/topk/topk_intersection" for name in MAPS}
# The protocol of the final evaluation (`robust_train.evaluation.PROTOCOLS`): a reduced attack
# ensemble, each image's worst result kept.
PROTOCOL = "demo_ensemble"
# The ranges the claim is checked against: robust minus natural over seeds at the demo's default
# settings, shipped as package data (assets/results/demo_claims.json) and written by the
# demo_claims experiment.
CLAIMS_FILE = assets_dir().resolve() / "results" / "demo_claims.json"
_CLAIMS: dict[str, Any] = json.loads(CLAIMS_FILE.read_text())
MEASURED_SEEDS: tuple[int, ...] = tuple(_CLAIMS["seeds"])
MEASURED_GAINS: dict[str, dict[str, float]] = _CLAIMS["gains"]
MEASURED_ACC_CHANGE: dict[str, float] = _CLAIMS["accuracy_change"]
# How far beyond a measured range a run on another machine still reads as agreeing with it: one
# pixel of the 100 top-k pixels per image, and 2 of the 1,000 test images.
MACHINE_MARGIN = {"map": 0.01, "accuracy": 0.002}
# --quick: a smoke run of the whole pipeline in well under a minute (its numbers are no claim).
QUICK_TRAINING = ("--trainer.limit_train_batches=6", "--trainer.limit_val_batches=2")
QUICK_EPOCHS = (2, 1)
QUICK_SETTINGS: dict[str, Any] = {"n_samples": 8, "n_steps": 3, "step_size": 0.2, "ig_steps": 3,
                  "lipschitz_samples": 2, "fidelity_steps": 4, "ensemble_betas": (10.0,),
                  "search_queries": 10}  # fmt: skip


class MetricHistory(Callback):
    """Keep (epoch, value) of chosen logged metrics at the end of every training epoch.

    Keys under robustness/ are kept only for the epochs the monitors evaluated
    (Lightning keeps showing the last logged value in between).
    """

    def __init__(self, monitors: list[Any], keys: tuple[str, ...] = HISTORY_KEYS) -> None:
        self.keys, self.monitors = keys, monitors
        self.history = History()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        evaluated = any(trainer.current_epoch in m.evaluated_epochs for m in self.monitors)
        for key in self.keys:
            if key.startswith("robustness/") and not evaluated:
                continue
            if key in trainer.callback_metrics:
                value = float(trainer.callback_metrics[key])
                self.history.add(key, trainer.current_epoch, value)


def train(
    config: str | Path, name: str, out_dir: Path, extra: list[str], monitor_every: int
) -> dict[str, Any]:
    """Fit one config with a history recorder; return the final checkpoint, history and seconds.

    The config's robustness monitors run every `monitor_every` epochs without the overhead cap, so
    the per-epoch plot has points to show (the cap keeps ordinary fits under 10 %). The weights
    at the end of the last epoch are the run's `last.ckpt`.
    """
    from robust_train.app.lightning_cli import lightning_main
    from robust_train.callbacks import RobustnessCallback

    args = ["--config", str(config), "--experiment", name,
            "--checkpoint_root", str(out_dir / "checkpoints"),
            "--trainer.logger.init_args.save_dir", str(out_dir), *extra]  # fmt: skip
    cli = lightning_main(args, run=False)
    callbacks: list[Callback] = cli.trainer.callbacks  # type: ignore[attr-defined]
    monitors = [cb for cb in callbacks if isinstance(cb, RobustnessCallback)]
    for callback in monitors:
        callback.every_n_epochs = monitor_every
        callback.budget.max_overhead = None
    history = MetricHistory(monitors)
    callbacks.append(history)
    start = time.perf_counter()
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    seconds = time.perf_counter() - start
    final = _last_epoch_checkpoint(cli.trainer, out_dir / "checkpoints" / name)
    _finish_wandb_run()
    return {
        "checkpoint": final,
        "seconds": seconds,
        "epochs": int(cli.trainer.current_epoch),
        "history": {k: v for k, v in history.history.items() if v},
    }


def _last_epoch_checkpoint(trainer: pl.Trainer, fallback_dir: Path) -> str:
    """The run's `last.ckpt` (the end of the last finished epoch), written here if it is missing."""
    callback = trainer.checkpoint_callback
    last = getattr(callback, "last_model_path", "") if callback is not None else ""
    if last and Path(last).is_file():
        return str(last)
    folder = Path(getattr(callback, "dirpath", None) or fallback_dir)
    trainer.save_checkpoint(folder / "last.ckpt")
    return str(folder / "last.ckpt")


def _finish_wandb_run() -> None:
    """Close the W&B run of one fit so the next fit in this process gets a run of its own."""
    import sys

    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish()


def continued_history(
    natural: dict[str, list[tuple[int, float]]], finetune: dict[str, list[tuple[int, float]]],
    offset: int,
) -> dict[str, list[tuple[int, float]]]:  # fmt: skip
    """The fine-tune's history on the natural model's epoch axis, from its starting point.

    The fine-tune's epoch e is epoch `offset + e` of the robust model; its line starts at the
    natural model's value of its last epoch (`offset - 1`: the weights the fine-tune starts from).

    Examples:
        >>> continued_history({"a": [(0, 0.2), (1, 0.3)]}, {"a": [(0, 0.6)]}, offset=2)
        {'a': [(1, 0.3), (2, 0.6)]}
    """
    merged = {}
    for key, points in finetune.items():
        start = [p for p in natural.get(key, []) if p[0] == offset - 1]
        merged[key] = start + [(epoch + offset, value) for epoch, value in points]
    return merged


def gain(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Robust minus natural: top-k intersection under the top-k attack per map, and accuracy.

    Each map's gain compares the two models on the images both of them measured, as the table
    beside it does (`robust_train.app.report.same_images`); each model's own mean only when the
    images cannot be lined up.

    Examples:
        >>> r = {"natural": {"measures": {"split_accuracy": 0.97, TOPK["saliency"]: 0.2}},
        ...      "robust": {"measures": {"split_accuracy": 0.96, TOPK["saliency"]: 0.7}}}
        >>> {k: round(v, 3) for k, v in gain(r).items()}
        {'saliency': 0.5, 'accuracy': -0.01}
    """
    from robust_train.app.report import same_images

    pair = {"natural": results["natural"], "robust": results["robust"]}
    natural, robust = pair["natural"]["measures"], pair["robust"]["measures"]
    out = {}
    for name, key in TOPK.items():
        if key in robust:
            shared = same_images(pair, key)
            means = shared[0] if shared is not None else [natural[key], robust[key]]
            out[name] = means[1] - means[0]
    out["accuracy"] = robust["split_accuracy"] - natural["split_accuracy"]
    return out


def _range_line(
    label: str, value: float, measured: dict[str, float], margin: float, scale: float = 1.0
) -> str:
    """`label value: inside / within MARGIN of / OUTSIDE the measured range lo to hi (mean m)`;
    no range: the value alone. The ranges were measured on one machine, and the default seed
    is one of the seeds they span, so its values can sit at an end of a range: another CPU or
    BLAS takes another path through training, and a value up to `margin` beyond an end says so
    rather than OUTSIDE."""
    fmt = "{:+.1f}" if scale != 1.0 else "{:+.3f}"
    text = f"  {label} {fmt.format(scale * value)}"
    lo, hi = measured["min"], measured["max"]
    if lo != lo or value != value:  # NaN: no measured range, or nothing measured
        return text
    if lo - 1e-6 <= value <= hi + 1e-6:  # 1e-6: float error
        where = "inside"
    elif lo - margin <= value <= hi + margin:
        where = f"within {fmt.format(scale * margin).lstrip('+')} (another machine's margin) of"
    else:
        where = "OUTSIDE"
    return (f"{text}: {where} the measured range {fmt.format(scale * lo)} to "
            f"{fmt.format(scale * hi)} (mean {fmt.format(scale * measured['mean'])})")  # fmt: skip


def verdict(gains: dict[str, float], comparable: bool = True) -> str:
    """The claim this run makes and, per number, whether it falls in the range measured over seeds.

    Examples:
        >>> g = {"saliency": 0.5, "integrated_gradients": 0.2, "accuracy": -0.01}
        >>> verdict(g).splitlines()[0][:60]
        'claim: fine-tuning the natural model with the shipped recipe'
    """
    seeds = ", ".join(str(s) for s in MEASURED_SEEDS) or "none yet"
    lines = [
        "claim: fine-tuning the natural model with the shipped recipe (one penalty over the "
        "saliency, input x gradient and Grad-CAM maps, on a ReLU network) raises the top-k "
        f"intersection of every map under the attacks aimed at it (the {PROTOCOL} protocol, "
        "each image's worst kept; robust minus natural, "
        "on the images both models measured, as in the table; "
        "ranges measured over "
        f"seeds {seeds}):"
    ]
    for name, label in MAPS.items():
        if name in gains:
            margin = MACHINE_MARGIN["map"]
            lines.append(_range_line(f"{label} gain", gains[name], MEASURED_GAINS[name], margin))
    lines.append(
        _range_line(
            "test accuracy change (points)",
            gains["accuracy"],
            MEASURED_ACC_CHANGE,
            MACHINE_MARGIN["accuracy"],
            scale=100,
        )
    )
    if not comparable:
        lines.append("  (this run's settings differ from the measured ones: the ranges are a "
                     "reference, not a check)")  # fmt: skip
    return "\n".join(lines)


def protocol_text(settings: Any, results: dict[str, dict[str, Any]]) -> str:
    """Which protocol the final evaluation ran: its name, images, budget, the members of the
    top-k attack (the claim's) and what the attacks cost each model (from the `attack_cost`
    notes of `results`).

    Examples:
        >>> from robust_train.evaluation import PROTOCOLS
        >>> cost = {"members": [{"name": "k100", "gradient_steps": 40, "maps": 40},
        ...                     {"name": "search", "gradient_steps": 0, "maps": 100}],
        ...         "cpu_seconds": 6.0, "images": 3}
        >>> print(protocol_text(PROTOCOLS["demo_ensemble"],
        ...                     {"natural": {"attack_cost": {"saliency/topk": cost}}}))
        ... # doctest: +NORMALIZE_WHITESPACE
        protocol: demo_ensemble (the attack ensemble, reduced to fit the demo), 20 test images,
        L_inf 0.3, top-k attack scored at k 100, each image's worst result kept
          members: k100 (40 steps per image), search (100 queries per image)
          CPU time of the ensemble attacks: natural 6 s
    """
    name = settings.extra.get("protocol", "custom")
    kind = "the attack ensemble, reduced to fit the demo" if settings.ensemble else "one attack"
    lines = [f"protocol: {name} ({kind}), {settings.n_samples} test images, L_inf "
             f"{settings.epsilon:g}, top-k attack scored at k {settings.measure_k}, each image's "
             "worst result kept"]  # fmt: skip
    costs = {model: r.get("attack_cost") or {} for model, r in results.items()}
    first = next((c for cost in costs.values() for attack, c in cost.items()
                  if attack.endswith("/topk") and c.get("members")), None)  # fmt: skip
    if first is not None:
        members = [f"{m['name']} ({m['gradient_steps'] or m['maps']} "
                   f"{'steps' if m['gradient_steps'] else 'queries'} per image)"
                   for m in first["members"]]  # fmt: skip
        lines.append("  members: " + ", ".join(members))
    spent = [f"{model} {sum(c.get('cpu_seconds', 0.0) for c in cost.values()):.0f} s"
             for model, cost in costs.items() if cost]  # fmt: skip
    if spent:
        lines.append("  CPU time of the ensemble attacks: " + ", ".join(spent))
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="robust-train demo", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    add = parser.add_argument
    add("--seed", type=int, default=None, help="override seed_everything of both configs")
    add("--data", choices=tuple(DATA), default="mnist5k",
        help="the data set, with its shipped pair of configs and attack budget")  # fmt: skip
    add("--out", default="runs/demo", help="folder for runs, checkpoints and the report")
    add(
        "--quick",
        action="store_true",
        help="smoke run: few batches and epochs, 16 test images, 3-step attacks (no claim)",
    )
    add("--natural", default=None, type=file_argument("configs", "`--natural`"),
        help="config of the natural model (a file, or a shipped config by name; default: the "
             "data's)")  # fmt: skip
    add(
        "--robust",
        default=None,
        type=file_argument("configs", "`--robust`"),
        help="fine-tune config (its model.init_checkpoint is set to the natural last.ckpt; "
        "default: the data's)",
    )
    add("--epochs", type=int, default=None, help="override trainer.max_epochs of the natural run")
    add(
        "--finetune-epochs",
        type=int,
        default=None,
        help="override trainer.max_epochs of the fine-tune (its cosine T_max stays the config's)",
    )
    add(
        "--n-samples",
        type=int,
        default=None,
        help="test images of the final evaluation (default: the demo protocol's)",
    )
    add("--monitor-every", type=int, default=1, help="epochs between robustness evaluations")
    add("--threads", type=int, default=1,
        help="torch CPU threads (small models: one thread is fastest)")  # fmt: skip
    return parser


def _runs_arguments(args: argparse.Namespace, extra: list[str]) -> tuple[list[str], list[str]]:
    """The LightningCLI overrides of the natural run and of the fine-tune."""
    for flag in ("seed", "epochs", "finetune_epochs", "n_samples", "monitor_every", "threads"):
        value, least = getattr(args, flag), 0 if flag == "seed" else 1
        if value is not None and value < least:
            raise ValueError(f"`--{flag.replace('_', '-')}` must be >= {least}, got {value}")
    quick: tuple[int | None, ...] = QUICK_EPOCHS if args.quick else (None, None)
    epochs = (args.epochs or quick[0], args.finetune_epochs or quick[1])
    common = [*QUICK_TRAINING] if args.quick else []
    if args.seed is not None:
        common.append(f"--seed_everything={args.seed}")
    runs = []
    for n in epochs:
        runs.append([*common, *([f"--trainer.max_epochs={n}"] if n else []), *extra])
    return runs[0], runs[1]


def demo_settings() -> Any:
    """The demo's evaluation: the reduced attack ensemble (`PROTOCOLS["demo_ensemble"]`, every
    map in `MAPS`)."""
    from robust_train.evaluation import PROTOCOLS

    return PROTOCOLS[PROTOCOL]


def _settings(args: argparse.Namespace) -> Any:
    settings = demo_settings()
    if args.quick:
        settings = dataclasses.replace(settings, **QUICK_SETTINGS)
    if args.n_samples is not None:
        settings = dataclasses.replace(settings, n_samples=args.n_samples)
    epsilon = DATA[args.data]["epsilon"]
    if epsilon is not None:  # the protocol's steps, twice the budget in all
        steps = settings.n_steps
        settings = dataclasses.replace(settings, epsilon=epsilon, step_size=2 * epsilon / steps)
    return settings


def _configs(args: argparse.Namespace) -> tuple[str, str]:
    """The natural and fine-tune configs: those given, else the shipped pair of `--data`."""
    natural, robust = DATA[args.data]["configs"]
    return args.natural or str(natural), args.robust or str(robust)


def _as_measured(args: argparse.Namespace, extra: list[str], settings: Any) -> bool:
    """Whether this run has the settings the ranges were measured with (any seed)."""
    quiet = {"--trainer.enable_progress_bar", "--trainer.enable_model_summary"}
    natural, robust = _configs(args)
    return (
        not args.quick
        and args.epochs is None
        and args.finetune_epochs is None
        and Path(natural).resolve() == NATURAL_CONFIG
        and Path(robust).resolve() == ROBUST_CONFIG
        and settings == demo_settings()
        and option_names(extra) <= quiet
    )


def option_names(extra: list[str]) -> set[str]:
    """The options among LightningCLI arguments, in either form (`--a=1` or `--a 1`).

    Examples:
        >>> sorted(option_names(["--trainer.enable_progress_bar", "false", "--x=1"]))
        ['--trainer.enable_progress_bar', '--x']
        >>> option_names(["stray"])
        {'stray'}
    """
    names, after_option = set(), False
    for arg in extra:
        if arg.startswith("--"):
            name, has_value, _ = arg.partition("=")
            names.add(name)
            after_option = not has_value
        elif after_option:  # the value of the option before it
            after_option = False
        else:
            names.add(arg)
    return names


def _evaluate(runs: dict[str, dict[str, Any]], settings: Any, threads: int) -> dict[str, Any]:
    from robust_train.app.commands import evaluate_checkpoint

    results = {}
    for name, run in runs.items():
        print(f"\nevaluating {name} ({run['checkpoint']}, end of the last epoch) ...", flush=True)
        results[name] = evaluate_checkpoint(run["checkpoint"], settings, threads=threads)
        results[name]["training_seconds"] = run["total_seconds"]
        monitor = sum(v for _, v in run["history"].get("robustness/seconds/total", []))
        results[name]["monitor_share"] = monitor / run["seconds"] if run["seconds"] else None
    return results


def main(argv: list[str]) -> int:
    from robust_train.app.report import summary_table, write_report
    from robust_train.callbacks.figures import render_history, save_png

    args, extra = _parser().parse_known_args(argv)
    args.natural, args.robust = _configs(args)
    natural_args, robust_args = _runs_arguments(args, extra)
    for flag, path in (("--natural", args.natural), ("--robust", args.robust)):
        if not Path(path).is_file():
            raise FileNotFoundError(f"`{flag}` config {path!r} does not exist")
    settings = _settings(args)
    torch.set_num_threads(args.threads)
    out, start = Path(args.out), time.perf_counter()
    natural = train(args.natural, "natural", out, natural_args, args.monitor_every)
    natural["total_seconds"] = natural["seconds"]
    init = f"--model.init_checkpoint={natural['checkpoint']}"
    robust = train(args.robust, "robust", out, [*robust_args, init], args.monitor_every)
    robust["total_seconds"] = natural["seconds"] + robust["seconds"]
    results = _evaluate({"natural": natural, "robust": robust}, settings, args.threads)
    histories = {
        "natural": natural["history"],
        "robust": continued_history(natural["history"], robust["history"], natural["epochs"]),
    }
    title = f"robust_train demo: natural vs fine-tuned robust model on {DATA[args.data]['title']}"
    report = write_report(results, out, histories=histories, title=title)
    note = HISTORY_NOTE.format(n_samples=settings.n_samples, n_steps=settings.n_steps)
    save_png(render_history(histories, note=note), out / "robustness_per_epoch.png")
    claim = verdict(gain(results), comparable=_as_measured(args, extra, settings))
    seconds = time.perf_counter() - start
    cost = (f"training: natural {natural['seconds']:.0f} s, fine-tune {robust['seconds']:.0f} s; "
            f"whole demo {seconds:.0f} s")  # fmt: skip
    protocol = protocol_text(settings, results)
    with report.open("a") as handle:
        handle.write(f"\n## The claim\n\n```\n{protocol}\n\n{claim}\n```\n\n{cost}\n")
    print("\n" + protocol)
    print("\n" + summary_table(results))
    print("\n" + claim)
    print(f"\n{cost}; report: {report}")
    print(f"W&B offline runs: {out / 'wandb'} (sync with `wandb sync {out}/wandb/offline-run-*`)")
    return 0
