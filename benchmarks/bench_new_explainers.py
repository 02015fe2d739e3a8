"""Cost of the new explainers (Grad-CAM, DeepLIFT) beside saliency, side by side in one run.

Per setting, interleaved round by round (bench_utils): the map (one call, no graph), a one-step
top-k `fragility_attack` (the clean map, the direction through the map with create_graph on
every candidate direction of the explainer, then the iterate's label and map on the model) and
one training step (forward, cross-entropy + `ExplanationSmoothness(explainer, radius=0.3,
distance="cosine")`, backward, Adam), beside a plain cross-entropy step. Settings:
MNISTConvNet(channels=[16, 32], hidden=128) on 28x28, batch 32; torchvision ResNet-50 (random
weights, 10 classes) on 224x224, batch 2 (CPU).

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.bench_new_explainers [--settings mnist28]
    .venv/bin/python -m benchmarks.bench_new_explainers --quick   # smoke run, seconds
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from benchmarks.bench_utils import Record, base_parser, setup_torch, table, time_interleaved

EXPLAINERS = ("saliency", "grad_cam", "deeplift")


def setting(name: str, quick: bool) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor, str]:
    import torchvision

    from robust_train.models import MNISTConvNet

    torch.manual_seed(0)
    if name == "mnist28":
        model: torch.nn.Module = MNISTConvNet(channels=[16, 32], hidden=128)
        x = torch.rand(4 if quick else 32, 1, 28, 28)
        label = "MNISTConvNet(16, 32, 128), 28x28, batch " + str(len(x))
    else:
        model = torchvision.models.resnet50(num_classes=10)
        size = 64 if quick else 224
        x = torch.rand(2, 3, size, size)
        label = f"torchvision ResNet-50 (random weights), {size}x{size}, batch 2"
    return model, x, torch.randint(0, 10, (len(x),)), label


def map_call(name: str, model: Any, x: Any, t: Any) -> Callable[[], object]:
    from robust_train.explain import get_explainer

    explain = get_explainer(name)
    return lambda: explain(model, x, t)


def attack_step(name: str, model: Any, x: Any, t: Any) -> Callable[[], object]:
    """A one-step `fragility_attack` (checks, clean map, one step of every candidate direction,
    the iterate's label and map on the model), through its public call."""
    from robust_train.attacks import fragility_attack

    k = min(100, x.shape[-1] * x.shape[-2] // 8)

    def step() -> None:
        fragility_attack(
            model, x, t, explainer=name, objective="topk", epsilon=0.3, step_size=0.01,
            n_steps=1, k=k, n_restarts=1, surrogate_beta=10.0, seed=0,
        )  # fmt: skip

    return step


def train_step(name: str | None, model: Any, x: Any, t: Any) -> Callable[[], object]:
    from robust_train.regularizers import ExplanationSmoothness

    term = None
    if name is not None:
        term = ExplanationSmoothness(explainer=name, radius=0.3, distance="cosine", seed=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step() -> None:
        optimizer.zero_grad()
        xv = x.detach().requires_grad_(True)
        logits = model(xv)
        loss = torch.nn.functional.cross_entropy(logits, t)
        if term is not None:
            loss = loss + term(model, xv, t, logits).mean()
        loss.backward()
        optimizer.step()

    return step


def run_setting(name: str, args: Any, device: torch.device, record: Record) -> None:
    model, x, t, label = setting(name, args.quick)
    rounds = args.repeats or (1 if args.quick else 3)
    rows = []
    for what, build, reference in (
        ("map", map_call, "saliency"),
        ("attack step", attack_step, "saliency"),
    ):
        model.eval()
        variants = {e: build(e, model, x, t) for e in EXPLAINERS}
        timings = time_interleaved(variants, reference, rounds=rounds, device=device)
        for e in EXPLAINERS:
            tm = timings[e]
            rows.append([what, e, tm.median * 1e3, f"{tm.ratio:.2f} ({tm.spread()})", "-"])
    model.train()
    variants = {"plain CE": train_step(None, model, x, t)}
    variants |= {f"smoothness({e})": train_step(e, model, x, t) for e in EXPLAINERS}
    timings = time_interleaved(variants, "plain CE", rounds=rounds, device=device)
    sal = timings["smoothness(saliency)"].seconds
    for key, tm in timings.items():
        vs_sal = [a / b for a, b in zip(tm.seconds, sal, strict=True)]
        rows.append(
            ["training step", key, tm.median * 1e3, f"{sorted(vs_sal)[len(vs_sal) // 2]:.2f}",
             f"{tm.ratio:.2f} ({tm.spread()})"]
        )  # fmt: skip
    header = ["what", "variant", "ms (CPU time)", "× saliency (range)", "× plain CE step (range)"]
    record.add(f"### {label}\n\n" + table(header, rows))


def main(argv: list[str] | None = None) -> str:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", default=["mnist28", "resnet50"])
    args = parser.parse_args(argv)
    device = setup_torch(args)
    record = Record("bench_new_explainers", args, device, argv)
    for name in args.settings:
        run_setting(name, args, device, record)
    return record.finish()


if __name__ == "__main__":
    main()
