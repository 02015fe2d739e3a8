"""`robust-train certify`: certified explanation robustness of one or more checkpoints, beside the
empirical overlap of the L2 attack on the same smoothed explainer.

    robust-train certify --ckpt checkpoints/mnist5k_baseline.ckpt checkpoints/mnist5k_robust.ckpt

Each checkpoint is loaded like `robust-train evaluate` loads it (`robust_train.app.checkpoint_io`);
the held-out images come from the datamodule recorded in the first checkpoint (or
`--data-config`). The first `--n-images` images that EVERY model classifies correctly are
certified (explaining the true class), so the models are compared on the same images.
`robust_train.certify.certify_model` does the work; this module writes results.json, summary.md
and certify.png (`robust_train.certify.report`) to `--out` (default runs/certify/<checkpoint path>,
or runs/certify/<stem>_vs_<stem> for several), and refuses to write over another run's results
unless `--overwrite`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.app.checkpoint_io import (
    add_trust_argument,
    data_config_from_yaml,
    heldout_tensors,
    load_checkpoint,
)
from robust_train.app.commands import checkpoint_folder
from robust_train.app.settings_flags import CommandParser
from robust_train.app.shipped_files import file_argument
from robust_train.certify.report import certificate_summary_markdown, write_plot
from robust_train.certify.run import CertifySettings, certify_model
from robust_train.core.runtime import predict

__all__ = ["certify_main", "correct_images"]


def _parser() -> argparse.ArgumentParser:
    d = CertifySettings()
    p = CommandParser(
        prog="robust-train certify",
        description="Certified lower bound (randomized smoothing) and attacked upper bound of "
        "the top-k overlap of a smoothed explainer, against the L2 radius.",
    )
    ckpt = file_argument("checkpoints", "`--ckpt`")
    p.add_argument(
        "--ckpt", nargs="+", required=True, type=ckpt, help="one or more fit checkpoints"
    )
    p.add_argument("--names", nargs="+", help="model names (default: checkpoint file stems)")
    data = file_argument("configs", "`--data-config`")
    p.add_argument("--data-config", type=data, help="YAML whose `data:` gives the held-out data")
    p.add_argument("--split", choices=("test", "val"), default="test")
    p.add_argument("--n-images", type=int, default=20, help="images certified per model (20)")
    p.add_argument("--explainer", default=d.explainer, help=f"({d.explainer})")
    p.add_argument("--sigma", type=float, default=d.sigma, help=f"noise std, pixels ({d.sigma})")
    p.add_argument("--n-samples", type=int, default=d.n_samples, help=f"({d.n_samples})")
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
    add_trust_argument(p)
    return p


def correct_images(
    models: dict[str, nn.Module], config: dict[str, Any], n_images: int, split: str
) -> tuple[Tensor, Tensor, list[int]]:
    """The first `n_images` held-out images that every model classifies correctly, their labels
    and their indices in the split (reading more of the split until there are enough)."""
    wanted = 2 * n_images + 16
    while True:
        x, y, _ = heldout_tensors(config, wanted, split)
        ok = torch.ones(len(y), dtype=torch.bool)
        for model in models.values():
            ok &= predict(model, x, 256) == y
        index = ok.nonzero().flatten()[:n_images]
        if len(index) == n_images or len(y) < wanted:
            break
        wanted *= 2
    if len(index) < n_images:
        raise ValueError(
            f"`--n-images` {n_images}: only {len(index)} images of the {split} split are "
            "classified correctly by every model"
        )
    return x[index], y[index], index.tolist()


def _check_out(out: Path, paths: list[str], overwrite: bool) -> None:
    previous = out / "results.json"
    if overwrite or not previous.is_file():
        return
    try:
        other = json.loads(previous.read_text()).get("checkpoint_paths")
    except (ValueError, OSError):
        other = None
    if other != paths:
        raise FileExistsError(
            f"`--out` {str(out)!r} holds the results of other checkpoints ({other or 'unknown'}); "
            "pick another --out or pass --overwrite"
        )


def _settings(args: argparse.Namespace) -> CertifySettings:
    fields = [
        "explainer", "sigma", "n_samples", "alpha", "k", "kappa", "attack_steps",
        "attack_restarts", "attack_samples", "random_points", "seed", "internal_batch_size",
    ]  # fmt: skip
    given = {name: getattr(args, name) for name in fields}
    for name in ("radii", "attack_radii"):
        values = getattr(args, name)
        given[name] = None if values is None else tuple(values)
    return CertifySettings(**given)


def certify_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    settings = _settings(args)  # every setting checked before a checkpoint is read
    if args.n_images < 1:
        raise ValueError(f"`--n-images` must be > 0, got {args.n_images}")
    names = args.names or [Path(c).stem for c in args.ckpt]
    if len(names) != len(args.ckpt) or len(set(names)) != len(names):
        raise ValueError(f"`--names` {names} must be {len(args.ckpt)} distinct names")
    for ckpt in args.ckpt:
        if not Path(ckpt).is_file():
            raise FileNotFoundError(f"`--ckpt` {ckpt!r} does not exist")
    paths = [str(Path(c).resolve()) for c in args.ckpt]
    out = Path(args.out) if args.out else _default_out(args.ckpt)
    _check_out(out, paths, args.overwrite)
    models, config = {}, data_config_from_yaml(args.data_config) if args.data_config else None
    for name, ckpt in zip(names, args.ckpt, strict=True):
        models[name], stored = load_checkpoint(ckpt, trusted=args.trust_checkpoint)
        config = config or stored
    if config is None:
        raise ValueError(f"checkpoint {args.ckpt[0]!r} records no datamodule; pass --data-config")
    small = all(sum(p.numel() for p in m.parameters()) < 1_000_000 for m in models.values())
    torch.set_num_threads(args.threads or (1 if small else torch.get_num_threads()))
    x, y, index = correct_images(models, config, args.n_images, args.split)
    results: dict[str, Any] = {"settings": settings.as_dict(), "split": args.split}
    results |= {"images": index, "checkpoints": dict(zip(names, args.ckpt, strict=True))}
    results["checkpoint_paths"], results["models"] = paths, {}
    for name, model in models.items():
        start = time.perf_counter()
        results["models"][name] = certify_model(
            model, x, y, settings, progress=not args.no_progress
        )
        print(f"{name}: certified in {time.perf_counter() - start:.1f} s")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "summary.md").write_text(certificate_summary_markdown(results))
    write_plot(results, out / "certify.png")
    print(certificate_summary_markdown(results).split("\n\n")[1])
    print(f"\nwrote {out / 'results.json'}, {out / 'summary.md'} and {out / 'certify.png'}")
    return 0


def _default_out(ckpts: list[str]) -> Path:
    if len(ckpts) == 1:
        return checkpoint_folder(ckpts[0], "runs/certify")
    return Path("runs/certify") / "_vs_".join(Path(c).stem for c in ckpts)
