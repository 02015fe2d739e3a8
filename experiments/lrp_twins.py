"""LRP on networks written with calls against their module twins (SANITY.md, "LRP on calls").

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.lrp_twins

Two networks, each written twice with the same weights: a residual block whose sum is `out + h`
(twin: `zennit.layer.Sum` on the stack) and an MLP whose activation is `F.softplus(h, beta=2)`
(twin: `nn.Softplus(beta=2)`); with and without biases; for the composites epsilon_plus,
epsilon and alpha2_beta1. Printed per case: the relevance sum of each (1.00 is conservation on
a bias-free network), ||R_call - R_twin|| / ||R_twin|| and ||R_call|| / ||R_twin||, once with the
calls left to the gradient ("no interception": what `lrp` did before its calls got rules, made
here by switching `FunctionalRules` off) and once as `lrp` runs now; then the time of one
`lrp(create_graph=True)` call with and without the interception, side by side.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from zennit.layer import Sum

LRP = importlib.import_module("robust_train.explain.lrp")


class Residual(nn.Module):
    def __init__(self, twin: bool, bias: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(1, 8, 3, padding=1, bias=bias)
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1, bias=bias)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=bias)
        self.fc = nn.Linear(8 * 64, 10, bias=bias)
        self.relu, self.sum, self.twin = nn.ReLU(), Sum(), twin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.relu(self.stem(x))
        out = self.conv2(self.relu(self.conv1(h)))
        out = self.sum(torch.stack([out, h], dim=-1)) if self.twin else out + h
        return self.fc(self.relu(out).flatten(1))


class SoftplusMLP(nn.Module):
    def __init__(self, twin: bool, bias: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = nn.Linear(64, 32, bias=bias), nn.Linear(32, 10, bias=bias)
        self.act, self.twin = nn.Softplus(beta=2), twin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x.flatten(1))
        return self.fc2(self.act(h) if self.twin else F.softplus(h, beta=2))


class _Off:
    """`FunctionalRules` switched off: every call keeps its gradient."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *args: Any) -> None:
        return None

    def remove(self) -> None:
        pass


def _lrp(model: nn.Module, x: torch.Tensor, t: torch.Tensor, composite: str, on: bool):
    real = LRP.FunctionalRules
    LRP.FunctionalRules = real if on else _Off
    try:
        return LRP.lrp(model, x, t, composite=composite, epsilon=1e-9)
    finally:
        LRP.FunctionalRules = real


def twin_rows() -> None:
    x = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    t = torch.arange(8) % 10
    print("| network | bias | composite | interception | sum (call) | sum (twin) | rel. diff | "
          "norm ratio |\n|---|---|---|---|---|---|---|---|")  # fmt: skip
    for build in (Residual, SoftplusMLP):
        for bias in (False, True):
            call, twin = build(False, bias).eval(), build(True, bias).eval()
            twin.load_state_dict(call.state_dict())
            for composite in ("epsilon_plus", "epsilon", "alpha2_beta1"):
                theirs = _lrp(twin, x, t, composite, True)
                for on in (False, True):
                    ours = _lrp(call, x, t, composite, on)
                    rel = float((ours - theirs).norm() / theirs.norm())
                    ratio = float(ours.norm() / theirs.norm())
                    print(
                        f"| {build.__name__} | {bias} | {composite} | {'on' if on else 'off'} | "
                        f"{float(ours.sum((1, 2, 3)).mean()):.3f} | "
                        f"{float(theirs.sum((1, 2, 3)).mean()):.3f} | {rel:.3g} | {ratio:.3g} |"
                    )


def timing_rows(repeats: int = 12) -> None:
    from robust_train.models import MNISTConvNet, TorchvisionClassifier

    cases = [
        ("MNISTConvNet, 64 x 28 px", MNISTConvNet().eval(), (64, 1, 28, 28)),
        ("torchvision ResNet-18, 8 x 64 px", TorchvisionClassifier("resnet18", 10).eval(),
         (8, 3, 64, 64)),
    ]  # fmt: skip
    print("\n| model | s with interception | s without | ratio |\n|---|---|---|---|")
    for name, model, shape in cases:
        x, t = torch.rand(*shape), torch.zeros(shape[0], dtype=torch.long)
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(repeats):  # interleaved, so load changes hit both alike
            for on in (True, False):
                real = LRP.FunctionalRules
                LRP.FunctionalRules = real if on else _Off
                start = time.perf_counter()
                LRP.lrp(model, x, t, create_graph=True)
                times[on].append(time.perf_counter() - start)
                LRP.FunctionalRules = real
        on_s, off_s = statistics.median(times[True]), statistics.median(times[False])
        print(f"| {name} | {on_s:.3f} | {off_s:.3f} | {on_s / off_s:.3f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=12, help="timed calls per variant")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    twin_rows()
    timing_rows(args.repeats)


if __name__ == "__main__":
    main()
