"""`robust-train evaluate`, `compare` and `export`: the robustness suite on saved checkpoints.

    robust-train evaluate --ckpt checkpoints/digits_baseline/latest/best.ckpt
    robust-train evaluate --ckpt checkpoints/digits_robust.ckpt --protocol rar --n-samples 50
    robust-train compare checkpoints/digits_baseline.ckpt checkpoints/digits_robust.ckpt \
        --out runs/compare

Every argument is checked (names of explainers and attacks, positive counts, files) before a
checkpoint is loaded. `evaluate` writes results.json and summary.md (the numbers, the settings and
which direction of each metric is better) to `--out`, by default `runs/eval/<the checkpoint's
path>` (checkpoints/x/version_0/best.ckpt -> runs/eval/x/version_0/best), and refuses to write
over the results of another checkpoint unless `--overwrite`. When the checkpoint records the W&B
run it was trained in, the numbers are also added to that run's summary (`eval/...`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any, NoReturn

from robust_train._checkpoint_io import (
    KEEP_KEYS,
    checkpoint_meta,
    data_config_from_yaml,
    evaluate_checkpoint,
    export_checkpoint,
    heldout_tensors,
    instantiate,
    load_checkpoint,
)
from robust_train.evaluation import ATTACKS, PROTOCOLS, EvaluationSettings

__all__ = [
    "KEEP_KEYS",
    "add_settings_arguments",
    "compare_main",
    "data_config_from_yaml",
    "default_out",
    "evaluate_checkpoint",
    "evaluate_main",
    "export_checkpoint",
    "export_main",
    "heldout_tensors",
    "instantiate",
    "load_checkpoint",
    "settings_from",
    "summary_markdown",
]

# Flag -> EvaluationSettings field; flags left unset keep the preset's (or the default) value.
SETTING_FLAGS = {
    "n_samples": int,
    "explainers": str,
    "attack_explainer": str,
    "attacks": str,
    "epsilon": float,
    "n_steps": int,
    "k": int,
    "lipschitz_samples": int,
    "fidelity_steps": int,
    "ig_steps": int,
    "seed": int,
}
DIRECTIONS = (
    ("accuracy", "higher is better"),
    (
        "top-k intersection, Spearman, Kendall (attack rows)",
        "higher is more robust: the attacked map keeps more of the clean map (1 = unchanged)",
    ),
    ("center shift (px)", "lower is more robust: how far the map's center of mass moved"),
    (
        "map mass in target region",
        "lower is more robust: the share of the map a targeted attack "
        "pushed into its target region",
    ),
    (
        "images not measured",
        "attacks that could not move an image (zero direction) are counted "
        "here and left out of the means; they are not robustness",
    ),
    (
        "Lipschitz estimate",
        "lower is more robust: largest change of the explanation per unit of input change",
    ),
    (
        "fidelity estimate (AUC LIF - AUC MIF)",
        "higher is better: removing the pixels the map "
        "ranks first hurts the prediction more than removing the last ones",
    ),
)


class CommandParser(argparse.ArgumentParser):
    """argparse that raises a one-line ValueError (robust_train.cli prints it, exit code 2)."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(f"{message} (see `{self.prog} --help`)")


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    d = EvaluationSettings()
    parser.add_argument(
        "--protocol",
        choices=sorted(PROTOCOLS),
        default=None,
        help="a literature preset (rar: Chen et al. 2019, the RAR/ART protocol); "
        "flags given beside it override its fields",
    )
    parser.add_argument(
        "--data-config",
        help="LightningCLI YAML whose `data:` section gives the held-out "
        "data (default: the datamodule stored in the checkpoint)",
    )
    parser.add_argument("--split", choices=("test", "val"), default="test")
    parser.add_argument(
        "--n-samples", type=_positive(int), help=f"held-out images evaluated ({d.n_samples})"
    )
    parser.add_argument(
        "--explainers", nargs="+", help=f"explainers scored ({' '.join(d.explainers)})"
    )
    parser.add_argument(
        "--attack-explainer", help=f"explainer the attacks target ({d.attack_explainer})"
    )
    parser.add_argument("--attacks", nargs="+", choices=ATTACKS, help=f"({' '.join(d.attacks)})")
    parser.add_argument(
        "--epsilon",
        type=_positive(float),
        help="L_inf budget (default 0.1 up to 28 px, else 8/255)",
    )
    parser.add_argument("--n-steps", type=_positive(int), help=f"attack steps ({d.n_steps})")
    parser.add_argument(
        "--k", type=_positive(int), help="top-k size (default: an eighth of the pixels)"
    )
    parser.add_argument("--lipschitz-samples", type=_positive(int), help=f"({d.lipschitz_samples})")
    parser.add_argument("--fidelity-steps", type=_positive(int), help=f"({d.fidelity_steps})")
    parser.add_argument(
        "--ig-steps",
        type=_positive(int),
        help=f"integration steps of integrated gradients ({d.ig_steps})",
    )
    parser.add_argument("--seed", type=int, help=f"({d.seed})")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--no-wandb",
        action="store_true",
        help="do not add the numbers to the W&B run the checkpoint was trained in",
    )
    parser.add_argument(
        "--threads",
        type=_positive(int),
        default=None,
        help="torch CPU threads (default: 1 for models under a million parameters, where "
        "one thread is fastest, else torch's default)",
    )


def settings_from(args: argparse.Namespace) -> EvaluationSettings:
    """The preset of `--protocol` (or the defaults) with the flags given on top, checked now.

    Example:
        >>> parser = CommandParser()
        >>> add_settings_arguments(parser)
        >>> s = settings_from(parser.parse_args(["--protocol", "rar", "--n-samples", "10"]))
        >>> s.n_samples, s.epsilon
        (10, 0.3)
    """
    base = PROTOCOLS[args.protocol] if getattr(args, "protocol", None) else EvaluationSettings()
    given = {
        name: getattr(args, name) for name in SETTING_FLAGS if getattr(args, name, None) is not None
    }
    for name in ("explainers", "attacks"):
        if name in given:
            given[name] = tuple(given[name])
    settings = dataclasses.replace(base, **given)
    settings.resolved((1024, 1024))  # names, counts and budgets now; `k` again at the image size
    return settings


def default_out(ckpt: str | Path, root: str | Path = "runs/eval") -> Path:
    """`root/<checkpoint path without suffix>`, relative to the working directory (a leading
    `checkpoints/` dropped; symlinks such as `latest` resolved), so two checkpoints never share it.

    Example:
        >>> default_out("checkpoints/digits/version_0/best.ckpt").as_posix()
        'runs/eval/digits/version_0/best'
    """
    path = Path(ckpt).resolve()
    try:
        rel = path.relative_to(Path.cwd().resolve())
    except ValueError:
        rel = Path(*path.parts[-3:])
    if len(rel.parts) > 1 and rel.parts[0] == "checkpoints":
        rel = Path(*rel.parts[1:])
    return Path(root) / rel.with_suffix("")


def _check_out(out: Path, ckpt: str | Path, overwrite: bool) -> None:
    previous = out / "results.json"
    if overwrite or not previous.is_file():
        return
    try:
        other = json.loads(previous.read_text()).get("checkpoint_path")
    except (ValueError, OSError):
        other = None
    if other != str(Path(ckpt).resolve()):
        raise FileExistsError(
            f"`--out` {str(out)!r} holds the results of another checkpoint "
            f"({other or 'unknown'}); pick another --out or pass --overwrite"
        )


def summary_markdown(name: str, result: dict[str, Any], table: str) -> str:
    """summary.md: the table, where it came from, the settings and how to read each metric."""
    settings = result.get("settings", {})
    lines = [
        f"# Robustness of {name}",
        "",
        table,
        "",
        f"Checkpoint: `{result.get('checkpoint')}` (epoch {result.get('epoch', '-')}); "
        f"{result.get('split', 'test')} split; {result.get('n_samples', '-')} images, "
        f"{result.get('n_attacked', '-')} attacked.",
        "",
        "## Settings",
        "",
        "| setting | value |",
        "|---|---|",
    ]
    lines += [f"| {key} | {value} |" for key, value in settings.items()]
    lines += ["", "## How to read it", ""]
    lines += [f"- **{metric}**: {note}." for metric, note in DIRECTIONS]
    return "\n".join(lines) + "\n"


def _record(ckpt: str | Path, result: dict[str, Any], skip: bool) -> None:
    if skip:
        return
    from robust_train.loggers import record_evaluation
    from robust_train.report import to_json

    record_evaluation(checkpoint_meta(ckpt)["wandb_run"], to_json({"r": result})["r"])


def evaluate_main(argv: list[str]) -> int:
    from robust_train.report import summary_table, to_json

    parser = CommandParser(
        prog="robust-train evaluate", description="Robustness suite on one checkpoint."
    )
    parser.add_argument("--ckpt", required=True, help="a .ckpt written by `robust-train fit`")
    parser.add_argument(
        "--out",
        default=None,
        help="folder for results.json and summary.md (default runs/eval/<checkpoint path>)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="write over another checkpoint's results"
    )
    add_settings_arguments(parser)
    args = parser.parse_args(argv)
    settings = settings_from(args)
    if not Path(args.ckpt).is_file():
        raise FileNotFoundError(f"`--ckpt` {args.ckpt!r} does not exist")
    if args.data_config and not Path(args.data_config).is_file():
        raise FileNotFoundError(f"`--data-config` {args.data_config!r} does not exist")
    out = Path(args.out) if args.out else default_out(args.ckpt)
    _check_out(out, args.ckpt, args.overwrite)
    result = evaluate_checkpoint(
        args.ckpt,
        settings,
        data_config=args.data_config,
        split=args.split,
        progress=not args.no_progress,
        threads=args.threads,
    )
    result["checkpoint_path"] = str(Path(args.ckpt).resolve())
    out.mkdir(parents=True, exist_ok=True)
    name = Path(args.ckpt).stem
    (out / "results.json").write_text(json.dumps(to_json({name: result})[name], indent=2))
    table = summary_table({name: result})
    (out / "summary.md").write_text(summary_markdown(args.ckpt, result, table))
    _record(args.ckpt, result, args.no_wandb)
    print(table)
    print(
        f"\nevaluated in {result['evaluation_seconds']:.1f} s; wrote {out / 'results.json'} and "
        f"{out / 'summary.md'}"
    )
    return 0


def compare_main(argv: list[str]) -> int:
    from robust_train.report import summary_table, write_report

    parser = CommandParser(
        prog="robust-train compare",
        description="Evaluate several checkpoints with the same suite; write a report.",
    )
    parser.add_argument("ckpts", nargs="+", help="two or more checkpoints")
    parser.add_argument("--names", nargs="+", help="column names (default: file stems)")
    parser.add_argument(
        "--out", default="runs/compare", help="folder for report.md, results.json and plots"
    )
    add_settings_arguments(parser)
    args = parser.parse_args(argv)
    if len(args.ckpts) < 2:
        raise ValueError(
            f"compare needs two or more checkpoints, got {len(args.ckpts)} "
            "(use `robust-train evaluate --ckpt` for one)"
        )
    names = args.names or [Path(c).stem for c in args.ckpts]
    if len(names) != len(args.ckpts):
        raise ValueError(f"`--names` has {len(names)} entries for {len(args.ckpts)} checkpoints")
    if len(set(names)) != len(names):
        raise ValueError(f"the column names {names} repeat; pass distinct --names")
    settings = settings_from(args)
    for ckpt in args.ckpts:
        if not Path(ckpt).is_file():
            raise FileNotFoundError(f"checkpoint {ckpt!r} does not exist")
    results = {
        n: evaluate_checkpoint(
            c,
            settings,
            data_config=args.data_config,
            split=args.split,
            progress=not args.no_progress,
            threads=args.threads,
        )
        for n, c in zip(names, args.ckpts, strict=True)
    }
    path = write_report(results, args.out)
    print(summary_table(results))
    print(f"\nreport: {path}")
    return 0


def export_main(argv: list[str]) -> int:
    parser = CommandParser(
        prog="robust-train export",
        description="Strip a fit checkpoint to weights + metadata for sharing.",
    )
    parser.add_argument("src")
    parser.add_argument("dst")
    args = parser.parse_args(argv)
    path = export_checkpoint(args.src, args.dst)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
    return 0
