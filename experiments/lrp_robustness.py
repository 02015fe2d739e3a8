"""LRP on MNIST-5k: the attack's direction (surrogate or model), the fine-tuning weight (val) and
the target table (test), for `robust_train.explain.lrp` (not a speed benchmark).

    OMP_NUM_THREADS=1 python -m experiments.lrp_robustness surrogate          # ~3 min
    OMP_NUM_THREADS=1 python -m experiments.lrp_robustness sweep --weights 1 3 10 30   # ~10 min
    OMP_NUM_THREADS=1 python -m experiments.lrp_robustness table --weight 10  # ~10 min

Protocol: the top-k attack of Ghorbani et al. (2019) on the explainer's map,
L_inf 0.3, 50 sign steps of 0.01, k = 100 (attack and reported), on the first `--images`
correctly classified images of the split (val for the sweep, test for the table); the score is
the mean top-100 intersection of the attacked and clean maps (higher is more robust).
Fine-tuning: `configs/mnist5k_finetune_lrp.yaml`'s recipe, the natural checkpoint trained 2
epochs with ExplanationSmoothness(explainer="lrp", radius 0.3, cosine) at Adam lr 0.002 decayed to
0 by a per-step cosine. Cost: milliseconds per training step (batch 64, one thread) x epochs,
over natural training's 6 epochs (fine-tuning: natural training plus its epochs), as
experiments/leaderboard.py counts it. Results are added to experiments/LRP.md (its prose and
results files) with the command.
"""

from __future__ import annotations

import argparse
import math
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from experiments.support import quiet_trainer
from robust_train.core.resources import shipped_checkpoint

ROOT = Path(__file__).resolve().parents[1]
NATURAL, ROBUST = (
    shipped_checkpoint("mnist5k_baseline"),
    shipped_checkpoint("mnist5k_robust"),
)
ATTACK = {"epsilon": 0.3, "step_size": 0.01, "n_steps": 50, "k": 100, "seed": 0}
MODEL = {"channels": [16, 32], "hidden": 128}
BATCH, TRAIN_IMAGES, NATURAL_EPOCHS = 64, 3500, 6


def split(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    from robust_train.data import MNIST5kDataModule

    dm = MNIST5kDataModule(batch_size=BATCH, seed=0)
    dm.setup()
    return {"val": dm.val_set, "test": dm.test_set}[name].tensors


def correct(model, x, y, n):
    from robust_train.core.runtime import predict

    keep = predict(model, x, 256) == y
    return x[keep][:n], y[keep][:n]


def attacked(model, x, y, explainer, beta: float | None = 10.0) -> dict[str, float]:
    """Mean top-100 intersection under the top-k attack on `explainer` (and how many counted)."""
    from robust_train.attacks import fragility_attack

    res = fragility_attack(model, x, y, explainer=explainer, surrogate_beta=beta, **ATTACK)
    inter = res.topk_intersection[res.measured]
    return {"topk": float(inter.mean()), "measured": int(res.measured.sum()), "n": len(x)}


def accuracy(model, x, y) -> float:
    from robust_train.core.runtime import predict

    return float((predict(model, x, 256) == y).float().mean())


def lrp_as_unregistered(model, inputs, target, *, create_graph=False):
    """lrp behind a plain callable: its spec is the default one (piecewise_constant=True), so the
    attack takes the direction on the softplus surrogate when surrogate_beta is set."""
    from robust_train.explain import lrp

    return lrp(model, inputs, target, create_graph=create_graph)


def surrogate(args) -> str:
    from robust_train.models import load_classifier

    model = load_classifier(NATURAL)
    x, y = correct(model, *split("test"), args.images)
    rows = []
    for beta in (10.0, 100.0, None):
        start = time.perf_counter()
        r = attacked(model, x, y, lrp_as_unregistered, beta)
        label = "model itself (surrogate_beta=None)" if beta is None else f"softplus beta={beta:g}"
        rows.append(
            f"| {label} | {r['topk']:.3f} | {r['measured']}/{r['n']} | "
            f"{time.perf_counter() - start:.0f} |"
        )
    head = "| attack direction on | top-100 ∩ (lower: stronger) | measured | s |\n|---|---|---|---|"
    return (
        "Natural model, test split, top-k attack on lrp (epsilon_plus):\n\n"
        + head
        + "\n"
        + "\n".join(rows)
    )


def finetune(weight: float, epochs: int = 2, limit_batches: int | None = None):
    """The config's recipe in code (experiments/leaderboard.py's train_job): returns the model."""
    import pytorch_lightning as pl

    from robust_train import RobustClassifier
    from robust_train.data import MNIST5kDataModule
    from robust_train.models import MNISTConvNet
    from robust_train.regularizers import get_penalty

    pl.seed_everything(0, workers=True, verbose=False)
    term = get_penalty(
        "smoothness", weight=weight, explainer="lrp", radius=0.3, distance="cosine", seed=0
    )
    steps = epochs * (limit_batches or math.ceil(TRAIN_IMAGES / BATCH))
    module = RobustClassifier(
        MNISTConvNet(**MODEL),
        [term],
        optimizer=lambda p: torch.optim.Adam(p, lr=0.002),
        lr_scheduler=lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=steps),
        lr_scheduler_interval="step",
        init_checkpoint=str(NATURAL),
    )
    trainer = quiet_trainer(
        max_epochs=epochs, limit_train_batches=limit_batches, deterministic=True
    )
    start = time.perf_counter()
    trainer.fit(module, datamodule=MNIST5kDataModule(batch_size=BATCH, seed=0))
    return module.model.eval(), time.perf_counter() - start, trainer


def sweep(args) -> str:
    x, y = split("val")
    from robust_train.models import load_classifier

    natural = load_classifier(NATURAL)
    xs, ys = correct(natural, x, y, args.images)
    rows = (
        []
        if args.skip_natural
        else [
            f"| natural | {accuracy(natural, x, y):.3f} | "
            f"{attacked(natural, xs, ys, 'lrp')['topk']:.3f} | |"
        ]
    )
    for weight in args.weights:
        model, seconds, _ = finetune(weight, limit_batches=args.limit_batches)
        if args.save_dir is not None:
            args.save_dir.mkdir(parents=True, exist_ok=True)
            torch.save(model.state_dict(), args.save_dir / f"lrp_weight{weight:g}.pt")
        xw, yw = correct(model, x, y, args.images)
        r = attacked(model, xw, yw, "lrp")
        rows.append(
            f"| {weight:g} | {accuracy(model, x, y):.3f} | {r['topk']:.3f} | {seconds:.0f} |"
        )
        print(rows[-1], flush=True)
    head = "| weight | val acc | val lrp top-100 ∩ (attack) | fit s |\n|---|---|---|---|"
    return "Val split (500 images), lrp fine-tuning sweep:\n\n" + head + "\n" + "\n".join(rows)


def step_ms(explainer_weight: float | None, n_steps: int = 8) -> float:
    """Median ms of one training step (batch 64, one thread), as leaderboard.step_profile."""
    from robust_train import RobustClassifier
    from robust_train.models import MNISTConvNet
    from robust_train.regularizers import get_penalty

    x, y = split_train()
    torch.manual_seed(0)
    terms = []
    if explainer_weight is not None:
        terms = [
            get_penalty(
                "smoothness",
                weight=explainer_weight,
                explainer="lrp",
                radius=0.3,
                distance="cosine",
                seed=0,
            )
        ]
    module = RobustClassifier(MNISTConvNet(**MODEL), terms)
    opt = torch.optim.Adam(module.parameters(), lr=0.002)
    times = []
    for i in range(n_steps):
        start = time.process_time()
        loss = module.training_step(
            (x[i * BATCH : (i + 1) * BATCH], y[i * BATCH : (i + 1) * BATCH]), i
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.process_time() - start)
    return 1000 * statistics.median(times[2:])


def split_train():
    from robust_train.data import MNIST5kDataModule

    dm = MNIST5kDataModule(batch_size=BATCH, seed=0)
    dm.setup()
    return dm.train_set.tensors


def table(args) -> str:
    from robust_train.models import MNISTConvNet, load_classifier

    x, y = split("test")
    models, seconds = {}, math.nan
    if "natural" in args.rows:
        models["natural"] = load_classifier(NATURAL)
    if "robust" in args.rows:
        models["saliency fine-tuned (shipped robust)"] = load_classifier(ROBUST)
    if "lrp" in args.rows:
        if args.load is not None:  # the sweep's model of this weight (same seed, same recipe)
            tuned = MNISTConvNet(**MODEL)
            tuned.load_state_dict(torch.load(args.load, weights_only=True))
        else:
            tuned, seconds, _ = finetune(args.weight, limit_batches=args.limit_batches)
        models[f"lrp fine-tuned (weight {args.weight:g})"] = tuned.eval()
    rows = []
    for name, model in models.items():
        xs, ys = correct(model, x, y, args.images)
        sal, rel = attacked(model, xs, ys, "saliency"), attacked(model, xs, ys, "lrp")
        rows.append(
            f"| {name} | {accuracy(model, x, y):.3f} | {sal['topk']:.3f} | {rel['topk']:.3f} "
            f"| {len(xs)} ({sal['measured']}, {rel['measured']} measured) |"
        )
        print(rows[-1], flush=True)
    head = (
        "| model | test acc (1,000) | saliency top-100 ∩ (attack on saliency) | lrp top-100 ∩ "
        "(attack on lrp) | images |\n|---|---|---|---|---|"
    )
    text = "Test split, direct attacks:\n\n" + head + "\n" + "\n".join(rows)
    if "lrp" in args.rows:
        natural_ms, lrp_ms = step_ms(None), step_ms(args.weight)
        cost = (NATURAL_EPOCHS * natural_ms + 2 * lrp_ms) / (NATURAL_EPOCHS * natural_ms)
        text += (
            f"\n\nStep ms (batch 64, one thread, process CPU time): natural {natural_ms:.0f}, "
            f"lrp penalty {lrp_ms:.0f} ({lrp_ms / natural_ms:.1f}x); cost x natural "
            f"(6 natural epochs + 2 lrp epochs): {cost:.2f}."
        )
    return text


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["surrogate", "sweep", "table"])
    parser.add_argument("--images", type=int, default=256, help="correctly classified images")
    parser.add_argument("--weights", type=float, nargs="+", default=[1.0, 3.0, 10.0, 30.0])
    parser.add_argument("--weight", type=float, default=10.0)
    parser.add_argument("--limit-batches", type=int, default=None, help="smoke runs only")
    parser.add_argument("--skip-natural", action="store_true", help="sweep: no natural row")
    parser.add_argument("--save-dir", type=Path, default=None, help="sweep: keep state dicts")
    parser.add_argument("--load", type=Path, default=None, help="table: a sweep state dict")
    parser.add_argument(
        "--rows", nargs="+", default=["natural", "robust", "lrp"], help="table: models to attack"
    )
    parser.add_argument(
        "--results", type=Path, default=None,
        help="a markdown file to append to (default: a section of LRP.md, its prose and results)",
    )  # fmt: skip
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    text = {"surrogate": surrogate, "sweep": sweep, "table": table}[args.mode](args)
    command = "OMP_NUM_THREADS=1 python -m experiments.lrp_robustness " + " ".join(
        map(shlex.quote, sys.argv[1:] if argv is None else argv)
    )
    took = time.perf_counter() - start
    record = f"\n## {args.mode}\n\n- command: `{command}`\n- took {took:.0f} s\n\n{text}\n"
    print(record)
    if not args.no_write:
        if args.results is None:
            from experiments.pages import page_text, store_page

            store_page("LRP.md", page_text("LRP.md") + record)
        else:
            with open(args.results, "a") as f:
                f.write(record)
    return record


if __name__ == "__main__":
    main()
