"""`robust-train evaluate`, `compare` and `export`: the evaluation engine on saved checkpoints.

    robust-train evaluate --ckpt checkpoints/digits_baseline/latest/best.ckpt
    robust-train evaluate --ckpt checkpoints/digits_robust.ckpt --protocol rar --n-samples 50
    robust-train compare checkpoints/digits_baseline.ckpt checkpoints/digits_robust.ckpt \
        --out runs/compare
    robust-train evaluate --model torchvision:resnet50 --weights my.pth --data-config data.yaml

Every argument is checked (names of explainers and attacks, positive counts, budgets, files) before
a checkpoint is loaded; the flags are the fields of `EvaluationSettings`
(`robust_train.app.settings_flags`). `evaluate` writes results.json and summary.md (the numbers
under the engine's key scheme, the settings and how to read each measure) to `--out`, by default
`runs/eval/<the checkpoint's path>/<settings>` (checkpoints/x/version_0/best.ckpt with the default
settings -> runs/eval/x/version_0/best/default; `--protocol rar` -> .../rar; other flags ->
.../custom-<hash>), and refuses to write over results of another checkpoint or of other settings (or
over files that are not an evaluation's) unless `--overwrite`; `compare` does the same for its
folder. `--out` and every file written there are checked before any work (a file where the folder
goes, a symlink, a folder where a file goes: one line naming `--out`, exit 2); files are written
whole (a temporary file renamed over the name, `robust_train.core.files`) and never through a
symlink. The images are a seeded, class-stratified subset of the split (`--n-samples` of them,
seeded with `--seed`), said in the output, results.json and summary.md. When a checkpoint records
the W&B run it was trained in, the numbers are also added to that run's summary (`eval/<key>`). A
model not trained here is given by `--model` (and `--weights`; for `compare` the positional files
are then weights): see `robust_train.app.model_source`. Before any work one probe forward checks the
data's channels, image size and classes against the model (`robust_train.models.input_check`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from robust_train.app.checkpoint_io import (
    FitCheckpoint,
    add_trust_argument,
    check_input_file,
    evaluate_checkpoint,
    export_checkpoint,
    read_fit_checkpoint,
)
from robust_train.app.model_source import (
    ModelSource,
    add_model_source_arguments,
    evaluate_model_source,
    model_source_from,
)
from robust_train.app.settings_flags import (
    CommandParser,
    add_settings_arguments,
    device_from,
    settings_from,
)
from robust_train.app.shipped_files import file_argument
from robust_train.core.files import (
    check_results_folder,
    write_json,
    write_text,
    write_with,
)
from robust_train.core.resources import shipped_name
from robust_train.evaluation import PROTOCOLS, EvaluationSettings

__all__ = [
    "checkpoint_folder",
    "compare_main",
    "default_names",
    "default_out",
    "evaluate_main",
    "export_main",
    "settings_tag",
    "evaluation_summary_markdown",
]


def settings_tag(settings: EvaluationSettings) -> str:
    """A folder name for a set of settings: "default", the protocol's name, or
    "custom-<8 hex of the settings>".

    Examples:
        >>> settings_tag(EvaluationSettings()), settings_tag(PROTOCOLS["rar"])
        ('default', 'rar')
        >>> settings_tag(EvaluationSettings(n_samples=10))[:7]
        'custom-'
    """
    for name, preset in (("default", EvaluationSettings()), *PROTOCOLS.items()):
        if settings == preset:
            return name
    text = json.dumps(_plain_settings(settings), sort_keys=True)
    return "custom-" + hashlib.sha256(text.encode()).hexdigest()[:8]


def _plain_settings(settings: EvaluationSettings) -> dict[str, Any]:
    return {
        k: list(v) if isinstance(v, tuple) else v
        for k, v in settings.as_dict().items()
        if k != "extra"
    }


def checkpoint_folder(ckpt: str | Path, root: str | Path) -> Path:
    """`root/<checkpoint path without suffix>`, relative to the working directory (a leading
    `checkpoints/` dropped; symlinks such as `latest` resolved).

    Examples:
        >>> checkpoint_folder("checkpoints/digits/version_0/best.ckpt", "runs/x").as_posix()
        'runs/x/digits/version_0/best'
    """
    path = Path(ckpt).resolve()
    shipped = shipped_name(path)  # checkpoints/<name>.ckpt of the package
    try:
        rel = Path(shipped) if shipped else path.relative_to(Path.cwd().resolve())
    except ValueError:
        rel = Path(*path.parts[-3:])
    if len(rel.parts) > 1 and rel.parts[0] == "checkpoints":
        rel = Path(*rel.parts[1:])
    return Path(root) / rel.with_suffix("")


def default_out(
    ckpt: str | Path, settings: EvaluationSettings | None = None, root: str | Path = "runs/eval"
) -> Path:
    """`root/<checkpoint path without suffix>/<settings_tag>`, so two checkpoints, or two sets of
    settings, never share it.

    Examples:
        >>> default_out("checkpoints/digits/version_0/best.ckpt").as_posix()
        'runs/eval/digits/version_0/best/default'
    """
    return checkpoint_folder(ckpt, root) / settings_tag(settings or EvaluationSettings())


def _check_out(
    out: Path,
    checkpoints: list[str],
    settings: EvaluationSettings,
    overwrite: bool,
    outputs: Sequence[str],
) -> bool:
    """Check `--out` and the files a command writes there before any work; True when they may be
    replaced: `--overwrite`, or a re-run (results.json holds the same checkpoints and settings).
    Refused: a folder whose results.json holds other checkpoints or settings, files there that
    no evaluation wrote, a symlink or folder where a file goes."""
    wanted = sorted(str(Path(c).resolve()) for c in checkpoints)
    tag = settings_tag(settings)

    def other_run(held: Any) -> str | None:
        runs = held.values() if isinstance(held, dict) else []
        paths = sorted(str(r.get("checkpoint_path")) for r in runs if isinstance(r, dict))
        same_settings = all(isinstance(r, dict) and r.get("settings_tag") == tag for r in runs)
        if paths == wanted and same_settings:
            return None
        return "other settings" if paths == wanted else f"other checkpoints ({', '.join(paths)})"

    return check_results_folder(out, outputs, overwrite=overwrite, other_run=other_run)


def default_names(paths: Sequence[str | Path]) -> list[str]:
    """Column names for `compare`: the files' stems, with as many parent folders as it takes
    to tell them apart (two runs' `last.ckpt` are not both "last").

    Examples:
        >>> default_names(["runs/a.ckpt", "runs/b.ckpt"])
        ['a', 'b']
        >>> default_names(["ck/x/latest/last.ckpt", "ck/y/latest/last.ckpt"])
        ['x/latest/last', 'y/latest/last']
    """
    parts = [Path(p).with_suffix("").parts for p in paths]
    for depth in range(1, max(map(len, parts), default=1) + 1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return [str(p) for p in paths]


def evaluation_summary_markdown(
    name: str, result: dict[str, Any], table: str, closing: Sequence[str] = ()
) -> str:
    """summary.md: the table (with 95% intervals over images), the budget and verdicts
    (`closing`), where it came from, the settings and how to read each measure."""
    from robust_train.app.report import chance_and_cost_markdown, how_to_read

    measures = result.get("measures", {})
    lines = [
        f"# Robustness of {name}",
        "",
        table,
        "",
        chance_and_cost_markdown({Path(name).stem: result}),
        *[f"- {line}" for line in closing],
        *([""] if closing else []),
        (
            f"Model: `{result['model']}` with weights `{result.get('weights') or 'none given'}`; "
            if result.get("model")
            else f"Checkpoint: `{result.get('checkpoint')}` (epoch {result.get('epoch', '-')}); "
        )
        + f"{result.get('split', 'test')} split; {result.get('n_images', '-')} images, "
        f"{int(measures.get('n_attacked') or 0)} attacked.",
        "",
        *_subset_lines(result.get("subset")),
        "## Settings",
        "",
        "| setting | value |",
        "|---|---|",
    ]
    lines += [f"| {key} | {value} |" for key, value in result.get("settings", {}).items()]
    lines += ["", "## How to read it", "", *how_to_read(measures)]
    return "\n".join(lines) + "\n"


def _subset_lines(subset: dict[str, Any] | None) -> list[str]:
    if not subset:
        return []
    per_class = ", ".join(f"{c}: {n}" for c, n in subset.get("per_class", {}).items())
    return [
        f"Images: {subset['n_images']} of the {subset['split_size']} images of the split, "
        f"{subset['selection']} (seed {subset['seed']}; per class {per_class}).",
        "",
    ]


def _record(checkpoint: FitCheckpoint | None, result: dict[str, Any], skip: bool) -> None:
    if skip or checkpoint is None:
        return
    from robust_train.app.report import to_json
    from robust_train.training.loggers import record_evaluation

    record_evaluation(checkpoint.meta["wandb_run"], to_json({"r": result})["r"]["measures"])


def _read_all(
    args: Any, checkpoints: list[str], sources: list[ModelSource] | None, flag: str = "--ckpt"
) -> list[FitCheckpoint]:
    """Every checkpoint read once, before any work (readable, class paths checked); a model
    given by `--model` has weights files instead, checked by robust_train.app.model_source."""
    for ckpt in [] if sources is None else [s.weights for s in sources if s.weights]:
        check_input_file(ckpt, "--weights")
    if args.data_config:
        check_input_file(args.data_config, "--data-config")
    if sources is not None:
        return []
    trust = dict(trusted=args.trust_checkpoint, trust_class_path=args.trust_class_path)
    return [read_fit_checkpoint(c, **trust, flag=flag) for c in checkpoints]


def _evaluate_all(
    args: Any,
    read: list[FitCheckpoint],
    settings: EvaluationSettings,
    sources: list[ModelSource] | None = None,
) -> list[Any]:
    if sources is not None:  # --model: a model not trained here (robust_train.app.model_source)
        return [_source_result(args, source, settings) for source in sources]
    run = _run_options(args)
    return [_tagged(evaluate_checkpoint(c, settings, **run), str(c.path), settings) for c in read]


def _run_options(args: Any) -> dict[str, Any]:
    """The evaluation options every checkpoint or model source of one command shares."""
    return dict(
        data_config=args.data_config, split=args.split, progress=not args.no_progress,
        threads=args.threads, device=args.device,
    )  # fmt: skip


def _tagged(result: dict[str, Any], path: str, settings: EvaluationSettings) -> dict[str, Any]:
    result["checkpoint_path"] = str(Path(path).resolve())
    result["settings_tag"] = settings_tag(settings)
    return result


def _source_result(args: Any, source: ModelSource, settings: EvaluationSettings) -> Any:
    result = evaluate_model_source(source, settings, **_run_options(args))
    return _tagged(result, source.label, settings)


def evaluate_main(argv: list[str]) -> int:
    from robust_train.app.evaluate_output import closing_lines, evaluate_table
    from robust_train.app.report import chance_and_cost_markdown, to_json
    from robust_train.app.verdict_figure import write_verdict_figure

    parser = CommandParser(
        prog="robust-train evaluate", description="Robustness evaluation of one checkpoint."
    )
    parser.add_argument(
        "--ckpt",
        type=file_argument("checkpoints", "`--ckpt`"),
        help="a .ckpt written by `robust-train fit` or a shipped one by name (or use --model)",
    )
    add_model_source_arguments(parser)
    parser.add_argument(
        "--out",
        default=None,
        help="folder for results.json and summary.md (default runs/eval/<checkpoint>/<settings>)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="write over other results in --out"
    )
    add_trust_argument(parser)
    add_settings_arguments(parser)
    args = parser.parse_args(argv)
    settings = settings_from(args)
    args.device = device_from(args)
    source = model_source_from(args)
    if (args.ckpt is None) == (source is None):
        raise ValueError(
            "give `--ckpt` (a fit checkpoint) or `--model` (with --weights and --data-config), "
            f"not {'both' if source else 'neither'}"
        )
    target = args.ckpt if source is None else source.label
    out = Path(args.out) if args.out else default_out(target, settings)
    outputs = ["results.json", "summary.md", "verdict.png"]
    replace = _check_out(out, [target], settings, args.overwrite, outputs)
    sources = None if source is None else [source]
    read = _read_all(args, [target], sources)
    (result,) = _evaluate_all(args, read, settings, sources)
    name = Path(target).stem
    write_json(out / "results.json", to_json({name: result}), overwrite=replace, flag="--out")
    table = evaluate_table(result)
    closing = closing_lines({name: result})
    summary = evaluation_summary_markdown(target, result, table, closing)
    write_text(out / "summary.md", summary, overwrite=replace, flag="--out")
    figure = write_with(
        out / "verdict.png", lambda p: write_verdict_figure({name: result}, p), overwrite=replace
    )
    _record(read[0] if read else None, result, args.no_wandb)
    print(table)
    print(chance_and_cost_markdown({name: result}))
    print("\n" + "\n".join(closing))
    print(
        f"\nevaluated in {result['evaluation_seconds']:.1f} s; wrote {out / 'results.json'}, "
        f"{out / 'summary.md'}" + (f" and {figure}" if figure else "")
    )
    return 0


def compare_main(argv: list[str]) -> int:
    from robust_train.app.evaluate_output import closing_lines
    from robust_train.app.report import (
        REPORT_FILES,
        chance_and_cost_markdown,
        summary_table,
        write_report,
    )
    from robust_train.app.verdict_figure import write_verdict_figure

    parser = CommandParser(
        prog="robust-train compare",
        description="Evaluate several checkpoints with the same settings; write a report.",
    )
    parser.add_argument(
        "ckpts",
        nargs="+",
        type=file_argument("checkpoints", "checkpoint"),
        help="two or more checkpoints (with --model: weights files)",
    )
    add_model_source_arguments(parser, weights=False)
    parser.add_argument("--names", nargs="+", help="column names (default: file stems)")
    parser.add_argument(
        "--out", default="runs/compare", help="folder for report.md, results.json and plots"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="write over other results in --out"
    )
    add_trust_argument(parser)
    add_settings_arguments(parser)
    args = parser.parse_args(argv)
    if len(args.ckpts) < 2:
        raise ValueError(
            f"compare needs two or more checkpoints, got {len(args.ckpts)} "
            "(use `robust-train evaluate --ckpt` for one)"
        )
    names = args.names or default_names(args.ckpts)
    if len(names) != len(args.ckpts):
        raise ValueError(f"`--names` has {len(names)} entries for {len(args.ckpts)} checkpoints")
    if len(set(names)) != len(names):
        raise ValueError(f"the column names {names} repeat; pass distinct --names")
    settings = settings_from(args)
    args.device = device_from(args)
    source = model_source_from(args)
    sources = None if source is None else [ModelSource(source.spec, c) for c in args.ckpts]
    outputs = (*REPORT_FILES, "verdict.png")
    replace = _check_out(Path(args.out), list(args.ckpts), settings, args.overwrite, outputs)
    read = _read_all(args, list(args.ckpts), sources, flag="ckpts")
    results = dict(zip(names, _evaluate_all(args, read, settings, sources), strict=True))
    histories = {n: c.recorded.get("history") or {} for n, c in zip(names, read, strict=False)}
    path = write_report(results, args.out, histories=histories, overwrite=replace)
    figure = write_with(
        Path(args.out) / "verdict.png",
        lambda p: write_verdict_figure(results, p),
        overwrite=replace,
    )
    print(summary_table(results))
    print(chance_and_cost_markdown(results))
    print("\n" + "\n".join(closing_lines(results)))
    print(f"\nreport: {path}" + (f"; verdict figure: {figure}" if figure else ""))
    return 0


def export_main(argv: list[str]) -> int:
    parser = CommandParser(
        prog="robust-train export",
        description="Strip a fit checkpoint to weights + metadata for sharing.",
    )
    parser.add_argument(
        "src",
        type=file_argument("checkpoints", "`src`"),
        help="a checkpoint written by `robust-train fit` (or a shipped one by name)",
    )
    parser.add_argument(
        "dst", help="the copy to write (not src; an existing file needs --overwrite)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing dst")
    add_trust_argument(parser)
    args = parser.parse_args(argv)
    path = export_checkpoint(
        args.src,
        args.dst,
        trusted=args.trust_checkpoint,
        overwrite=args.overwrite,
        trust_class_path=args.trust_class_path,
    )
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
    return 0
