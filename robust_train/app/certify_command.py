"""`robust-train certify`: certified explanation robustness of one or more checkpoints, beside the
empirical overlap of the L2 attack on the same smoothed explainer.

    robust-train certify --ckpt checkpoints/mnist5k_baseline.ckpt checkpoints/mnist5k_robust.ckpt

Each checkpoint is loaded like `robust-train evaluate` loads it (`robust_train.app.checkpoint_io`);
the held-out images come from `--data-config`, or else the datamodule recorded in the first
checkpoint (which never downloads or creates a folder). `--n-images` images that EVERY model
classifies correctly are certified (explaining the true class), so the models are compared on the
same images: the first of the split's seeded, class-stratified order that pass.
`--noise-samples` is the number of noise draws of the smoothed explainer.
`robust_train.certify.certify_model` does the work; this module writes results.json, summary.md
and certify.png (`robust_train.certify.report`) to `--out` (default runs/certify/<checkpoint path>,
or runs/certify/<stem>_vs_<stem> for several), and refuses to write over another run's results
unless `--overwrite`. `--out` and the three files are checked before any work, written whole
and never through a symlink (`robust_train.core.files`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning import LightningDataModule
from torch import Tensor, nn

from robust_train.app.checkpoint_io import (
    add_trust_argument,
    check_input_file,
    data_config_from_yaml,
    read_fit_checkpoint,
)
from robust_train.app.commands import checkpoint_folder
from robust_train.app.settings_flags import (
    CommandParser,
    add_device_arguments,
    device_from,
    flags_in_errors,
)
from robust_train.app.shipped_files import file_argument
from robust_train.certify.deterministic_run import (
    BoundSettings,
    bounds_summary_markdown,
    certify_model_bounds,
)
from robust_train.certify.report import certificate_summary_markdown, write_plot
from robust_train.certify.run import CertifySettings, certify_model
from robust_train.core.files import (
    check_results_folder,
    write_json,
    write_text,
    write_with,
)
from robust_train.core.runtime import predict, set_threads
from robust_train.evaluation.heldout import heldout_subset, instantiate

__all__ = ["certify_main", "correct_images"]


def _parser() -> argparse.ArgumentParser:
    d = CertifySettings()
    p = CommandParser(
        prog="robust-train certify",
        description="Certified lower bound and attacked upper bound of the top-k overlap of "
        "an explanation: randomized smoothing of the explainer against the L2 radius "
        "(--method smoothing), or deterministic bounds on the saliency / input x gradient map "
        "against the L_inf radius (--method interval or crown).",
    )
    p.add_argument(
        "--method",
        choices=("smoothing", "interval", "crown"),
        default="smoothing",
        help="smoothing (probabilistic, L2, any explainer) or deterministic bounds over an "
        "L_inf ball: interval, or crown (tighter, slower) (smoothing)",
    )
    p.add_argument(
        "--eps",
        type=float,
        nargs="+",
        help="L_inf radii of --method interval/crown (default 0.005 0.01 0.02 0.05)",
    )
    ckpt = file_argument("checkpoints", "`--ckpt`")
    p.add_argument(
        "--ckpt", nargs="+", required=True, type=ckpt, help="one or more fit checkpoints"
    )
    p.add_argument("--names", nargs="+", help="model names (default: checkpoint file stems)")
    data = file_argument("configs", "`--data-config`")
    p.add_argument("--data-config", type=data, help="YAML whose `data:` gives the held-out data")
    p.add_argument("--split", choices=("test", "val"), default="test")
    p.add_argument(
        "--n-images", type=int, default=20, help="held-out images certified per model (20)"
    )
    p.add_argument("--n-samples", dest="ambiguous_n_samples", help=argparse.SUPPRESS)
    p.add_argument("--explainer", default=d.explainer, help=f"({d.explainer})")
    p.add_argument("--sigma", type=float, default=d.sigma, help=f"noise std, pixels ({d.sigma})")
    p.add_argument(
        "--noise-samples",
        type=int,
        default=d.n_samples,
        help=f"noise draws of the smoothed explainer per image ({d.n_samples})",
    )
    p.add_argument("--alpha", type=float, default=d.alpha, help=f"failure prob. ({d.alpha})")
    p.add_argument("--k", type=int, help="top-k size (default H*W // 8)")
    p.add_argument("--kappa", type=int, help="sparsification size (default k)")
    p.add_argument("--radii", type=float, nargs="+", help="L2 radii (default 0..2.5 sigma)")
    p.add_argument("--attack-radii", type=float, nargs="+", help="(default 0.5..2 sigma)")
    p.add_argument("--attack-steps", type=int, default=d.attack_steps, help="0: no attack")
    p.add_argument("--attack-restarts", type=int, default=d.attack_restarts)
    p.add_argument("--attack-samples", type=int, default=d.attack_samples)
    p.add_argument("--random-points", type=int, default=d.random_points, help="0: none")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--internal-batch-size", type=int)
    p.add_argument("--threads", type=int, help="torch CPU threads (default 1 for small models)")
    p.add_argument("--out", help="output folder (default runs/certify/<checkpoint path>)")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    add_device_arguments(p)
    add_trust_argument(p)
    return p


def correct_images(
    models: dict[str, nn.Module],
    data: dict[str, Any] | LightningDataModule,
    n_images: int,
    split: str,
    seed: int = 0,
) -> tuple[Tensor, Tensor, list[int]]:
    """`n_images` held-out images that every model classifies correctly (the first of the split's
    seeded class-stratified order; more of it is read until there are enough), their labels and
    their indices in the split."""
    wanted = 2 * n_images + 16
    while True:
        held = heldout_subset(data, wanted, split, seed=seed)
        x, y = held.images, held.labels
        ok = torch.ones(len(y), dtype=torch.bool)
        for model in models.values():
            device = next(model.parameters()).device
            ok &= predict(model, x.to(device), 256).cpu() == y
        index = ok.nonzero().flatten()[:n_images]
        if len(index) == n_images or len(y) < wanted:
            break
        wanted *= 2
    if len(index) < n_images:
        raise ValueError(
            f"`--n-images` {n_images}: only {len(index)} images of the {split} split are "
            "classified correctly by every model"
        )
    return x[index], y[index], [held.indices[i] for i in index.tolist()]


OUTPUTS = ("results.json", "summary.md", "certify.png")


def _check_out(
    out: Path, paths: list[str], overwrite: bool, outputs: tuple[str, ...] = OUTPUTS
) -> bool:
    """Check `--out` and its files before any work; True when they may be replaced (a re-run on
    the same checkpoints, or `--overwrite`)."""

    def other_run(held: Any) -> str | None:
        other = held.get("checkpoint_paths") if isinstance(held, dict) else None
        return None if other == paths else f"other checkpoints ({other or 'unknown'})"

    return check_results_folder(out, outputs, overwrite=overwrite, other_run=other_run)


CERTIFY_FLAGS = {"n_samples": "--noise-samples"}


def _settings(args: argparse.Namespace) -> CertifySettings:
    fields = [
        "explainer", "sigma", "alpha", "k", "kappa", "attack_steps",
        "attack_restarts", "attack_samples", "random_points", "seed", "internal_batch_size",
    ]  # fmt: skip
    given = {name: getattr(args, name) for name in fields}
    given["n_samples"] = args.noise_samples
    for name in ("radii", "attack_radii"):
        values = getattr(args, name)
        given[name] = None if values is None else tuple(values)
    flags = {**{f: "--" + f.replace("_", "-") for f in given}, **CERTIFY_FLAGS}
    with flags_in_errors(flags):
        return CertifySettings(**given)


def _load(args: argparse.Namespace, names: list[str]) -> tuple[dict[str, nn.Module], Any]:
    """The models, and the data: `--data-config` (the user's) or the datamodule recorded in the
    first checkpoint (no download, no new folder)."""
    trust = dict(trusted=args.trust_checkpoint, trust_class_path=args.trust_class_path)
    read = [read_fit_checkpoint(c, **trust) for c in args.ckpt]
    device = args.device
    models = {name: c.classifier(device) for name, c in zip(names, read, strict=True)}
    if args.data_config:
        where = f"`--data-config` {args.data_config!r}"
        return models, instantiate(data_config_from_yaml(args.data_config), where)
    data = read[0].datamodule()
    if data is None:
        raise ValueError(f"checkpoint {args.ckpt[0]!r} records no datamodule; pass --data-config")
    return models, data


def _inputs(args: argparse.Namespace, outputs: tuple[str, ...]) -> tuple[list[str], Path, bool]:
    """Check `--n-images`, `--names`, the files and `--out`: names, out, replace."""
    if args.n_images < 1:
        raise ValueError(f"`--n-images` must be > 0, got {args.n_images}")
    names = args.names or [Path(c).stem for c in args.ckpt]
    if len(names) != len(args.ckpt) or len(set(names)) != len(names):
        raise ValueError(f"`--names` {names} must be {len(args.ckpt)} distinct names")
    for ckpt in args.ckpt:
        check_input_file(ckpt, "--ckpt")
    if args.data_config:
        check_input_file(args.data_config, "--data-config")
    paths = [str(Path(c).resolve()) for c in args.ckpt]
    out = Path(args.out) if args.out else _default_out(args.ckpt)
    return names, out, _check_out(out, paths, args.overwrite, outputs)


BOUND_OUTPUTS = ("results.json", "summary.md")


def _bounds_settings(args: argparse.Namespace) -> BoundSettings:
    if args.radii is not None:
        raise ValueError(
            f"`--radii` are L2 radii of --method smoothing; --method {args.method} "
            "takes L_inf radii (--eps)"
        )
    given: dict[str, Any] = dict(
        method=args.method, explainer=args.explainer, k=args.k, seed=args.seed,
        attack_steps=args.attack_steps, random_points=args.random_points,
    )  # fmt: skip
    if args.eps is not None:
        given["epsilons"] = tuple(args.eps)
    flags = {"epsilons": "--eps", "attack_steps": "--attack-steps"}
    flags |= {"random_points": "--random-points", "explainer": "--explainer", "k": "--k"}
    with flags_in_errors(flags):
        return BoundSettings(**given)


def _bounds_main(args: argparse.Namespace) -> int:
    """`--method interval|crown`: deterministic bounds, with the L_inf attack beside them."""
    settings = _bounds_settings(args)
    names, out, replace = _inputs(args, BOUND_OUTPUTS)
    models, data = _load(args, names)
    torch.set_num_threads(args.threads or 1)
    x, y, index = correct_images(models, data, args.n_images, args.split, settings.seed)
    results: dict[str, Any] = {"settings": settings.as_dict(), "split": args.split}
    results |= {"images": index, "checkpoints": dict(zip(names, args.ckpt, strict=True))}
    results["checkpoint_paths"] = [str(Path(c).resolve()) for c in args.ckpt]
    results["image_selection"] = (
        f"the first {args.n_images} images of the {args.split} split's seeded class-stratified "
        f"order (seed {settings.seed}) that every model classifies correctly"
    )
    results["models"] = {}
    for name, model in models.items():
        start = time.perf_counter()
        results["models"][name] = certify_model_bounds(model, x, y, settings)
        print(f"{name}: certified and attacked in {time.perf_counter() - start:.1f} s")
    summary = bounds_summary_markdown(results)
    write_json(out / "results.json", results, overwrite=replace, flag="--out")
    write_text(out / "summary.md", summary, overwrite=replace, flag="--out")
    print(summary)
    print(
        f"images: {results['image_selection']}\n\nwrote {out / 'results.json'} and "
        f"{out / 'summary.md'}"
    )
    return 0


def certify_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.ambiguous_n_samples is not None:
        raise ValueError(
            "certify counts noise draws with `--noise-samples` and images with `--n-images`; "
            "`--n-samples` is not one of its flags"
        )
    args.device = device_from(args)
    if args.method != "smoothing":
        return _bounds_main(args)
    if args.eps is not None:
        raise ValueError(
            "`--eps` sets the L_inf radii of --method interval or crown; --method smoothing "
            "takes L2 radii (--radii)"
        )
    settings = _settings(args)  # every setting checked before a checkpoint is read
    names, out, replace = _inputs(args, OUTPUTS)
    paths = [str(Path(c).resolve()) for c in args.ckpt]
    models, data = _load(args, names)
    set_threads(models.values(), args.threads or None)
    x, y, index = correct_images(models, data, args.n_images, args.split, settings.seed)
    x, y = x.to(args.device), y.to(args.device)
    results: dict[str, Any] = {"settings": settings.as_dict(), "split": args.split}
    results |= {"images": index, "checkpoints": dict(zip(names, args.ckpt, strict=True))}
    results["image_selection"] = (
        f"the first {args.n_images} images of the {args.split} split's seeded class-stratified "
        f"order (seed {settings.seed}) that every model classifies correctly"
    )
    results["checkpoint_paths"], results["models"] = paths, {}
    for name, model in models.items():
        start = time.perf_counter()
        results["models"][name] = certify_model(
            model, x, y, settings, progress=not args.no_progress
        )
        print(f"{name}: certified in {time.perf_counter() - start:.1f} s")
    _write(out, results, replace)
    print(certificate_summary_markdown(results).split("\n\n")[1])
    print(f"\nimages: {results['image_selection']}")
    print(f"\nwrote {out / 'results.json'}, {out / 'summary.md'} and {out / 'certify.png'}")
    return 0


def _write(out: Path, results: dict[str, Any], replace: bool) -> None:
    write_json(out / "results.json", results, overwrite=replace, flag="--out")
    summary = certificate_summary_markdown(results)
    write_text(out / "summary.md", summary, overwrite=replace, flag="--out")
    write_with(out / "certify.png", lambda tmp: write_plot(results, tmp), overwrite=replace)


def _default_out(ckpts: list[str]) -> Path:
    if len(ckpts) == 1:
        return checkpoint_folder(ckpts[0], "runs/certify")
    return Path("runs/certify") / "_vs_".join(Path(c).stem for c in ckpts)
