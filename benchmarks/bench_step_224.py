"""Seconds per training step at 224 x 224: plain cross-entropy vs the every-map recipe, levers.

One step = RobustClassifier.training_step (forward, cross-entropy, penalty) + loss.backward() +
Adam step + zero_grad (`bench_train_step.make_step`), on an untrained torchvision ResNet-18 and
ResNet-50 (`TorchvisionClassifier`, 3 classes, ImageNet normalisation as a layer) in train mode,
a batch of 8 random [0, 1] RGB images by default (`--batch`). The every-map recipe is the
MultiMapSmoothness term of `assets/configs/imagefolder_resnet18_every_map.yaml`, read from the
shipped file (saliency + input x gradient + Grad-CAM, batch fraction 0.09, one ascent step);
each lever row changes one or two of its options and keeps the rest:

- batch fraction 0.1 / 0.5 (the recipe: 0.09); the penalised images are ceil(fraction x batch);
- fewer maps: saliency only; saliency + Grad-CAM (the recipe's map weights for those maps);
- ascent steps 0 (x' uniform in the ball; the recipe: 1);
- batch fraction 0.1 and no ascent together.

One shared forward of the cross-entropy and the penalty's clean maps is not an option of
MultiMapSmoothness (the term explains its own subset with a forward of its own), so it has no row.
`--device cuda --precision bf16` runs the step under torch.autocast(bfloat16) on a GPU.

Threads: `--threads` (default 1, `torch.set_num_threads`). Timing: `bench_utils.time_interleaved`,
every variant in one process, interleaved round by round after two warm-up steps each; the time
is the median over `--repeats` rounds (default 3, quick 1) of process CPU time on the CPU (wall
time on CUDA), and each ratio the median of the per-round ratios to the plain step.

    python -m benchmarks run bench_step_224                      # ResNet-18 and ResNet-50
    python -m benchmarks run bench_step_224 --models resnet18
    python -m benchmarks run bench_step_224 --batch 32 --variants "every-map recipe"
    python -m benchmarks run bench_step_224 --quick --no-write   # 64 x 64, ResNet-18 only
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml

from benchmarks import bench_utils as bu
from benchmarks.bench_train_step import make_step
from robust_train.regularizers import MultiMapSmoothness, PenaltyTerm

RECIPE = "imagefolder_resnet18_every_map.yaml"
PLAIN = "plain CE"
EVERY_MAP = "every-map recipe"
TARGET, AIM = 2.0, 1.5


@dataclasses.dataclass(frozen=True)
class Variant:
    """A row: the options it changes in the recipe's penalty (None: no penalty)."""

    name: str
    changes: dict[str, Any] | None


def recipe_options() -> dict[str, Any]:
    """The MultiMapSmoothness init_args of the shipped every-map image-folder config."""
    import robust_train

    path = Path(robust_train.__file__).parent / "assets" / "configs" / RECIPE
    config = yaml.safe_load(path.read_text())
    (term,) = [
        p for p in config["model"]["penalties"] if p["class_path"].endswith("MultiMapSmoothness")
    ]
    return dict(term["init_args"])


def variants(recipe: dict[str, Any]) -> list[Variant]:
    """Plain, the recipe, and each lever on it (the recipe's map weights for the maps kept)."""
    weight = dict(zip(recipe["explainers"], recipe["map_weights"], strict=True))

    def maps(*names: str) -> dict[str, Any]:
        return {"explainers": list(names), "map_weights": [weight[n] for n in names]}

    return [
        Variant(PLAIN, None),
        Variant(EVERY_MAP, {}),
        Variant("batch fraction 0.1", {"batch_fraction": 0.1}),
        Variant("batch fraction 0.5", {"batch_fraction": 0.5}),
        Variant("saliency only", maps("saliency")),
        Variant("saliency + Grad-CAM", maps("saliency", "grad_cam")),
        Variant("ascent steps 0", {"n_ascent_steps": 0}),
        Variant("batch fraction 0.1, ascent steps 0", {"batch_fraction": 0.1, "n_ascent_steps": 0}),
    ]


def make_term(recipe: dict[str, Any], variant: Variant) -> PenaltyTerm | None:
    if variant.changes is None:
        return None
    return MultiMapSmoothness(**{**recipe, **variant.changes})


def penalised(term: PenaltyTerm | None, batch: int) -> int:
    """Images per step that carry the penalty."""
    return 0 if term is None else max(1, math.ceil(term.batch_fraction * batch))


def make_setup(
    key: str, size: int, batch: int
) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """(untrained torchvision model, images, labels), seeded."""
    from robust_train.models import TorchvisionClassifier

    torch.manual_seed(0)
    model = TorchvisionClassifier(key, num_classes=3, weights=None)
    x = torch.rand(batch, 3, size, size)
    y = torch.arange(batch) % 3
    return model, x, y


def run_model(key: str, args: Any, device: torch.device, record: bu.Record) -> list[str]:
    """Every variant of `key`, side by side; the table and the target lines."""
    recipe = recipe_options()
    base, x, y = make_setup(key, args.size, args.batch)
    bf16 = args.precision == "bf16"
    chosen = (
        [v for v in variants(recipe) if v.name in (PLAIN, *args.variants)]
        if args.variants
        else variants(recipe)
    )
    terms = {v.name: make_term(recipe, v) for v in chosen}
    steps: dict[str, Callable[[], object]] = {
        name: make_step(base, term, x, y, device, bf16) for name, term in terms.items()
    }
    for step in steps.values():  # first warm-up step: Adam's state, lazy initialisation
        step()
    rounds = args.repeats or (1 if args.quick else 3)
    timings = bu.time_interleaved(steps, PLAIN, rounds=rounds, device=device, min_sample_seconds=0)
    rows = [
        [name, penalised(terms[name], args.batch), t.median, t.median_wall, t.ratio, t.spread()]
        for name, t in timings.items()
    ]
    label = f"{key}, {args.size}x{args.size}, batch {args.batch}"
    record.add(
        f"### {label}, {rounds} round(s), {args.precision}\n\n"
        f"s/step and ratios: {bu.clock_name(device)}, median over rounds after two warm-up steps; "
        f"the recipe: {_describe(recipe)}.\n\n"
        + bu.table(
            ["variant", "penalised images", "s/step", "wall s/step", "vs plain", "ratio range"],
            rows,
        )
    )
    within = [n for n, t in timings.items() if n != PLAIN and t.ratio <= TARGET]
    if EVERY_MAP not in timings:
        return [f"- {label}: variants within {TARGET:g}x plain: {', '.join(within) or 'none'}"]
    ratio = timings[EVERY_MAP].ratio
    return [
        f"- {label}: every-map recipe <= {TARGET:g}x plain: {bu.verdict(ratio, TARGET)}; "
        f"aim {AIM:g}x: {'met' if ratio <= AIM else 'not met'}",
        f"- {label}: variants within {TARGET:g}x plain: {', '.join(within) or 'none'}",
    ]


def _describe(recipe: dict[str, Any]) -> str:
    keys = ("explainers", "map_weights", "batch_fraction", "n_ascent_steps", "radius", "distance")
    return ", ".join(f"{k}={recipe[k]}" for k in keys if k in recipe)


def main(argv: Sequence[str] | None = None) -> str:
    parser = bu.base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        nargs="+",
        default=None,
        choices=["resnet18", "resnet50"],
        help="default: resnet18 resnet50 (quick: resnet18)",
    )
    parser.add_argument("--batch", type=int, default=8, help="images per step (default 8)")
    parser.add_argument(
        "--variants", nargs="+", default=None, metavar="NAME",
        help=f"only these rows beside {PLAIN!r} (names as in the table, e.g. {EVERY_MAP!r})",
    )  # fmt: skip
    parser.add_argument("--size", type=int, default=None, help="image side (224; quick 64)")
    parser.add_argument(
        "--precision",
        default="32",
        choices=["32", "bf16"],
        help="bf16: the step runs under torch.autocast(bfloat16)",
    )
    args = parser.parse_args(argv)
    if args.batch < 1:
        parser.error(f"--batch must be >= 1, got {args.batch}")
    names = [v.name for v in variants(recipe_options())]
    for name in args.variants or ():
        if name not in names:
            parser.error(f"--variants: {name!r} is not one of {names}")
    args.size = args.size or (64 if args.quick else 224)
    if args.size < 32:
        parser.error(f"--size must be >= 32, got {args.size}")
    args.models = args.models or (["resnet18"] if args.quick else ["resnet18", "resnet50"])
    device = bu.setup_torch(args)
    warnings.filterwarnings("ignore", message=".*self.log.*")
    return bu.record_models("bench_step_224", args, device, argv, run_model)


if __name__ == "__main__":
    main()
