"""One model for every map: fit candidate recipes and score them on all five reported maps.

The driver of benchmarks/EVERY_MAP.md. Two parts:

`fit`: fine-tune the shipped natural model (checkpoints/mnist5k_baseline.ckpt) with a list of
penalty terms (--terms, the JSON of `benchmarks.explainer_recipes.build_terms`) at each --weights,
optionally as a Softplus(B) network, on MNIST-5k's train split (2 epochs, Adam 2e-3 with the
per-step cosine, as the configs); saves --out/<tag>_w<weight>.ckpt and appends one line
(accuracy on the 500 val images, fit CPU s) to --out/fits.jsonl.

`score`: each --model on the first --images correctly classified images of --split (val for
choosing, test to confirm), for every reported map (saliency, IG with 10 points and a zero
baseline, Grad-CAM at --grad-cam-layer, LRP with the default composite, DeepLIFT with a zero
baseline):

- attack: the top-k attack of the leaderboard (L_inf 0.3, 50 sign steps of 0.015, attack k 200,
  reported k 100), run once with the direction on the model itself and once on the softplus_10
  surrogate (for saliency and IG `surrogate_beta` 10 and None; for the others the explainer as an
  unregistered callable, whose direction the attack takes on the surrogate; for Grad-CAM also the
  exact map's own direction, `surrogate_beta` None), keeping per image the lowest top-100
  intersection;
- noise: x + 0.3 * s, s uniform random signs, clipped to [0, 1], the worst (lowest top-100
  intersection) of --noise-draws label-keeping draws;
- fidelity: AUC_LIF - AUC_MIF of the clean maps (Brocki & Chung; mean fill, 10 steps);
- blank: the share of clean maps with no positive pixel (NaN top-k sets: not measured);
- random: the top-100 overlap of each clean map with the map of the same architecture with
  randomised weights (independent randomisation: every layer freshly initialised, seeds 0-2,
  the mean of the three; Adebayo et al. 2018), for saliency and Grad-CAM.

Every column is measured on the same images: the first --images that --reference (the natural
model) classifies correctly; a model that misclassifies one of them gets NaN there. Writes
one JSON line per model to --out/scores.jsonl and prints its column means.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python -m benchmarks.every_map fit --tag ixg \\
        --softplus-beta 2 --weights 20 --terms '[{"penalty": "smoothness", \\
        "explainer": "input_x_gradient", "radius": 0.3, "distance": "cosine", \\
        "batch_fraction": 0.25}]'
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python -m benchmarks.every_map score \\
        --model natural=checkpoints/mnist5k_baseline.ckpt ixg=runs/every_map/ixg_w20.ckpt
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from benchmarks import explainer_recipes as er

MAPS = ("saliency", "integrated_gradients", "grad_cam", "lrp", "deeplift")
SHORT = {"saliency": "sal", "integrated_gradients": "ig", "grad_cam": "gc", "lrp": "lrp",
         "deeplift": "dl"}  # fmt: skip
ATTACK = {"epsilon": 0.3, "step_size": 0.015, "n_steps": 50, "k": 200, "measure_k": 100}
GRAD_CAM_LAYER = "features.5"  # the pool after the activation of MNISTConvNet's last Conv2d
PIECEWISE = ("saliency", "integrated_gradients")  # direction on the surrogate by default


class Map:
    """A registered explainer with fixed options; `surrogate=True` hides its registration, so
    the attack takes its direction on the softplus surrogate (`explainer_recipes.Surrogate`)."""

    def __init__(self, name: str, surrogate: bool = False, **options: Any) -> None:
        from robust_train.explain import get_explainer

        self.fn, self.options, self.name = get_explainer(name), options, name
        self.__name__ = name if not surrogate else f"{name}_surrogate"

    def __call__(self, model: Any, x: Any, t: Any, *, create_graph: bool = False) -> Any:
        return self.fn(model, x, t, create_graph=create_graph, **self.options)


def map_options(name: str, layer: str) -> dict[str, Any]:
    if name == "integrated_gradients":
        return {"n_steps": 10, "baseline": 0.0}
    if name == "grad_cam":
        return {"layer": layer}
    if name == "deeplift":
        return {"baseline": 0.0}
    return {}


def _attack_once(model: Any, x: Any, y: Any, explainer: Any, **options: Any) -> Any:
    from robust_train.attacks import fragility_attack

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = fragility_attack(model, x, y, explainer=explainer, seed=0, **(ATTACK | options))
    return r.topk_intersection.where(r.measured, torch.nan), r.clean_map


def worst_attack(
    model: Any, x: Any, y: Any, name: str, layer: str, one_direction: bool = False
) -> dict[str, Any]:
    """Both directions; per image the lower top-100 intersection (NaN only where neither
    direction could measure the image). `one_direction`: the default direction only (a
    screening shortcut). On a network with a ReLU the model's own direction of a piecewise
    constant map (saliency) is exactly zero: that attack measures nothing and is skipped; on a
    network without a ReLU (a softplus network) the surrogate is the model itself, the two
    directions coincide and one attack is run."""
    from robust_train.explain import get_explainer
    from robust_train.models.softplus import count_relus

    bound = get_explainer(name, **map_options(name, layer))  # the registered spec
    a, clean = _attack_once(model, x, y, bound)
    relus = count_relus(model)
    skip = one_direction or relus == 0 or (name == "saliency" and relus > 0)
    if skip:
        b = torch.full_like(a, torch.nan)
    elif name in PIECEWISE:  # surrogate by default; the model itself with surrogate_beta None
        b, _ = _attack_once(model, x, y, bound, surrogate_beta=None)
    else:  # the model itself by default; the surrogate for an unregistered callable
        b, _ = _attack_once(model, x, y, Map(name, surrogate=True, **map_options(name, layer)))
    if name == "grad_cam" and not one_direction:  # also the exact map's own direction
        c, _ = _attack_once(model, x, y, bound, surrogate_beta=None)
        b = torch.stack([b, c]).nan_to_num(torch.inf).min(0).values
        b = torch.where(torch.isinf(b), torch.nan, b)
    both = torch.stack([a, b])
    worst = torch.where(torch.isnan(both), torch.inf, both).min(0).values
    worst = torch.where(torch.isinf(worst), torch.nan, worst)
    return {"default": a.tolist(), "other": b.tolist(), "worst": worst.tolist(), "clean": clean}


def noise(model: Any, x: Any, y: Any, explain: Any, clean: Any, draws: int) -> list[float]:
    """Worst top-100 intersection over `draws` label-keeping x + 0.3 * random signs."""
    from robust_train.explain import importance_map
    from robust_train.explain.similarity import topk_intersection

    gen = torch.Generator().manual_seed(0)
    worst = torch.full((len(x),), torch.nan)
    for _ in range(draws):
        s = torch.randint(0, 2, x.shape, generator=gen).float() * 2 - 1
        xn = (x + ATTACK["epsilon"] * s).clamp(0, 1)
        with torch.no_grad():
            kept = model(xn).argmax(1) == y
        m = importance_map(explain(model, xn, y).detach())
        v = topk_intersection(clean, m, ATTACK["measure_k"]).where(kept, torch.nan)
        worst = torch.where(torch.isnan(worst) | (v < worst), v, worst)
    return worst.tolist()


def randomised(model: Any, seed: int = 0) -> Any:
    """A copy of `model` (same architecture, same activations) with freshly initialised weights."""
    import copy

    torch.manual_seed(seed)
    twin = copy.deepcopy(model)
    for module in twin.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    return twin.eval()


def fidelity(model: Any, x: Any, y: Any, clean: Any) -> list[float]:
    from robust_train.metrics.functional import fidelity_curves, fidelity_estimate

    curves = fidelity_curves(model, x, y, clean, n_steps=10, perturbation="mean")
    return fidelity_estimate(curves).tolist()


def score_map(model: Any, x: Any, y: Any, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every column of one map on one model (per image lists; means in `summarize`)."""
    from robust_train.explain import get_explainer, importance_map
    from robust_train.explain.similarity import topk_intersection

    start = time.process_time()
    one = name in args.one_direction
    r = worst_attack(model, x, y, name, args.grad_cam_layer, one_direction=one)
    clean = r.pop("clean")
    explain = get_explainer(name, **map_options(name, args.grad_cam_layer))
    r["noise"] = noise(model, x, y, explain, clean, args.noise_draws)
    r["fidelity"] = fidelity(model, x, y, clean)
    r["blank"] = (clean.flatten(1) > 0).sum(1).eq(0).float().tolist()
    if name in ("saliency", "grad_cam"):  # mean over three randomised twins
        overlaps = [
            topk_intersection(clean, importance_map(explain(twin, x, y).detach()), 100)
            for twin in (randomised(model, seed) for seed in range(3))
        ]
        r["random"] = torch.stack(overlaps).mean(0).tolist()
    r["cpu_s"] = time.process_time() - start
    return r


def reference_images(reference: Any, x: Any, y: Any, n: int) -> Any:
    """Indices of the first `n` images the reference model (the natural one) classifies
    correctly: the same images for every model and every call (a model that misclassifies one
    of them gets NaN there, `score_model`)."""
    from robust_train.core.runtime import predict

    return (predict(reference, x, 256) == y).nonzero().squeeze(1)[:n]


def _mean(values: list[float]) -> float:
    t = torch.tensor(values, dtype=torch.float64)
    return float(t.nanmean()) if torch.isfinite(t).any() else float("nan")


def summarize(row: dict[str, Any]) -> dict[str, float]:
    """Column means of one scored model (`<map>/<column>`), and `<map>/n` measured images."""
    out: dict[str, float] = {"acc": row["acc"]}
    for name in row["maps"]:
        r, short = row["maps"][name], SHORT[name]
        for col in ("worst", "default", "other", "noise", "fidelity", "blank", "random"):
            if col in r:
                out[f"{short}/{col}"] = _mean(r[col])
        out[f"{short}/n"] = float(torch.isfinite(torch.tensor(r["worst"])).sum())
    return out


def score_model(model: Any, x: Any, y: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Every map's columns on the images `model` classifies correctly (NaN on the others)."""
    from robust_train.core.runtime import predict

    ok = predict(model, x, 256) == y
    maps = {}
    for name in args.maps:
        r = score_map(model, x[ok], y[ok], name, args)
        for key, values in r.items():
            if isinstance(values, list):
                full = torch.full((len(x),), torch.nan)
                full[ok] = torch.tensor(values, dtype=torch.float32)
                r[key] = full.tolist()
        maps[name] = r
    return maps


def score(args: argparse.Namespace) -> None:
    from robust_train.models import load_classifier

    models = {k: load_classifier(v) for k, v in (m.split("=", 1) for m in args.model)}
    x, y = er.split(args.split)
    keep = reference_images(load_classifier(args.reference), x, y, args.images)
    for tag, model in models.items():
        row: dict[str, Any] = {"tag": tag, "split": args.split, "acc": er.accuracy(model, x, y)}
        row["index"], row["layer"] = keep.tolist(), args.grad_cam_layer
        row["maps"] = score_model(model, x[keep], y[keep], args)
        row["summary"] = summarize(row)
        with open(args.out / "scores.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        print(tag, json.dumps({k: round(v, 3) for k, v in row["summary"].items()}), flush=True)


def _bind_explainer(spec: dict[str, Any]) -> Any:
    """A spec's "explainer_options" bound to its explainer (`get_explainer`), in place; the
    nested terms of a composed penalty are built here (a term with a bound explainer)."""
    from robust_train.explain import get_explainer
    from robust_train.regularizers import get_penalty

    options = spec.pop("explainer_options", None)
    if spec.get("penalty") == "composed":
        spec["terms"] = [_bind_explainer(dict(t)) for t in spec["terms"]]
        return spec
    if not options:
        return spec
    name = spec.pop("penalty")
    term = get_penalty(name, **{k: v for k, v in spec.items() if k != "explainer"})
    term.options = dataclasses.replace(
        term.options, explainer=get_explainer(spec["explainer"], **options)
    )
    return term


def build_terms(specs: list[dict[str, Any]], weight: float, seed: int = 0) -> list[Any]:
    """`explainer_recipes.build_terms`, with "explainer_options" bound to a term's explainer
    (`get_explainer(explainer, **explainer_options)`: Grad-CAM's layer), nested terms of a
    composed penalty included."""
    terms = []
    for i, spec in enumerate(specs):
        spec = dict(spec)
        spec.setdefault("seed", i + 10 * seed)
        scale = float(spec.pop("scale", 1.0))
        built = _bind_explainer(spec)
        if isinstance(built, dict):
            (term,) = er.build_terms([{**built, "scale": scale}], weight)
            term.name = f"{built['penalty']}{i}"
        else:
            term = built
            term.weight, term.name = weight * scale, f"{term.name}{i}"
        terms.append(term)
    return terms


def tune(
    terms: list[Any],
    epochs: int,
    softplus_beta: float | None,
    seed: int = 0,
    ckpt: Path | None = None,
) -> tuple[Any, list[float], float]:
    """Fine-tune the shipped natural model with `terms` (none: cross-entropy only) as
    `explainer_recipes.fit` does (MNIST-5k train split, batch 64, Adam 2e-3, per-step cosine to
    0), with `seed` for the batch order; (model in eval mode, CPU s of each epoch, of the fit)."""
    import pytorch_lightning as pl

    from benchmarks.bench_utils import quiet_trainer
    from benchmarks.cheaper_robustness import EpochClock
    from robust_train import RobustClassifier
    from robust_train.data import MNIST5kDataModule
    from robust_train.models import MNISTConvNet

    pl.seed_everything(seed, workers=True, verbose=False)
    steps = epochs * math.ceil(3500 / er.BATCH)
    module = RobustClassifier(
        MNISTConvNet(**er.MODEL),
        terms,
        optimizer=lambda p: torch.optim.Adam(p, lr=2e-3),
        lr_scheduler=lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=steps),
        lr_scheduler_interval="step",
        init_checkpoint=str(er.BASELINE),
        softplus_beta=softplus_beta,
    )
    clock = EpochClock()
    trainer = quiet_trainer(max_epochs=epochs, callbacks=[clock])
    start = time.process_time()
    trainer.fit(module, datamodule=MNIST5kDataModule(batch_size=er.BATCH, seed=0))
    seconds = time.process_time() - start
    if ckpt is not None:
        trainer.save_checkpoint(ckpt)
    return module.model.eval(), clock.seconds, seconds


def fit(args: argparse.Namespace) -> None:
    x, y = er.split("val")
    specs = json.loads(args.terms)
    for weight in args.weights:
        suffix = f"_s{args.seed}" if args.seed else ""
        ckpt = args.out / f"{args.tag}_w{weight:g}{suffix}.ckpt"
        terms = build_terms(specs, weight, args.seed) if weight > 0 else []
        model, _, seconds = tune(terms, args.epochs, args.softplus_beta, args.seed, ckpt)
        row = {"tag": args.tag, "terms": specs, "weight": weight, "softplus_beta":
               args.softplus_beta, "seed": args.seed, "val_acc": er.accuracy(model, x, y),
               "fit_cpu_s": seconds, "ckpt": str(ckpt)}  # fmt: skip
        with open(args.out / "fits.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


def cost(args: argparse.Namespace) -> None:
    """Epoch CPU time of each variant in natural epochs (a cross-entropy fine-tune of the same
    model, run first and last in this process, is the unit), and the whole recipe's cost: the
    shipped natural model's 6 epochs plus the fine-tune, over 6 natural epochs."""
    rows = []
    variants = [("natural", None)] + [tuple(v.split("=", 1)) for v in args.variant]
    for name, spec in [*variants, ("natural", None)]:
        v = json.loads(spec) if spec else {"terms": [], "weight": 0}
        terms = build_terms(v["terms"], v["weight"], 0) if v["weight"] > 0 else []
        _, epochs, _ = tune(terms, v.get("epochs", 2), v.get("softplus_beta"))
        rows.append({"name": name, "epochs": epochs})
        print(name, [round(e, 2) for e in epochs], flush=True)
    unit = sum(sum(r["epochs"]) for r in rows if r["name"] == "natural") / (2 * 2)
    lines = ["| variant | fine-tune CPU s | fine-tune cost (natural epochs) | recipe vs natural |",
             "|---|---|---|---|"]  # fmt: skip
    for r in rows[1:-1]:
        ft = sum(r["epochs"]) / unit
        lines.append(f"| {r['name']} | {sum(r['epochs']):.1f} | {ft:.2f} | {(6 + ft) / 6:.2f}x |")
    lines.append(f"\nNatural epoch {unit:.2f} CPU s (natural runs: "
                 + ", ".join(f"{sum(r['epochs']) / 2:.2f}" for r in rows if r["name"] == "natural")
                 + ").")  # fmt: skip
    text = "\n".join(lines)
    print(text)
    (args.out / "cost.md").open("a").write(text + "\n\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.every_map", description=__doc__)
    sub = parser.add_subparsers(dest="part", required=True)
    f = sub.add_parser("fit")
    f.add_argument("--terms", required=True)
    f.add_argument("--weights", type=float, nargs="+", default=[1.0])
    f.add_argument("--tag", required=True)
    f.add_argument("--epochs", type=int, default=2)
    f.add_argument("--softplus-beta", type=float, default=None)
    f.add_argument("--seed", type=int, default=0)
    c = sub.add_parser("cost")
    c.add_argument(
        "--variant",
        nargs="+",
        required=True,
        help='name=\'{"terms": [...], "weight": W, "softplus_beta": B, "epochs": 2}\'',
    )
    s = sub.add_parser("score")
    s.add_argument("--model", nargs="+", required=True, help="tag=path.ckpt ...")
    s.add_argument("--split", choices=("val", "test"), default="val")
    s.add_argument("--images", type=int, default=100)
    s.add_argument("--maps", nargs="+", default=list(MAPS), choices=MAPS)
    s.add_argument("--noise-draws", type=int, default=10)
    s.add_argument(
        "--one-direction",
        nargs="*",
        default=[],
        choices=MAPS,
        help="maps attacked in their default direction only (screening)",
    )
    s.add_argument("--grad-cam-layer", default=GRAD_CAM_LAYER)
    s.add_argument("--reference", default=str(er.BASELINE), help="model choosing the images")
    for p in (f, s, c):
        p.add_argument("--out", type=Path, default=Path("runs/every_map"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    {"fit": fit, "score": score, "cost": cost}[args.part](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
