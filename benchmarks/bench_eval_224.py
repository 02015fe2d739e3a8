"""Seconds per image of `robust-train evaluate` at 224 x 224, per explainer: default and `fast`.

The evaluation engine (`robust_train.evaluation.run_parts`, what `robust-train evaluate` runs)
on an untrained torchvision ResNet-18 (`TorchvisionClassifier`, 3 classes, ImageNet
normalisation as a layer) and `--images` random [0, 1] RGB images whose labels are the model's
own predictions (so every image is attacked, as correctly classified ones are). Two presets:

- "default": `EvaluationSettings()`, the settings of a plain `robust-train evaluate` (the attack
  ensemble with its random search, Lipschitz estimate, fidelity curves, the "map = input"
  reference);
- "fast": `PROTOCOLS["fast"]` (one attack per objective instead of the ensemble).

Each explainer of the preset runs alone (the preset with `explainers=(name,)`; the reference's
attacks run with the first explainer), so every row is what that explainer adds. Per row: the
work the engine plans (`total_work`, in attack steps per image, each kind of work weighed by its
passes, which the progress bar's time left is based on), the process CPU seconds (one thread:
`--threads`) and wall seconds per image, and the seconds per unit of work. `--presets` picks
presets; a preset left out of the measured ones but named in `--estimate` is not run: its
seconds per image are estimated from its planned work and the seconds per unit measured for the
same explainer in the first measured preset (marked "estimated"). `--explainers` replaces the
presets' explainers (saliency and input x gradient) with others (grad_cam, ...). `--cache DIR`
keeps each measured row as a JSON file in DIR and reads it back instead of measuring again, so
that a long run stopped half way continues where it stopped when run again with the same flags.
`--device cuda` runs on a GPU (wall time).

    python -m benchmarks run bench_eval_224                  # fast measured, default estimated
    python -m benchmarks run bench_eval_224 --presets default fast --images 1
    python -m benchmarks run bench_eval_224 --quick --no-write  # 32 x 32, 1 image
    python -m benchmarks run bench_eval_224 --explainers grad_cam --cache runs/eval_224_rows
"""

from __future__ import annotations

import dataclasses
import io
import json
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from benchmarks import bench_utils as bu

PRESETS = ("default", "fast")


QUICK = {"n_steps": 1, "search_queries": 2, "lipschitz_samples": 1, "fidelity_steps": 2,
         "noise_draws": 1}  # fmt: skip


def preset(name: str, quick: bool = False) -> Any:
    """The EvaluationSettings of a preset name (quick: its work shrunk to a smoke run's)."""
    from robust_train.evaluation import PROTOCOLS, EvaluationSettings

    settings = EvaluationSettings() if name == "default" else PROTOCOLS[name]
    return dataclasses.replace(settings, **QUICK) if quick else settings


def make_setup(size: int, n_images: int, device: torch.device) -> tuple[Any, Any, Any]:
    """(untrained ResNet-18 in eval mode, images, the model's own labels), seeded."""
    from robust_train.models import TorchvisionClassifier

    torch.manual_seed(0)
    model = TorchvisionClassifier("resnet18", num_classes=3, weights=None).to(device).eval()
    x = torch.rand(n_images, 3, size, size, device=device)
    with torch.no_grad():
        y = model(x).argmax(1)
    return model, x, y


class EtaLog:
    """The progress bar of `robust-train evaluate` (`engine.progress_bar`: the same weighted
    total and its average rate, no smoothing), written to a buffer; at each update it keeps the
    seconds spent, the share done and the time left the bar would print."""

    def __init__(self) -> None:
        self.points: list[tuple[float, float, float]] = []  # (seconds spent, share, time left)

    def bar(self, parts: Any, n_images: int, *, enabled: bool) -> Any:
        from tqdm.auto import tqdm

        from robust_train.evaluation import total_work

        log = self
        bar = tqdm(
            total=total_work(parts, n_images), file=io.StringIO(), mininterval=0.0, smoothing=0.0
        )
        update = bar.update

        def logged(n: float = 1) -> Any:
            out = update(n)
            info = bar.format_dict
            total, spent = info["total"] or 1.0, info["elapsed"]
            rate = info.get("rate") or (info["n"] / spent if spent > 0 else None)
            left = (total - info["n"]) / rate if rate else float("nan")
            log.points.append((info["elapsed"], info["n"] / total, left))
            return out

        bar.update = logged
        return bar

    def ratios(self, seconds: float) -> dict[str, float]:
        """Time left as printed / time left in fact, at the bar's first estimate and at the first
        update past 10 %, 25 % and 50 % of the work."""
        out: dict[str, float] = {}
        for label, share in (("first", 0.0), ("10%", 0.1), ("25%", 0.25), ("50%", 0.5)):
            for spent, done, left in self.points:
                if done > share and done < 1.0 and left == left and seconds - spent > 0:
                    out[label] = left / (seconds - spent)
                    break
        return out


def measure(settings: Any, model: Any, x: Any, y: Any, device: torch.device) -> dict[str, Any]:
    """Work per image, CPU and wall seconds per image of one engine run, and the ratios of the
    time left its progress bar would print to the time it took (`EtaLog.ratios`)."""
    from robust_train.evaluation import build_parts, engine, run_parts, total_work

    settings = dataclasses.replace(settings, n_samples=len(y))
    parts = build_parts(settings, *x.shape[-2:])
    work = total_work(parts, 1)
    eta = EtaLog()
    bu.synchronize(device)
    wall, cpu = time.perf_counter(), time.process_time()
    with mock.patch.object(engine, "progress_bar", eta.bar):
        run_parts(model, x, y, settings, parts=parts)
    bu.synchronize(device)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    clock = cpu if device.type == "cpu" else wall
    n = len(y)
    return {"work": work, "cpu_s": cpu / n, "wall_s": wall / n, "s_per_unit": clock / n / work,
            "eta_ratio": eta.ratios(wall)}  # fmt: skip


def cached_measure(
    key: str, cache: Path | None, settings: Any, setup: tuple[Any, Any, Any], device: torch.device
) -> dict[str, float]:
    """`measure`, or the row stored under `key` in `cache` by an earlier run (then stored)."""
    path = None if cache is None else cache / f"{key}.json"
    if path is not None and path.is_file():
        return dict(json.loads(path.read_text()))
    m = measure(settings, *setup, device)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(m) + "\n")
    return m


def row_key(name: str, settings: Any, args: Any, device: torch.device, n_images: int) -> str:
    """The cache name of one measured row: everything its seconds depend on (the row that runs
    the reference's attacks too is named "+reference")."""
    quick = "_quick" if args.quick else ""
    ref = "+reference" if settings.input_reference else ""
    return (f"{name}_{settings.explainers[0]}{ref}_{args.size}px_{n_images}img_{args.threads}t_"
            f"{device.type}{quick}")  # fmt: skip


def rows_for(
    name: str, args: Any, setup: tuple[Any, Any, Any], device: torch.device, per_unit: dict
) -> list[list[object]]:
    """One row per explainer of the preset: measured, or estimated from `per_unit`."""
    from robust_train.evaluation import build_parts, total_work

    base = preset(name, args.quick)
    if args.explainers:
        base = dataclasses.replace(base, explainers=tuple(args.explainers))
    rows = []
    for i, explainer in enumerate(base.explainers):
        settings = dataclasses.replace(
            base, explainers=(explainer,), input_reference=base.input_reference and i == 0
        )
        if name in args.presets:
            key = row_key(name, settings, args, device, len(setup[2]))
            m = cached_measure(key, args.cache, settings, setup, device)
            per_unit.setdefault(explainer, m["s_per_unit"])
            eta = m.get("eta_ratio", {})
            rows.append([name, explainer, "measured", m["work"], m["cpu_s"], m["wall_s"],
                         m["s_per_unit"], eta.get("first", float("nan")),
                         eta.get("25%", float("nan"))])  # fmt: skip
        elif explainer in per_unit:
            work = total_work(build_parts(settings, *setup[1].shape[-2:]), 1)
            seconds = work * per_unit[explainer]
            rows.append([name, explainer, "estimated", work, seconds, float("nan"),
                         per_unit[explainer], float("nan"), float("nan")])  # fmt: skip
    return rows


def parse(argv: Sequence[str] | None) -> Any:
    """The flags, checked before any work (a bad one: argparse's usage error, exit 2)."""
    parser = bu.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2, help="images evaluated (quick: 1)")
    parser.add_argument("--size", type=int, default=None, help="image side (224; quick 32)")
    parser.add_argument(
        "--presets", nargs="+", default=["fast"], choices=PRESETS, help="presets measured"
    )
    parser.add_argument(
        "--estimate", nargs="*", default=["default"], choices=PRESETS,
        help="presets estimated from the measured seconds per unit of work (when not measured)",
    )  # fmt: skip
    parser.add_argument(
        "--explainers", nargs="+", default=None,
        help="explainers measured instead of the presets' own (saliency, input_x_gradient)",
    )  # fmt: skip
    parser.add_argument(
        "--cache", type=Path, default=None,
        help="folder of measured rows: each one stored there, an existing one read, not re-run",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.size = args.size or (32 if args.quick else 224)
    args.images = 1 if args.quick else args.images
    if args.images < 1:
        parser.error(f"--images must be >= 1, got {args.images}")
    if args.size < 32:
        parser.error(f"--size must be >= 32, got {args.size}")
    if args.explainers:
        try:
            dataclasses.replace(preset("fast"), explainers=tuple(args.explainers))
        except (ValueError, TypeError) as err:
            parser.error(f"--explainers {' '.join(args.explainers)}: {err}")
    return args


def main(argv: Sequence[str] | None = None) -> str:
    args = parse(argv)
    device = bu.setup_torch(args)
    warnings.filterwarnings("ignore")
    record = bu.Record("bench_eval_224", args, device, argv)
    setup = make_setup(args.size, args.images, device)
    per_unit: dict[str, float] = {}
    rows = []
    order = [p for p in PRESETS if p in args.presets] + [
        p for p in PRESETS if p in args.estimate and p not in args.presets
    ]
    for name in order:
        rows += rows_for(name, args, setup, device, per_unit)
    seconds_head = "CPU s / image" if device.type == "cpu" else "wall s / image"
    record.add(
        f"### ResNet-18, {args.size}x{args.size}, {args.images} image(s), "
        f"{args.threads} thread(s)\n\n"
        "Each explainer alone with its preset's parts and attacks (the reference's attacks "
        "with the first explainer); work: attack steps per image, each kind of work weighed "
        "by its passes (`total_work`); estimated rows: work x the seconds per unit measured for "
        "that explainer. Time left / true: the time left the progress bar of "
        "`robust-train evaluate` would print (its first estimate, and at the first update past "
        "25 % of the work) over the wall time the run then took.\n\n"
        + bu.table(
            [
                "preset",
                "explainer",
                "how",
                "work / image",
                seconds_head,
                "wall s / image",
                "s / unit",
                "time left / true: first",
                "at 25 %",
            ],
            rows,
        )  # fmt: skip
    )
    return record.finish()


if __name__ == "__main__":
    main()
