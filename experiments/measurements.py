"""The measurements behind the attacks' noise baseline and directions and Grad-CAM's default layer
(experiments/MEASUREMENTS.md): each subcommand prints a markdown table and writes its numbers to
`--out`/<subcommand>.json.

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.measurements noise
    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.measurements directions
    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.measurements fidelity [--kinds]
    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.measurements signed

Models: the shipped MNIST-5k pair (`checkpoints/mnist5k_baseline.ckpt`, natural, and
`checkpoints/mnist5k_robust.ckpt`, a Softplus(2) network), the shipped digits pair for the
fidelity table, and with `--kinds` a SmallCNN and a torchvision ResNet-18 trained here on the
MNIST-5k train split (`train_kind`: a few epochs of Adam, seeded). Images: the first correctly
classified test images of each model (the number is each table's). Attacks: L_inf 0.3, k = 100
(attack and reported), seed 0. CPU seconds are the process's (one thread).
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAIR = {"natural": "mnist5k_baseline", "robust": "mnist5k_robust"}
OLD_LAYER = "features.3"  # Grad-CAM's default layer before: the last Conv2d, before its ReLU
ATTACK = {"epsilon": 0.3, "k": 100, "seed": 0}


def _setup() -> None:
    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")


def shipped(name: str) -> Any:
    from robust_train.models import load_classifier

    return load_classifier(str(ROOT / "checkpoints" / f"{name}.ckpt"))


def mnist_test() -> tuple[Any, Any]:
    from robust_train.data import MNIST5kDataModule

    dm = MNIST5kDataModule(seed=0)
    dm.setup()
    return dm.test_set.tensors


def first_correct(model: Any, x: Any, y: Any, n: int) -> tuple[Any, Any]:
    """The first `n` test images `model` classifies correctly."""
    from robust_train.core.runtime import predict

    keep = (predict(model, x, 256) == y).nonzero().squeeze(1)[:n]
    return x[keep], y[keep]


def explainers() -> dict[str, Any]:
    """The reported maps, Grad-CAM at its default layer and at the former one (the last Conv2d)."""
    from robust_train.explain import get_explainer

    return {
        "saliency": "saliency",
        "integrated_gradients": get_explainer("integrated_gradients", n_steps=10, baseline=0.0),
        f"grad_cam@{OLD_LAYER}": get_explainer("grad_cam", layer=OLD_LAYER),
        "grad_cam": "grad_cam",
        "lrp": "lrp",
        "deeplift": "deeplift",
    }


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """`fn(*args, **kwargs)` and the process CPU seconds it took."""
    start = time.process_time()
    out = fn(*args, **kwargs)
    return out, time.process_time() - start


def mean(values: Any) -> float:
    import torch

    finite = values[torch.isfinite(values)]
    return float(finite.mean()) if len(finite) else math.nan


def noise(args: argparse.Namespace) -> dict[str, Any]:
    """The random walk (the former `random_sign`: 50 sign steps of 0.01, the worst label-keeping
    iterate) against noise at the budget, the worst of R draws of x + 0.3 * random signs."""
    from robust_train.attacks import fragility_attack

    x, y = mnist_test()
    out: dict[str, Any] = {}
    for model_name, ckpt in PAIR.items():
        model = shipped(ckpt)
        xs, ys = first_correct(model, x, y, args.images)
        for name, explainer in explainers().items():
            row: dict[str, Any] = {}
            walk, row["walk_s"] = timed(
                fragility_attack, model, xs, ys, explainer=explainer, objective="random_walk",
                step_size=0.01, n_steps=50, **ATTACK,
            )  # fmt: skip
            delta = (walk.adversarial - xs).abs().flatten(1)[walk.improved]
            row["walk"] = mean(walk.topk_intersection)
            row["walk_mean_abs"], row["walk_linf"] = (
                float(delta.mean()),
                float(delta.amax(1).mean()),
            )
            for r in args.draws:
                res, row[f"R{r}_s"] = timed(
                    fragility_attack, model, xs, ys, explainer=explainer,
                    objective="random_sign", noise_draws=r, **ATTACK,
                )  # fmt: skip
                row[f"R{r}"] = mean(res.topk_intersection)
            row["measured"] = int(res.measured.sum())
            out[f"{model_name}/{name}"] = row
            print(model_name, name, {k: round(v, 3) for k, v in row.items()}, flush=True)
    return out


def directions(args: argparse.Namespace) -> dict[str, Any]:
    """The top-k attack along each candidate direction alone, the declared one, and all of them
    with the worst kept per image; CPU seconds of each."""
    import torch

    from robust_train.attacks import fragility_attack

    x, y = mnist_test()
    out: dict[str, Any] = {}
    settings = {"step_size": 0.01, "n_steps": 50, **ATTACK}
    for model_name, ckpt in PAIR.items():
        model = shipped(ckpt)
        xs, ys = first_correct(model, x, y, args.images)
        for name, explainer in explainers().items():
            every, seconds = timed(fragility_attack, model, xs, ys, explainer=explainer, **settings)
            row = {"all": mean(every.topk_intersection), "all_s": seconds}
            row["directions"] = list(every.directions)
            single = {}
            for d in ("declared", *every.directions):
                res, row[f"{d}_s"] = timed(
                    fragility_attack, model, xs, ys, explainer=explainer, direction=d, **settings
                )
                row[d] = mean(res.topk_intersection)
                single[d] = torch.nan_to_num(res.topk_intersection, nan=2.0)
            if len(every.directions) > 1:
                stack = torch.stack([single[d] for d in every.directions])
                wins = (stack == stack.amin(0)) & every.measured
                row["wins"] = {d: int(w.sum()) for d, w in zip(every.directions, wins, strict=True)}
            row["measured"] = int(every.measured.sum())
            out[f"{model_name}/{name}"] = row
            print(model_name, name, row, flush=True)
    return out


def fidelity_of(model: Any, x: Any, y: Any, importance: Any) -> float:
    from robust_train.metrics.functional import fidelity_curves, fidelity_estimate

    curves = fidelity_curves(model, x, y, importance, n_steps=20, perturbation="mean", seed=0)
    return float(fidelity_estimate(curves).mean())


def layer_table(model: Any, x: Any, y: Any) -> dict[str, Any]:
    """Fidelity (AUC_LIF - AUC_MIF, mean fill, 20 steps) and blank maps of Grad-CAM at the last
    Conv2d, every module after it in its container up to the default layer, the default, the
    first Conv2d and the signed map at the default layer; a random map and saliency beside."""
    import torch
    from torch import nn

    from robust_train.explain import grad_cam, importance_map, saliency
    from robust_train.explain.layers import default_layer

    named = dict(model.named_modules())
    convs = [n for n, m in named.items() if isinstance(m, nn.Conv2d)]
    default = default_layer(model)
    layers = [convs[-1], *_between(model, convs[-1], default), convs[0]]
    out: dict[str, Any] = {"images": len(x), "default": default}
    for layer in dict.fromkeys(layers):
        cam = importance_map(grad_cam(model, x, y, layer=layer))
        flat = cam.flatten(1)
        blank = int((flat.amax(1) == flat.amin(1)).sum())
        out[layer] = {"fidelity": fidelity_of(model, x, y, cam), "blank": blank}
    signed = importance_map(grad_cam(model, x, y, layer=default, relu=False))
    flat = signed.flatten(1)
    blank = int((flat.amax(1) == flat.amin(1)).sum())
    out["signed"] = {"fidelity": fidelity_of(model, x, y, signed), "blank": blank}
    noise_map = torch.rand(x.shape[0], *x.shape[-2:], generator=torch.Generator().manual_seed(0))
    out["random map"] = {"fidelity": fidelity_of(model, x, y, noise_map)}
    out["saliency"] = {"fidelity": fidelity_of(model, x, y, importance_map(saliency(model, x, y)))}
    return out


def _between(model: Any, first: str, last: str) -> list[str]:
    """The modules after `first` in `model.named_modules()` order up to `last` (a block: just
    `last`)."""
    names = list(dict(model.named_modules()))
    if last == first or last not in names or names.index(last) < names.index(first):
        return [last]
    return names[names.index(first) + 1 : names.index(last) + 1]


def train_kind(kind: str) -> Any:
    """A SmallCNN (28 px) or a torchvision ResNet-18 (28 px, or "resnet18_64": the images
    upsampled to 64 px inside the model) trained on the MNIST-5k train split with Adam (lr 1e-3,
    batch 64, seed 0; 4 epochs for SmallCNN, 2 for ResNet-18)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from robust_train.data import MNIST5kDataModule
    from robust_train.models import SmallCNN, TorchvisionClassifier

    torch.manual_seed(0)
    if kind == "smallcnn_28":
        model, epochs = SmallCNN(input_size=28), 4
    else:
        net = TorchvisionClassifier("resnet18", num_classes=10, in_channels=1)
        up = nn.Upsample(size=64, mode="bilinear", align_corners=False)
        model, epochs = (nn.Sequential(up, net) if kind == "resnet18_64" else net), 2
    dm = MNIST5kDataModule(seed=0)
    dm.setup()
    xt, yt = dm.train_set.tensors
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        model.train()
        perm = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), 64):
            loss = F.cross_entropy(model(xt[perm[i : i + 64]]), yt[perm[i : i + 64]])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


def fidelity(args: argparse.Namespace) -> dict[str, Any]:
    """`layer_table` on the correctly classified of the first 64 test images of every shipped
    checkpoint (and, with --kinds, of the model kinds trained here)."""
    from robust_train.data import DigitsDataModule

    x, y = mnist_test()
    digits = DigitsDataModule(seed=0)
    digits.setup()
    dx, dy = digits.test_set.tensors
    models = {n: (shipped(c), x, y) for n, c in PAIR.items()}
    for name in ("digits_baseline", "digits_robust"):
        models[name] = (shipped(name), dx, dy)
    if args.kinds:
        for kind in ("smallcnn_28", "resnet18_28", "resnet18_64"):
            models[kind] = (train_kind(kind), x, y)
    out = {}
    for name, (model, xs, ys) in models.items():
        keep = model(xs[:64]).argmax(1) == ys[:64]
        out[name] = layer_table(model, xs[:64][keep], ys[:64][keep])
        print(name, json.dumps(out[name]), flush=True)
    return out


def signed(args: argparse.Namespace) -> dict[str, Any]:
    """Grad-CAM after its ReLU (the default, the attacked map) and the signed map (`relu=False`)
    at the default layer: the top-k attack, noise at the budget, blank maps."""
    from robust_train.attacks import fragility_attack
    from robust_train.explain import get_explainer

    x, y = mnist_test()
    out: dict[str, Any] = {}
    for model_name, ckpt in PAIR.items():
        model = shipped(ckpt)
        xs, ys = first_correct(model, x, y, args.images)
        for relu in (True, False):
            explainer = get_explainer("grad_cam", relu=relu)
            row: dict[str, Any] = {}
            for objective in ("topk", "random_sign"):
                res = fragility_attack(
                    model, xs, ys, explainer=explainer, objective=objective, step_size=0.01,
                    n_steps=50, **ATTACK,
                )  # fmt: skip
                row[objective] = mean(res.topk_intersection)
            flat = res.clean_map.flatten(1)
            row["blank"] = int((flat.amax(1) == flat.amin(1)).sum())
            row["measured"] = int(res.measured.sum())
            out[f"{model_name}/relu={relu}"] = row
            print(model_name, relu, row, flush=True)
    return out


COMMANDS = {"noise": noise, "directions": directions, "fidelity": fidelity, "signed": signed}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("command", choices=sorted(COMMANDS))
    p.add_argument("--images", type=int, default=30, help="correctly classified test images")
    p.add_argument("--draws", type=int, nargs="+", default=[1, 4, 10, 20])
    p.add_argument("--kinds", action="store_true", help="fidelity: also train the model kinds")
    p.add_argument("--out", default=str(ROOT / "runs" / "measurements"))
    args = p.parse_args(argv)
    _setup()
    result = COMMANDS[args.command](args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.command}.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
