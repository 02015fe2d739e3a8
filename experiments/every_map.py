"""One model for every map: fit candidate recipes and score them on all five reported maps.

The driver of experiments/EVERY_MAP.md. Three parts:

`fit`: fine-tune the shipped natural model (checkpoints/mnist5k_baseline.ckpt) with a list of
penalty terms (--terms, the JSON of `experiments.explainer_recipes.build_terms`) at each --weights,
optionally as a Softplus(B) network, on MNIST-5k's train split (2 epochs, Adam 2e-3 with the
per-step cosine, as the configs); saves --out/<tag>_w<weight>.ckpt and appends one line
(accuracy on the 500 val images, fit CPU s) to --out/fits.jsonl.

`score`: each --model on the first --images images of --split (val for choosing, test to
confirm) that --reference (the natural model) classifies correctly, the same images for every
model (the engine attacks the ones each model classifies correctly), through the evaluation
engine with the leaderboard's test attack on every reported map (`settings`: saliency, IG with 10
points and a zero baseline, Grad-CAM at its default layer, LRP with the default composite,
DeepLIFT with a zero baseline): the top-k attack with each image's worst direction, noise at the
budget (worst of 10 draws), the share of blank clean maps, the fidelity of every map (AUC_LIF -
AUC_MIF, Brocki & Chung), the sanity part (top-100 overlap with the map of the same architecture
with every layer re-initialised, cascading randomisation, Adebayo et al. 2018; overlap with the
input) and the "map = input" reference under the same attack. Writes one JSON line per model to
--out/scores.jsonl and prints its column means.

`cost`: each --variant's fine-tune epochs in natural epochs (CPU time, one process, a
cross-entropy fine-tune first and last as the unit) and the whole recipe's cost over natural
training (6 natural epochs plus the fine-tune, over 6), appended to --out/cost.md.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python -m experiments.every_map fit --tag ixg \\
        --softplus-beta 2 --weights 20 --terms '[{"penalty": "smoothness", \\
        "explainer": "input_x_gradient", "radius": 0.3, "distance": "cosine", \\
        "batch_fraction": 0.25}]'
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python -m experiments.every_map score \\
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

from experiments import explainer_recipes as er

MAPS = ("saliency", "integrated_gradients", "grad_cam", "lrp", "deeplift")
SHORT = {"saliency": "sal", "integrated_gradients": "ig", "grad_cam": "gc", "lrp": "lrp",
         "deeplift": "dl"}  # fmt: skip


def reference_images(reference: Any, x: Any, y: Any, n: int) -> Any:
    """Indices of the first `n` images the reference model (the natural one) classifies
    correctly: the same images for every model and every call."""
    from robust_train.core.runtime import predict

    return (predict(reference, x, 256) == y).nonzero().squeeze(1)[:n]


def settings(n: int) -> Any:
    """The leaderboard's test attack (`experiments.leaderboard.attack_settings`: the RAR top-k
    attack, 50 sign steps of 0.015 in L_inf 0.3, attack k 200, reported k 100, every candidate
    direction with each image's worst kept, noise at the budget as the worst of 10 draws) on
    every map, with the fidelity and sanity parts and the "map = input" reference."""
    from experiments.leaderboard import attack_settings
    from experiments.leaderboard_methods import Plan

    base = attack_settings(Plan(), MAPS, "test", n)
    return dataclasses.replace(
        base, parts=("fragility", "fidelity", "sanity"), input_reference=True
    )


COLUMNS = {
    "worst": "attack/{m}/topk/topk_intersection",
    "noise": "attack/{m}/random_sign/topk_intersection",
    "fidelity": "fidelity/{m}/fidelity",
    "blank": "fragility/{m}/blank_map",
    "random": "sanity/{m}/random_weights_topk",
    "input": "sanity/{m}/input_topk",
}


def summarize(row: dict[str, Any]) -> dict[str, float]:
    """`<map>/<column>` means of one scored model (`COLUMNS`), and the accuracy."""
    out: dict[str, float] = {"acc": row["acc"]}
    for name in MAPS:
        for col, key in COLUMNS.items():
            value = row["measures"].get(key.format(m=name))
            if isinstance(value, (int, float)):
                out[f"{SHORT[name]}/{col}"] = float(value)
    ref = row["measures"].get("attack/input_reference/topk/topk_intersection")
    if isinstance(ref, (int, float)):
        out["input_reference"] = float(ref)
    return out


def score(args: argparse.Namespace) -> None:
    from robust_train.evaluation import evaluate_classifier
    from robust_train.models import load_classifier

    models = {k: load_classifier(v) for k, v in (m.split("=", 1) for m in args.model)}
    x, y = er.split(args.split)
    keep = reference_images(load_classifier(args.reference), x, y, args.images)
    for tag, model in models.items():
        start = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = evaluate_classifier(model, x[keep], y[keep], settings(len(keep)), progress=False)
        measures = {k: v for k, v in r["measures"].items() if isinstance(v, (int, float))}
        row = {"tag": tag, "split": args.split, "acc": er.accuracy(model, x, y),
               "index": keep.tolist(), "measures": measures,
               "cpu_s": time.process_time() - start}  # fmt: skip
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
    lr: float = 2e-3,
) -> tuple[Any, list[float], float]:
    """Fine-tune the shipped natural model with `terms` (none: cross-entropy only) as
    `explainer_recipes.fit` does (MNIST-5k train split, batch 64, Adam at `lr`, per-step
    cosine to 0), with `seed` for the batch order; (model in eval mode, CPU s of each epoch, of
    the fit)."""
    import pytorch_lightning as pl

    from experiments.cheaper_robustness import EpochClock
    from experiments.support import quiet_trainer
    from robust_train import RobustClassifier
    from robust_train.data import MNIST5kDataModule
    from robust_train.models import MNISTConvNet

    pl.seed_everything(seed, workers=True, verbose=False)
    steps = epochs * math.ceil(3500 / er.BATCH)
    module = RobustClassifier(
        MNISTConvNet(**er.MODEL),
        terms,
        optimizer=lambda p: torch.optim.Adam(p, lr=lr),
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
        model, _, seconds = tune(terms, args.epochs, args.softplus_beta, args.seed, ckpt, args.lr)
        row = {"tag": args.tag, "terms": specs, "weight": weight, "softplus_beta":
               args.softplus_beta, "seed": args.seed, "val_acc": er.accuracy(model, x, y),
               "lr": args.lr, "epochs": args.epochs, "fit_cpu_s": seconds,
               "ckpt": str(ckpt)}  # fmt: skip
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


NAMES = {"sal": "saliency", "ig": "IG", "gc": "Grad-CAM", "lrp": "LRP", "dl": "DeepLIFT"}
TARGETS = {"sal": 0.65, "ig": 0.75, "gc": 0.50, "lrp": 0.75, "dl": 0.75}
REFERENCE_ROW = "map = input (the same top-k attack, aimed at the input map)"


def seed_rows() -> list[tuple[str, str, str, Any]]:
    """The rows of the test-split table: (label, summary key, target, whether a value `v` meets
    it given the natural model's `n`), in the page's order; the "map = input" row has no target."""
    rows: list[tuple[str, str, str, Any]] = [
        ("test accuracy (1,000 images)", "acc", "within 0.005 of natural",
         lambda v, n: v >= n - 0.005),
    ]  # fmt: skip
    for m, t in TARGETS.items():
        rows.append(
            (f"{NAMES[m]}: top-k attack", f"{m}/worst", f">= {t:.2f}", lambda v, n, t=t: v >= t)
        )
    rows += [(f"{NAMES[m]}: noise at the budget", f"{m}/noise", ">= natural", lambda v, n: v >= n)
             for m in TARGETS]  # fmt: skip
    for m in TARGETS:
        gc = m == "gc"
        rows.append((f"{NAMES[m]}: fidelity (AUC_LIF - AUC_MIF)", f"{m}/fidelity",
                     ">= natural and >= 0.3" if gc else ">= natural",
                     lambda v, n, gc=gc: v >= n and (v >= 0.3 or not gc)))  # fmt: skip
    rows.append(("Grad-CAM: blank clean maps", "gc/blank", "<= natural", lambda v, n: v <= n))
    rows += [(f"{NAMES[m]}: overlap with randomised-weights maps", f"{m}/random",
              "<= natural + 0.05", lambda v, n: v <= n + 0.05) for m in ("sal", "gc")]  # fmt: skip
    rows.append(("saliency: overlap with the input", "sal/input", "(reported)", None))
    rows.append((REFERENCE_ROW, "input_reference", "-", None))
    return rows


def seeds_table(summaries: dict[str, dict[str, float]], natural: str, seeds: list[str]) -> Any:
    """The test-split table of the page: per row of `seed_rows`, the natural model's value, the
    mean +- sample sd over the `seeds` tags (the first is the shipped model), the first seed's
    value, the target and whether the mean meets it ("**no**" where not); cells as printed."""
    import statistics

    columns = ["column", "natural (shipped)", f"every-map, {len(seeds)} seeds (mean ± sd)",
               "seed 0 (shipped)", "target", "met"]  # fmt: skip
    rows = []
    for label, key, target, meets in seed_rows():
        n, values = summaries[natural][key], [summaries[t][key] for t in seeds]
        mean, sd = statistics.mean(values), statistics.stdev(values)
        met = "" if meets is None else ("yes" if meets(mean, n) else "**no**")
        rows.append([label, f"{n:.3f}", f"{mean:.3f} ± {sd:.3f}", f"{values[0]:.3f}",
                     target, "-" if key == "input_reference" else met])  # fmt: skip
    return {"columns": columns, "align": "|---" * len(columns) + "|", "rows": rows}


def table(args: argparse.Namespace) -> None:
    """Store the test-split table (`seeds_table`) of --scores (the last line per tag) as the
    page's table `test-split-three-seeds` in experiments/results/every_map.json, with the
    random-map row (`experiments.chance`), and print its per-seed values."""
    from experiments import chance
    from experiments.pages import RESULTS

    summaries: dict[str, dict[str, float]] = {}
    for path in args.scores:
        for line in Path(path).read_text().splitlines():
            record = json.loads(line)
            summaries[record["tag"]] = record["summary"]
    key = "test-split-three-seeds"
    k, pixels, columns = chance.EXPECTED[f"every_map:{key}"]
    built = chance.with_expected_row(seeds_table(summaries, args.natural, args.seeds), k, pixels,
                                     columns)  # fmt: skip
    path = RESULTS / "every_map.json"
    data = json.loads(path.read_text())
    data["tables"][key] = built
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    for label, name, _, _ in seed_rows():
        print(label, " / ".join(f"{summaries[t][name]:.3f}" for t in args.seeds))


FRONT_COLUMNS = (
    "acc", "sal/worst", "ig/worst", "gc/worst", "lrp/worst", "dl/worst", "gc/fidelity",
    "sal/noise", "gc/noise", "lrp/noise", "sal/random", "gc/random", "gc/blank",
)  # fmt: skip


ROBUSTNESS = ("sal/worst", "ig/worst", "gc/worst", "lrp/worst", "dl/worst")
FIDELITY = ("ig/fidelity", "lrp/fidelity", "dl/fidelity")


def pareto(points: dict[str, tuple[float, float]]) -> list[str]:
    """The tags no other point beats on both coordinates (higher is better), by the first.

    Examples:
        >>> pareto({"a": (1, 1), "b": (2, 0), "c": (0.5, 0.5)})
        ['a', 'b']
    """

    def dominated(t: str) -> bool:
        x, y = points[t]
        return any(a >= x and b >= y and (a, b) != (x, y) for a, b in points.values())

    return sorted((t for t in points if not dominated(t)), key=lambda t: points[t][0])


def _front_panel(ax: Any, rows: dict[str, dict[str, float]], point: dict[str, Any]) -> Any:
    """One scatter of `point` (tag -> (x, y)) coloured by gc/random, its Pareto front joined."""
    xs, ys = zip(*(point[t] for t in rows), strict=True)
    dots = ax.scatter(xs, ys, c=[rows[t]["gc/random"] for t in rows], cmap="viridis", s=60)
    optimal = pareto(point)
    ax.plot(*zip(*(point[t] for t in optimal), strict=True), color="grey", lw=1, zorder=0,
            label="Pareto front")  # fmt: skip
    for t in rows:
        ax.annotate(t, point[t], textcoords="offset points", xytext=(4, 4), fontsize=7)
    return dots


def front(args: argparse.Namespace) -> None:
    """The candidates of --scores (the last line per tag) as a markdown table of FRONT_COLUMNS,
    and the trade-off plot --png, colour the Grad-CAM maps' overlap with a randomised-weights
    model's maps (higher: the map depends less on the weights), the Pareto-optimal ones joined:
    left, Grad-CAM (x) against saliency (y) top-100 intersection under the attacks aimed at each;
    right, the mean over the five maps of that intersection (x) against the mean fidelity of the
    IG, LRP and DeepLIFT maps (y)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows: dict[str, dict[str, float]] = {}
    for line in Path(args.scores).read_text().splitlines():
        record = json.loads(line)
        rows[record["tag"]] = record["summary"]
    head = "| candidate | " + " | ".join(FRONT_COLUMNS) + " |"
    lines = [head, "|---" * (len(FRONT_COLUMNS) + 1) + "|"]
    for tag, r in rows.items():
        cells = " | ".join(f"{r.get(c, math.nan):.3f}" for c in FRONT_COLUMNS)
        lines.append(f"| {tag} | {cells} |")
    print("\n".join(lines))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    maps = {t: (r["gc/worst"], r["sal/worst"]) for t, r in rows.items()}
    dots = _front_panel(left, rows, maps)
    left.axvline(0.50, color="tab:red", ls=":", lw=1)
    left.axhline(0.65, color="tab:red", ls=":", lw=1, label="targets")
    left.set_xlabel("Grad-CAM top-100 intersection under its attack")
    left.set_ylabel("saliency top-100 intersection under its attack")
    mean = {t: (sum(r[c] for c in ROBUSTNESS) / len(ROBUSTNESS),
                sum(r[c] for c in FIDELITY) / len(FIDELITY)) for t, r in rows.items()}  # fmt: skip
    _front_panel(right, rows, mean)
    if "natural" in rows:
        right.axhline(mean["natural"][1], color="tab:red", ls=":", lw=1, label="natural")
    right.set_xlabel("mean top-100 intersection of the five maps under their attacks")
    right.set_ylabel("mean fidelity of the IG, LRP and DeepLIFT maps")
    fig.colorbar(dots, ax=[left, right], label="Grad-CAM overlap with randomised-weights maps")
    for ax in (left, right):
        ax.legend(loc="lower right", fontsize=8)
    fig.savefig(args.png, dpi=110, bbox_inches="tight")
    print(f"Pareto-optimal (Grad-CAM, saliency): {', '.join(pareto(maps))}; "
          f"(robustness, fidelity): {', '.join(pareto(mean))} -> {args.png}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.every_map", description=__doc__)
    sub = parser.add_subparsers(dest="part", required=True)
    f = sub.add_parser("fit")
    f.add_argument("--terms", required=True)
    f.add_argument("--weights", type=float, nargs="+", default=[1.0])
    f.add_argument("--tag", required=True)
    f.add_argument("--epochs", type=int, default=2)
    f.add_argument("--softplus-beta", type=float, default=None)
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--lr", type=float, default=2e-3, help="Adam's learning rate")
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
    s.add_argument("--reference", default=str(er.BASELINE), help="model choosing the images")
    fr = sub.add_parser("front")
    fr.add_argument("--scores", type=Path, required=True, help="a score run's scores.jsonl")
    fr.add_argument("--png", type=Path, default=Path("docs/images/every_map_front.png"))
    t = sub.add_parser("table")
    t.add_argument("--scores", type=Path, nargs="+", required=True, help="scores.jsonl files")
    t.add_argument("--natural", default="natural", help="the natural model's tag")
    t.add_argument("--seeds", nargs="+", default=["every_map", "every_map_s1", "every_map_s2"],
                   help="the seeds' tags, the shipped model first")  # fmt: skip
    for p in (f, s, c, fr, t):
        p.add_argument("--out", type=Path, default=Path("runs/every_map"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    {"fit": fit, "score": score, "cost": cost, "front": front, "table": table}[args.part](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
