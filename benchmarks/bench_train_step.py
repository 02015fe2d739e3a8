"""Time and peak memory of one optimisation step, plain cross-entropy vs each explanation penalty.

One step = RobustClassifier.training_step (forward, cross-entropy, penalty, the logging calls that
need no Trainer) + loss.backward() + Adam step + zero_grad, on a batch of 64: SmallCNN on 8x8
digits and ResNet18CIFAR on 32x32 synthetic images, both in train mode. All variants of a model
are timed in one process, interleaved round by round; ratios are to the plain step of the same
round. Peak memory: bench_utils.peak_memory, one step after a warm-up step (so Adam's state
already exists and is not counted).

    python -m benchmarks.bench_train_step            # full run: its record, RESULTS.md
    python -m benchmarks.bench_train_step --quick --no-write
    python -m benchmarks.bench_train_step --device cuda --precision bf16 --models resnet18
    python -m benchmarks.bench_train_step --penalties registry --models smallcnn mnist28 smallcnn32

`--penalties registry` times every penalty of `robust_train.regularizers.PENALTIES` (the
leaderboard configs' CPU-sized inner loops, `train_bare.SETTINGS`; a penalty without a bare
formula at `train_bare.LIBRARY_ONLY` or its defaults) and, beside each penalty that has one, a
bare implementation of its formula in plain torch (`train_bare.py`: no RobustClassifier, no
logging; the record says what to add for a penalty that has none); the "vs bare" column is the
library step over the bare step, measured side by side. Models: SmallCNN on 8x8 digits,
MNISTConvNet(16, 32, 128) on 28x28 MNIST-5k digits, SmallCNN on 32x32 synthetic grey images,
ResNet18CIFAR on 32x32 RGB.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from benchmarks import bench_utils as bu
from benchmarks import train_bare
from robust_train import RobustClassifier
from robust_train.regularizers import (
    PENALTIES,
    Curvature,
    ExplanationSmoothness,
    InputGradientNorm,
    LocalLipschitzPenalty,
    PenaltyTerm,
    get_penalty,
)


class _WholeBatchInputGrad(ExplanationSmoothness):
    """The smoothness term with the whole batch's clean forward on inputs that require grad, even
    with `batch_fraction` < 1 (an input gradient of every image in the backward that no term
    reads): the cost that `RobustClassifier` saves by requiring grad only where a term reads it."""

    reuses_clean_forward = True  # type: ignore[assignment]


PLAIN = "plain CE"
PLAIN_3X = "plain CE, 3x batch"
VARIANTS: dict[str, Callable[[], PenaltyTerm | None]] = {
    PLAIN: lambda: None,
    "smoothness (1 sample)": lambda: ExplanationSmoothness(n_samples=1, seed=0),
    "smoothness, quarter batch": lambda: ExplanationSmoothness(seed=0, batch_fraction=0.25),
    "smoothness, quarter batch, whole-batch input grad": lambda: _WholeBatchInputGrad(
        seed=0, batch_fraction=0.25
    ),
    "lipschitz (1 ascent step)": lambda: LocalLipschitzPenalty(seed=0),
    "gradnorm double_backprop": lambda: InputGradientNorm(method="double_backprop"),
    "gradnorm finite_difference": lambda: InputGradientNorm(method="finite_difference"),
    "curvature gradient_difference": lambda: Curvature(method="gradient_difference"),
    "curvature zero_order": lambda: Curvature(method="zero_order", seed=0),
}
# (variant, model key or None for every model, limit on the time ratio)
TIME_TARGETS = [
    ("curvature zero_order", None, 3.0),
    ("gradnorm double_backprop", None, 3.0),
    ("smoothness (1 sample)", "resnet18", 5.0),
]
MEMORY_LIMIT = 3.0
BARE_LIMIT = 1.3


def make_setup(key: str, quick: bool, batch: int) -> tuple[str, nn.Module, Tensor, Tensor]:
    """(label, model, images, labels) for "smallcnn" (8x8 digits), "mnist28" (28x28 MNIST-5k),
    "smallcnn32" (32x32 grey) or "resnet18" (32x32 RGB)."""
    torch.manual_seed(0)
    if key == "mnist28":
        from robust_train.data import load_mnist5k_tensors
        from robust_train.models import MNISTConvNet

        x, y = load_mnist5k_tensors()
        model = MNISTConvNet(channels=(4, 8) if quick else (16, 32), hidden=32 if quick else 128)
        label = "MNISTConvNet(4, 8, 32)" if quick else "MNISTConvNet(16, 32, 128)"
        return f"{label}, 28x28 MNIST-5k", model, x[:batch], y[:batch]
    if key == "smallcnn":
        from robust_train.data import load_digits_tensors
        from robust_train.models import SmallCNN

        x, y = load_digits_tensors()
        model = SmallCNN(width=8 if quick else 32)
        return f"SmallCNN{'(width=8)' if quick else ''}, 8x8 digits", model, x[:batch], y[:batch]
    from robust_train.data import SyntheticDataModule
    from robust_train.models import ResNet18CIFAR, SmallCNN

    if key == "smallcnn32":
        dm = SyntheticDataModule(num_samples=batch, image_size=32, in_channels=1, seed=0)
        dm.setup("fit")
        x, y = dm.train_set[:batch]
        return "SmallCNN, 32x32 grey", SmallCNN(input_size=32, width=8 if quick else 32), x, y

    dm = SyntheticDataModule(num_samples=batch, image_size=32, seed=0)
    dm.setup("fit")
    x, y = dm.train_set[:batch]
    model = ResNet18CIFAR(width=4 if quick else 64)
    return f"ResNet18CIFAR{'(width=4)' if quick else ''}, 32x32", model, x, y


def make_step(
    base: nn.Module,
    term: PenaltyTerm | None,
    x: Tensor,
    y: Tensor,
    device: torch.device,
    bf16: bool,
) -> Callable[[], None]:
    """One optimisation step of a fresh copy of `base` with the penalty `term`."""
    module = RobustClassifier(copy.deepcopy(base), penalties=[term] if term else None).to(device)
    module.train()
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-3)
    batch = (x.to(device), y.to(device))

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = module.training_step(batch, 0)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def profile_step(step: Callable[[], None], rows: int = 12) -> str:
    """Top ops by self CPU time of one step (torch.profiler), for the variants that miss."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def registry_steps(
    base: nn.Module, x: Tensor, y: Tensor, device: torch.device
) -> tuple[dict[str, Callable[[], None]], list[str]]:
    """The plain step, one library step per registered penalty (`train_bare.term_settings`)
    and, beside each penalty that has one, its bare formula's step; and one note per penalty
    without a bare formula, saying what to add."""
    steps = {PLAIN: make_step(base, None, x, y, device, False)}
    notes = []
    for name in PENALTIES:
        settings = train_bare.term_settings(name)
        steps[name] = make_step(base, get_penalty(name, **settings), x, y, device, False)
        if name in train_bare.BARE:
            steps[f"{name}, bare"] = train_bare.bare_step(
                name, copy.deepcopy(base).to(device), x, y
            )
        else:
            notes.append(
                f"- {name}: library step only ({settings}); " + train_bare.missing_message(name)
            )
        if name == "smoothness":  # no double backprop through the clean map
            detached = get_penalty(name, **settings, detach_clean=True)
            steps["smoothness (detach_clean)"] = make_step(base, detached, x, y, device, False)
    return steps, notes


def run_registry(key: str, args, device: torch.device, record: bu.Record) -> list[str]:
    """Every registered penalty beside its bare formula (train_bare.py) and the plain step."""
    label, base, x, y = make_setup(key, args.quick, args.batch)
    x, y = x.to(device), y.to(device)
    steps, notes = registry_steps(base, x, y, device)
    for step in steps.values():
        step()
    memory = {name: bu.peak_memory(step, device) for name, step in steps.items()}
    rounds = args.repeats or (1 if args.quick else 5)
    timings = bu.time_interleaved(
        steps,
        PLAIN,
        rounds=rounds,
        device=device,
        warmup=False,
        min_sample_seconds=0.05 if args.quick else 0.3,
    )
    rows, verdicts = [], []
    for name, t in timings.items():
        vs_bare = ""
        if f"{name}, bare" in timings:
            ratio, spread = bu.pair_ratio(timings, name, f"{name}, bare")
            vs_bare = f"{ratio:.2f} ({spread})"
            verdicts.append(
                f"- {label}: {name} <= {BARE_LIMIT:g}x its bare formula: "
                + bu.verdict(ratio, BARE_LIMIT)
            )
        ratio_memory = memory[name] / max(memory[PLAIN], 1)
        rows.append([name, t.median * 1e3, t.ratio, vs_bare, memory[name] / 2**20, ratio_memory])
    record.add(
        f"### every registered penalty, {label}, batch {x.shape[0]}, {rounds} round(s)\n\n"
        f"ms/step and ratios: {bu.clock_name(device)}, median over rounds; settings: "
        "train_bare.SETTINGS (the leaderboard configs' inner loops; a penalty without a bare "
        "formula at train_bare.LIBRARY_ONLY or its defaults).\n\n"
        + bu.table(
            ["variant", "ms/step", "vs plain", "vs bare formula", "peak MB", "memory vs plain"],
            rows,
        )
        + ("\n\nWithout a bare formula:\n\n" + "\n".join(notes) if notes else "")
    )
    return verdicts


def run_model(key: str, args, device: torch.device, record: bu.Record) -> list[str]:
    """The default variants (VARIANTS and the plain step on a 3x batch) on model `key`."""
    label, base, x, y = make_setup(key, args.quick, args.batch)
    bf16 = args.precision == "bf16"
    steps = {
        name: make_step(base, factory(), x, y, device, bf16) for name, factory in VARIANTS.items()
    }
    steps[PLAIN_3X] = make_step(base, None, x.repeat(3, 1, 1, 1), y.repeat(3), device, bf16)
    for step in steps.values():  # warm-up: Adam state, lazy initialisation
        step()
    memory = {name: bu.peak_memory(step, device) for name, step in steps.items()}
    rounds = args.repeats or (1 if args.quick else (3 if key == "resnet18" else 7))
    timings = bu.time_interleaved(
        steps,
        PLAIN,
        rounds=rounds,
        device=device,
        warmup=False,
        min_sample_seconds=0.05 if args.quick else 0.5,
    )
    record.add(
        f"### {label}, batch {x.shape[0]}, {args.precision}, {rounds} round(s)\n\n"
        f"ms/step and ratios: {bu.clock_name(device)}, median over rounds. "
        f"`{PLAIN_3X}` is the plain step on a batch three times as large: the compute "
        "of the zero-order curvature (x, x + hu, x - hu), without its overhead.\n\n"
        + _model_table(timings, memory)
    )
    verdicts, misses = _time_verdicts(key, label, timings)
    verdicts += _memory_verdicts(label, memory)
    if args.profile:
        for name in dict.fromkeys(misses + [PLAIN]):
            print(f"profile of one step, {label}, {name}:\n{profile_step(steps[name])}")
    return verdicts


def _model_table(timings: dict[str, bu.Timing], memory: dict[str, float]) -> str:
    """Time (CPU and wall), its ratio to plain and memory of every variant, as a table."""
    rows = [
        [
            name,
            t.median * 1e3,
            t.median_wall * 1e3,
            t.ratio,
            t.spread(),
            memory[name] / 2**20,
            memory[name] / max(memory[PLAIN], 1),
        ]
        for name, t in timings.items()
    ]
    header = [
        "variant",
        "ms/step",
        "wall ms/step",
        "time ratio",
        "ratio range",
        "peak MB",
        "memory ratio",
    ]
    return bu.table(header, rows)


def _time_verdicts(
    key: str, label: str, timings: dict[str, bu.Timing]
) -> tuple[list[str], list[str]]:
    """The TIME_TARGETS lines of model `key` and the variants that missed theirs."""
    verdicts, misses = [], []
    for name, model_key, limit in TIME_TARGETS:
        if model_key not in (None, key):
            continue
        line = f"- {label}: {name} time <= {limit:g}x plain: " + bu.verdict(
            timings[name].ratio, limit
        )
        if name == "curvature zero_order":
            floor, spread = bu.pair_ratio(timings, name, PLAIN_3X)
            line += (
                f"; its compute floor ({PLAIN_3X}) costs {timings[PLAIN_3X].ratio:.2f}x "
                f"plain, zero_order / floor = {floor:.2f} ({spread})"
            )
        verdicts.append(line)
        if timings[name].ratio > limit:
            misses.append(name)
    return verdicts, misses


def _memory_verdicts(label: str, memory: dict[str, float]) -> list[str]:
    """One MEMORY_LIMIT line per penalty variant."""
    return [
        f"- {label}: {name} peak memory <= {MEMORY_LIMIT:g}x plain: "
        f"{bu.verdict(memory[name] / max(memory[PLAIN], 1), MEMORY_LIMIT)}"
        for name in VARIANTS
        if name not in (PLAIN, PLAIN_3X)
    ]


def main(argv: Sequence[str] | None = None) -> str:
    parser = bu.base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        nargs="+",
        default=["smallcnn", "resnet18"],
        choices=["smallcnn", "mnist28", "smallcnn32", "resnet18"],
    )
    parser.add_argument(
        "--penalties",
        default="default",
        choices=["default", "registry"],
        help="registry: every PENALTIES entry beside its bare formula",
    )
    parser.add_argument("--batch", type=int, default=None, help="batch size (default 64; 8 quick)")
    parser.add_argument(
        "--precision",
        default="32",
        choices=["32", "bf16"],
        help="bf16: the step runs under torch.autocast(bfloat16)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="print torch.profiler top ops of the plain step and of every miss",
    )
    args = parser.parse_args(argv)
    args.batch = args.batch or (8 if args.quick else 64)
    device = bu.setup_torch(args)
    warnings.filterwarnings("ignore", message=".*self.log.*")
    run = run_registry if args.penalties == "registry" else run_model
    return bu.record_models("bench_train_step", args, device, argv, run)


if __name__ == "__main__":
    main()
