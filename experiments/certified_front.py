"""The deterministic certificate's front: certified top-100 overlap of the saliency map against
accuracy and the L_inf radius, for the shipped models and for models trained to earn it.

Parts (each resumable: a job whose result is on file is skipped):

`fit`: train one variant with the `interval_width` penalty (Wicker et al. 2023): from scratch or
from a shipped checkpoint, MNIST-5k train split, batch 64, Adam at --lr with a per-step cosine to
0, the penalty's radius ramped from 0 to --epsilon over the first --ramp share of the steps;
the weights go to --out/<tag>_s<seed>.ckpt and a row (test accuracy, fit CPU s) to
--out/fits.jsonl.

`score`: for each model of --tags (shipped names, default the three MNIST-5k ones, or fits), the
first --n correctly classified MNIST-5k test images: the certified top-100 overlap (interval
bounds at L_inf 0.005, 0.01, 0.02, 0.05; CROWN on the first --crown-n at 0.005 and 0.01), the
lowest overlap the L_inf top-k fragility attack and random points of the ball leave, accuracy
on the 1,000 test images, and the cost; one JSON per model and method under --out/scores/.

`table`: the scores as experiments/results/certified_front.json (the page's tables), the
front figure docs/images/certified_front.png and the page experiments/CERTIFIED_FRONT.md (its
prose: experiments/prose/CERTIFIED_FRONT.md). A shipped model whose previous file was scored
too (its score files copied to --out/before/) gets a before -> now column pair.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python -m experiments.certified_front fit --tag w1_scratch \\
        --weight 1 --epochs 20 --seed 0
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python -m experiments.certified_front score \\
        --tags mnist5k_baseline mnist5k_robust w1_scratch_s0 w1_scratch_s1 w1_scratch_s2
    PYTHONPATH=$PWD python -m experiments.certified_front table
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from experiments import explainer_recipes as er
from experiments.pages import IMAGES, RESULTS, tables_page
from robust_train.core.resources import shipped_checkpoint

OUT = Path("runs/certify")
PAGE = "CERTIFIED_FRONT.md"
EPSILONS = (0.005, 0.01, 0.02, 0.05)
CROWN_EPSILONS = (0.005, 0.01)
K = 100
SHIPPED = ("mnist5k_baseline", "mnist5k_robust", "mnist5k_certified")


def fit(args: argparse.Namespace) -> None:
    """Train one variant (module docstring); skipped when its checkpoint exists."""
    import pytorch_lightning as pl

    from experiments.support import quiet_trainer
    from robust_train import RobustClassifier
    from robust_train.certify import IntervalWidthPenalty
    from robust_train.data import MNIST5kDataModule
    from robust_train.models import MNISTConvNet

    args.out.mkdir(parents=True, exist_ok=True)
    ckpt = args.out / f"{args.tag}_s{args.seed}.ckpt"
    if ckpt.exists():
        print(f"{ckpt} exists; skipped", flush=True)
        return
    pl.seed_everything(args.seed, workers=True, verbose=False)
    steps = args.epochs * math.ceil(3500 / er.BATCH)
    term = IntervalWidthPenalty(
        weight=args.weight, epsilon=args.epsilon, ramp_steps=max(1, int(args.ramp * steps))
    )
    init = None if args.init == "none" else str(shipped_checkpoint(args.init))
    module = RobustClassifier(
        MNISTConvNet(channels=args.channels, hidden=args.hidden),
        [term] if args.weight > 0 else [],
        optimizer=lambda p: torch.optim.Adam(p, lr=args.lr),
        lr_scheduler=lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=steps),
        lr_scheduler_interval="step",
        init_checkpoint=init,
    )
    trainer = quiet_trainer(max_epochs=args.epochs)
    start = time.process_time()
    trainer.fit(module, datamodule=MNIST5kDataModule(batch_size=er.BATCH, seed=0))
    seconds = time.process_time() - start
    if trainer.global_step < steps:  # stopped early (a signal): keep no partial model
        raise SystemExit(f"{args.tag}: stopped at step {trainer.global_step} of {steps}")
    trainer.save_checkpoint(ckpt, weights_only=True)
    x, y = er.split("test")
    row = {
        "tag": args.tag, "seed": args.seed, "weight": args.weight, "epsilon": args.epsilon,
        "ramp": args.ramp, "epochs": args.epochs, "lr": args.lr, "init": args.init,
        "channels": args.channels, "hidden": args.hidden,
        "test_acc": er.accuracy(module.model.eval(), x, y), "fit_cpu_s": seconds,
        "ckpt": str(ckpt),
    }  # fmt: skip
    with open(args.out / "fits.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)


def _load(name: str, out: Path) -> Any:
    from robust_train.models import load_classifier

    path = shipped_checkpoint(name) if name in SHIPPED else out / f"{name}.ckpt"
    return load_classifier(path).eval()


def score_one(name: str, method: str, args: argparse.Namespace) -> dict[str, Any]:
    """Certify (and, for interval bounds, attack) one model on the first `args.n` (CROWN:
    `args.crown_n`) correctly classified test images."""
    from robust_train.certify.deterministic_run import BoundSettings, certify_model_bounds
    from robust_train.core.runtime import predict

    model = _load(name, args.out)
    x, y = er.split("test")
    right = predict(model, x, 256) == y
    n = args.n if method == "interval" else args.crown_n
    xs, ys = x[right][:n], y[right][:n]
    attack = method == "interval"
    settings = BoundSettings(
        method=method, epsilons=EPSILONS if attack else CROWN_EPSILONS, k=K,
        attack_steps=args.attack_steps if attack else 0,
        random_points=args.random_points if attack else 0,
    )  # fmt: skip
    start = time.process_time()
    row = certify_model_bounds(model, xs, ys, settings)
    row.update(model=name, test_acc=float(right.float().mean()), cpu_s=time.process_time() - start)
    return row


def score(args: argparse.Namespace) -> None:
    """Score every model of `--tags` (shipped names or fits): interval bounds and the attacks,
    then CROWN; one JSON each, skipped when present."""
    folder = args.out / "scores"
    folder.mkdir(parents=True, exist_ok=True)
    for method in ("interval", "crown") if args.crown_n else ("interval",):
        for name in args.tags:
            path = folder / f"{name}.{method}.json"
            if path.exists():
                continue
            torch.manual_seed(0)
            row = score_one(name, method, args)
            path.write_text(json.dumps(row, indent=1))
            print(name, method, json.dumps(row["certified_median"]), flush=True)


def _fits(out: Path) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    path = out / "fits.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        r = json.loads(line)
        rows[f"{r['tag']}_s{r['seed']}"] = r
    return rows


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def group_rows(out: Path) -> dict[str, dict[str, Any]]:
    """Per model group (a tag over its seeds, or a shipped model): medians over seeds of the
    per-seed medians over images, and the settings."""
    fits = _fits(out)
    groups: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((out / "scores").glob("*.interval.json")):
        row = {"interval": json.loads(path.read_text())}
        crown = path.with_name(path.name.replace(".interval.", ".crown."))
        if crown.exists():
            row["crown"] = json.loads(crown.read_text())
        row.update(model=row["interval"]["model"], test_acc=row["interval"]["test_acc"])
        tag = fits[row["model"]]["tag"] if row["model"] in fits else row["model"]
        row["fit"] = fits.get(row["model"])
        groups.setdefault(tag, []).append(row)
    summary = {}
    order = [*(t for t in SHIPPED if t in groups), *sorted(t for t in groups if t not in SHIPPED)]
    for tag, rows in ((t, groups[t]) for t in order):
        iv = [r["interval"] for r in rows]
        summary[tag] = {
            "seeds": len(rows),
            "test_acc": _median([r["test_acc"] for r in rows]),
            "certified": [_median([m["certified_median"][i] for m in iv]) for i in range(4)],
            "empirical": [_median([m["empirical"][i] for m in iv]) for i in range(4)],
            "stable_relus": [_median([m["stable_relus"][i] for m in iv]) for i in range(4)],
            "crown": [
                _median([r["crown"]["certified_median"][i] for r in rows if "crown" in r])
                for i in range(len(CROWN_EPSILONS))
            ],
            "crown_images": _median([r["crown"]["n_images"] for r in rows if "crown" in r]),
            "min_gap": min(m["empirical_min_gap"] for m in iv),
            "certify_s": _median([max(m["seconds"]["certify_per_image"]) for m in iv]),
            "crown_cpu_s": _median(
                [
                    r["crown"]["cpu_s"] / r["crown"]["n_images"] / len(CROWN_EPSILONS)
                    for r in rows
                    if "crown" in r
                ]
            ),
            "measure_cpu_s": _median([m["cpu_s"] / m["n_images"] for m in iv]),
            "fit_cpu_s": _median([r["fit"]["fit_cpu_s"] for r in rows if r["fit"]]),
            "fit": {k: v for k, v in (rows[0]["fit"] or {}).items() if k != "ckpt"} or None,
        }
    return summary


def _cell(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.3f}"


def tables(summary: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The page's tables: the front (certified and attacked overlap per radius) and the cost."""
    front = []
    for tag, s in summary.items():
        pairs = zip(s["certified"], s["empirical"], strict=True)
        cells = [f"{_cell(c)} / {_cell(e)}" for c, e in pairs]
        front.append([tag, str(s["seeds"]), f"{s['test_acc']:.3f}", *cells,
                      f"{_cell(s['crown'][1])}"])  # fmt: skip
    cost = []
    for tag, s in summary.items():
        f = s["fit"] or {}
        setting = (
            (
                f"w {f['weight']:g}, eps {f['epsilon']:g}, {f['epochs']} ep, "
                f"init {f['init']}, {f['channels']}/{f['hidden']}"
            )
            if f
            else "shipped"
        )
        fit_s = "-" if math.isnan(s["fit_cpu_s"]) else f"{s['fit_cpu_s']:.0f}"
        cost.append([tag, setting, f"{s['certify_s'] * 1000:.0f}",
                     f"{s['measure_cpu_s']:.2f}", f"{s['crown_cpu_s']:.2f}", fit_s,
                     f"{s['min_gap']:.3f}"])  # fmt: skip
    eps = [f"{e:g}" for e in EPSILONS]
    return {
        "front": {
            "columns": ["model", "seeds", "test acc",
                        *[f"{e} certified median / attacked mean" for e in eps],
                        "0.01 CROWN median"],
            "align": "|---|---|---|---|---|---|---|---|",
            "rows": front,
        },
        "cost": {
            "columns": ["model", "training", "interval wall ms / image / radius",
                        "interval + attacks CPU s / image", "CROWN CPU s / image / radius",
                        "fit CPU s", "min attacked - certified"],
            "align": "|---|---|---|---|---|---|---|",
            "rows": cost,
        },
    }  # fmt: skip


BEFORE = "before"  # --out/before/<shipped name>.<method>.json: scores of files shipped before
CHANGE = (
    "test accuracy",
    "certified median (interval), 0.005", "certified median (interval), 0.01",
    "certified mean (interval), 0.005", "certified mean (interval), 0.01",
    "certified median (CROWN, 3 images), 0.005", "certified median (CROWN, 3 images), 0.01",
    "attacked mean, 0.005", "attacked mean, 0.01", "attacked mean, 0.05",
    "min attacked - certified",
)  # fmt: skip


def _measures(folder: Path, name: str) -> list[float]:
    """The values of `CHANGE` from one model's score files in `folder`."""
    iv = json.loads((folder / f"{name}.interval.json").read_text())
    crown = folder / f"{name}.crown.json"
    cr = json.loads(crown.read_text())["certified_median"] if crown.exists() else [math.nan] * 2
    return [iv["test_acc"], *iv["certified_median"][:2], *iv["certified_overlap"][:2], *cr,
            iv["empirical"][0], iv["empirical"][1], iv["empirical"][3],
            iv["empirical_min_gap"]]  # fmt: skip


def before_after(out: Path) -> dict[str, Any]:
    """The table of each shipped model scored both in `out/before/` (the file shipped before)
    and in `out/scores/` (the file shipped now): the page's measures side by side."""
    names = [
        n for n in SHIPPED
        if all((out / d / f"{n}.interval.json").exists() for d in (BEFORE, "scores"))
    ]  # fmt: skip
    values = [_measures(out / d, n) for n in names for d in (BEFORE, "scores")]
    columns = ["measure", *(f"{n} {when}" for n in names for when in ("before", "now"))]
    return {
        "columns": columns,
        "align": "|---" * len(columns) + "|",
        "rows": [[m, *(_cell(v[i]) for v in values)] for i, m in enumerate(CHANGE)],
    }


def figure(summary: dict[str, dict[str, Any]], path: Path) -> None:
    """Certified (filled) and attacked (open) median overlap against the radius, one line per
    model, and certified overlap at 0.01 against accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for i, (tag, s) in enumerate(summary.items()):
        (line,) = left.plot(EPSILONS, s["certified"], "o-", label=tag)
        left.plot(EPSILONS, s["empirical"], "o--", mfc="none", color=line.get_color())
        right.plot(s["test_acc"], s["certified"][1], "o", color=line.get_color())
        # labels stacked by model, so that models at the same point stay readable
        right.annotate(tag, (s["test_acc"], s["certified"][1]), xytext=(4, 4 + 9 * i),
                       textcoords="offset points", fontsize=7)  # fmt: skip
    left.set(xscale="log", xlabel="L_inf radius", ylabel="top-100 overlap",
             title="certified median (solid), attacked mean (dashed)")  # fmt: skip
    left.set_xticks(EPSILONS, [f"{e:g}" for e in EPSILONS])
    left.minorticks_off()
    right.margins(x=0.3)
    right.locator_params(axis="x", nbins=5)
    right.axvline(0.97, color="grey", lw=0.5)
    right.axhline(0.5, color="grey", lw=0.5)
    right.set(xlabel="test accuracy", ylabel="median certified overlap at 0.01",
              title="front at L_inf 0.01 (target: upper right of the grey lines)")  # fmt: skip
    left.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def table(args: argparse.Namespace) -> None:
    summary = group_rows(args.out)
    RESULTS.mkdir(exist_ok=True)
    data = {"settings": {"epsilons": EPSILONS, "k": K}, "groups": summary,
            "tables": {**tables(summary), "before_after": before_after(args.out)}}  # fmt: skip
    (RESULTS / "certified_front.json").write_text(json.dumps(data, indent=1) + "\n")
    figure(summary, IMAGES / "certified_front.png")
    tables_page(PAGE)
    print(json.dumps({t: (s["test_acc"], s["certified"]) for t, s in summary.items()}, indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="part", required=True)
    f = sub.add_parser("fit")
    f.add_argument("--tag", required=True)
    f.add_argument("--weight", type=float, default=1.0)
    f.add_argument("--epsilon", type=float, default=0.01)
    f.add_argument("--ramp", type=float, default=0.5, help="share of the steps of the ramp")
    f.add_argument("--epochs", type=int, default=20)
    f.add_argument("--lr", type=float, default=1e-3)
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--init", default="none", help="none, mnist5k_baseline or mnist5k_robust")
    f.add_argument("--channels", type=int, nargs=2, default=[16, 32])
    f.add_argument("--hidden", type=int, default=128)
    s = sub.add_parser("score")
    s.add_argument("--tags", nargs="+", default=list(SHIPPED))
    s.add_argument("--n", type=int, default=200)
    s.add_argument("--crown-n", type=int, default=3)
    s.add_argument("--attack-steps", type=int, default=20)
    s.add_argument("--random-points", type=int, default=8)
    sub.add_parser("table")
    for p in (f, s, *sub.choices.values()):
        if not any(a.dest == "out" for a in p._actions):
            p.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    {"fit": fit, "score": score, "table": table}[args.part](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
