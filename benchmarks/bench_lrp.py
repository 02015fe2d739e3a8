"""Cost of `robust_train.explain.lrp` beside saliency: one map, one attack step, one penalty step.

At 28x28 (MNISTConvNet(channels=[16, 32], hidden=128), batch 32) and on torchvision ResNet-50 at
224x224 (random weights, 2 images), every variant timed in the same process, interleaved round by
round (bench_utils.time_interleaved; process CPU time, one thread):

- map: the explainer's map without a graph (evaluation);
- attack step: the map with create_graph at the current iterate, the top-k objective (the
  importance mass on the clean top-k pixels) and its gradient w.r.t. the input: the work of one
  fragility-attack step (saliency: on the softplus surrogate, as the attack does for it; lrp: on
  the model itself, `piecewise_constant=False`);
- penalty step: one training step of RobustClassifier with ExplanationSmoothness (radius 0.3,
  cosine, one sample) on the explainer: forward, penalty (two maps with create_graph), backward.

    python -m benchmarks run bench_lrp        # ~15 min on one core; its record: RESULTS.md
    python -m benchmarks.bench_lrp --quick    # smoke run
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from benchmarks.bench_utils import Record, base_parser, setup_torch, table, time_interleaved
from robust_train import RobustClassifier
from robust_train.explain import importance_map, lrp, saliency
from robust_train.models import MNISTConvNet, TorchvisionClassifier
from robust_train.models.softplus import smooth_relus
from robust_train.regularizers import ExplanationSmoothness

EXPLAINERS: dict[str, Callable[..., Tensor]] = {"saliency": saliency, "lrp": lrp}
SURROGATE = {"saliency": 10.0, "lrp": None}


def attack_step(model: nn.Module, explain: Callable[..., Tensor], x: Tensor, y: Tensor, beta):
    """One top-k attack direction at x (k = 1/8 of the pixels)."""
    clean = importance_map(explain(model, x, y)).flatten(1)
    top = clean.topk(max(1, clean.shape[1] // 8), dim=1).indices
    point = x.detach().requires_grad_(True)
    with smooth_relus(beta):
        maps = importance_map(explain(model, point, y, create_graph=True)).flatten(1)
        (grad,) = torch.autograd.grad(maps.gather(1, top).sum(), point)
    return grad


def penalty_step(module: RobustClassifier, x: Tensor, y: Tensor) -> None:
    module.zero_grad(set_to_none=True)
    module.training_step((x, y), 0).backward()


def variants(model: nn.Module, x: Tensor, y: Tensor) -> dict[str, Callable[[], object]]:
    out: dict[str, Callable[[], object]] = {}
    for name, explain in EXPLAINERS.items():
        out[f"map {name}"] = lambda e=explain: e(model.eval(), x, y)
        out[f"attack step {name}"] = lambda e=explain, n=name: attack_step(
            model.eval(), e, x, y, SURROGATE[n]
        )
        term = ExplanationSmoothness(explainer=name, radius=0.3, distance="cosine", seed=0)
        module = RobustClassifier(model, [term])
        out[f"penalty step {name}"] = lambda m=module: penalty_step(m.train(), x, y)
    return out


def run(label: str, model: nn.Module, x: Tensor, y: Tensor, rounds: int, device) -> str:
    timings = time_interleaved(
        variants(model, x, y), "map saliency", rounds=rounds, device=device, min_sample_seconds=0.5
    )
    rows = []
    for what in ("map", "attack step", "penalty step"):
        sal, rel = timings[f"{what} saliency"], timings[f"{what} lrp"]
        ratios = [a / b for a, b in zip(rel.seconds, sal.seconds, strict=True)]
        ratios.sort()
        rows.append([what, 1000 * sal.median, 1000 * rel.median, ratios[len(ratios) // 2]])
    return f"{label}:\n\n" + table(["call", "saliency ms", "lrp ms", "lrp / saliency"], rows)


def main(argv: Sequence[str] | None = None) -> str:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    device = setup_torch(args)
    record = Record("bench_lrp", args, device, argv)
    torch.manual_seed(0)
    mnist = MNISTConvNet(channels=[16, 32], hidden=128, mean=0.1307, std=0.3081)
    batch = 4 if args.quick else 32
    x, y = torch.rand(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    rounds = args.repeats or (1 if args.quick else 5)
    record.add(run(f"MNISTConvNet(16, 32, 128), 28x28, batch {batch}", mnist, x, y, rounds, device))
    name, side = ("resnet18", 64) if args.quick else ("resnet50", 224)
    resnet = TorchvisionClassifier(name, num_classes=1000)
    x, y = torch.rand(2, 3, side, side), torch.tensor([1, 2])
    big_rounds = args.repeats or (1 if args.quick else 2)
    record.add(run(f"torchvision {name}, {side}x{side}, batch 2", resnet, x, y, big_rounds, device))
    return record.finish()


if __name__ == "__main__":
    main()
