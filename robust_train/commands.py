"""`robust-train evaluate` and `robust-train compare`: the robustness suite on saved checkpoints.

    robust-train evaluate --ckpt checkpoints/digits_baseline/best.ckpt --out runs/eval_baseline
    robust-train compare checkpoints/digits_baseline.ckpt checkpoints/digits_robust.ckpt --out runs/compare
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.evaluation import ATTACKS, EvaluationSettings, evaluate_classifier


def instantiate(config: dict[str, Any]) -> Any:
    """Build an object from {"class_path": "pkg.mod.Class", "init_args": {...}}."""
    module_name, _, cls_name = config["class_path"].rpartition(".")
    return getattr(importlib.import_module(module_name), cls_name)(**config.get("init_args", {}))


def load_checkpoint(path: str | Path) -> tuple[nn.Module, dict[str, Any] | None]:
    """The classifier of a `robust-train fit` checkpoint and the config of its datamodule (or None)."""
    from robust_train.models import load_classifier

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"`ckpt` {str(path)!r} does not exist")
    model = load_classifier(path)
    meta = torch.load(path, map_location="cpu", weights_only=False).get("robust_train", {})
    return model, meta.get("datamodule")


def data_config_from_yaml(path: str | Path) -> dict[str, Any]:
    """The `data:` section of a LightningCLI config file."""
    import yaml

    config = yaml.safe_load(Path(path).read_text())
    if not isinstance(config, dict) or "data" not in config:
        raise ValueError(f"`data_config` {str(path)!r} has no `data:` section")
    return config["data"]


def heldout_tensors(data_config: dict[str, Any], n_samples: int, split: str = "test",
                    model: nn.Module | None = None) -> tuple[Tensor, Tensor, float | None]:
    """The first `n_samples` images and labels of a datamodule's held-out split, and, when a model
    is given, its accuracy on the whole split (streamed batch by batch)."""
    dm = instantiate(data_config)
    dm.prepare_data()
    dm.setup("test" if split == "test" else "validate")
    loader = dm.test_dataloader() if split == "test" else dm.val_dataloader()
    xs, ys, n, correct, total = [], [], 0, 0, 0
    for x, y in loader:
        if n < n_samples:
            xs.append(x)
            ys.append(y)
            n += len(x)
        if model is None and n >= n_samples:
            break
        if model is not None:
            with torch.no_grad():
                correct += int((model(x).argmax(1) == y).sum())
            total += len(y)
    if not xs:
        raise ValueError(f"the {split} split of {data_config['class_path']} is empty")
    accuracy = correct / total if model is not None and total else None
    return torch.cat(xs)[:n_samples], torch.cat(ys)[:n_samples], accuracy


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    d = EvaluationSettings()
    parser.add_argument("--data-config", help="LightningCLI YAML whose `data:` section gives the held-out data "
                        "(default: the datamodule stored in the checkpoint)")
    parser.add_argument("--split", choices=("test", "val"), default="test")
    parser.add_argument("--n-samples", type=int, default=d.n_samples, help="held-out images evaluated")
    parser.add_argument("--explainers", nargs="+", default=list(d.explainers))
    parser.add_argument("--attack-explainer", default=d.attack_explainer)
    parser.add_argument("--attacks", nargs="+", default=list(d.attacks), choices=ATTACKS)
    parser.add_argument("--epsilon", type=float, default=None, help="L_inf budget (default 0.1 up to 28 px, else 8/255)")
    parser.add_argument("--n-steps", type=int, default=d.n_steps)
    parser.add_argument("--k", type=int, default=None, help="top-k size (default: an eighth of the pixels)")
    parser.add_argument("--lipschitz-samples", type=int, default=d.lipschitz_samples)
    parser.add_argument("--fidelity-steps", type=int, default=d.fidelity_steps)
    parser.add_argument("--ig-steps", type=int, default=d.ig_steps, help="integration steps of integrated gradients")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: 1 for models under a million parameters, where one "
                             "thread is fastest, else torch's default)")


def settings_from(args: argparse.Namespace) -> EvaluationSettings:
    return EvaluationSettings(n_samples=args.n_samples, explainers=tuple(args.explainers),
                              attack_explainer=args.attack_explainer, attacks=tuple(args.attacks),
                              epsilon=args.epsilon, n_steps=args.n_steps, k=args.k,
                              lipschitz_samples=args.lipschitz_samples, fidelity_steps=args.fidelity_steps,
                              ig_steps=args.ig_steps,
                              seed=args.seed)


def evaluate_checkpoint(ckpt: str | Path, settings: EvaluationSettings, *, data_config: str | None = None,
                        split: str = "test", progress: bool = True, threads: int | None = None) -> dict[str, Any]:
    """Load a checkpoint and its held-out data, run the suite, add the checkpoint's training time."""
    model, stored = load_checkpoint(ckpt)
    if threads is not None:
        torch.set_num_threads(threads)
    elif sum(p.numel() for p in model.parameters()) < 1_000_000:
        torch.set_num_threads(1)
    config = data_config_from_yaml(data_config) if data_config else stored
    if config is None:
        raise ValueError(f"checkpoint {str(ckpt)!r} records no datamodule; pass --data-config CONFIG.yaml")
    x, y, accuracy = heldout_tensors(config, settings.n_samples, split, model=model)
    start = time.perf_counter()
    result = evaluate_classifier(model, x, y, settings, progress=progress)
    result["accuracy_subset"], result["accuracy"] = result["accuracy"], accuracy
    result["evaluation_seconds"] = time.perf_counter() - start
    meta = torch.load(ckpt, map_location="cpu", weights_only=False).get("robust_train", {})
    if meta.get("training_seconds") is not None:
        result["training_seconds"] = meta["training_seconds"]
    result["checkpoint"] = str(ckpt)
    return result


def evaluate_main(argv: list[str]) -> int:
    from robust_train.report import summary_table, to_json

    parser = argparse.ArgumentParser(prog="robust-train evaluate", description="Robustness suite on one checkpoint.")
    parser.add_argument("--ckpt", required=True, help="a .ckpt written by `robust-train fit`")
    parser.add_argument("--out", default=None, help="folder for results.json and summary.md (default runs/eval/<name>)")
    add_settings_arguments(parser)
    args = parser.parse_args(argv)
    result = evaluate_checkpoint(args.ckpt, settings_from(args), data_config=args.data_config, split=args.split,
                                 progress=not args.no_progress, threads=args.threads)
    out = Path(args.out or Path("runs/eval") / Path(args.ckpt).stem)
    out.mkdir(parents=True, exist_ok=True)
    name = Path(args.ckpt).stem
    (out / "results.json").write_text(json.dumps(to_json({name: result})[name], indent=2))
    table = summary_table({name: result})
    (out / "summary.md").write_text(f"# Robustness of {args.ckpt}\n\n{table}\n")
    print(table)
    print(f"\nevaluated in {result['evaluation_seconds']:.1f} s; wrote {out / 'results.json'} and {out / 'summary.md'}")
    return 0


def compare_main(argv: list[str]) -> int:
    from robust_train.report import summary_table, write_report

    parser = argparse.ArgumentParser(prog="robust-train compare",
                                     description="Evaluate several checkpoints with the same suite; write a report.")
    parser.add_argument("ckpts", nargs="+", help="two or more checkpoints")
    parser.add_argument("--names", nargs="+", help="column names (default: file stems)")
    parser.add_argument("--out", default="runs/compare", help="folder for report.md, results.json and plots")
    add_settings_arguments(parser)
    args = parser.parse_args(argv)
    names = args.names or [Path(c).stem for c in args.ckpts]
    if len(names) != len(args.ckpts):
        raise SystemExit(f"--names has {len(names)} entries for {len(args.ckpts)} checkpoints")
    settings = settings_from(args)
    results = {n: evaluate_checkpoint(c, settings, data_config=args.data_config, split=args.split,
                                      progress=not args.no_progress, threads=args.threads) for n, c in zip(names, args.ckpts, strict=True)}
    path = write_report(results, args.out)
    print(summary_table(results))
    print(f"\nreport: {path}")
    return 0


KEEP_KEYS = ("state_dict", "robust_train", "hyper_parameters", "epoch", "global_step", "pytorch-lightning_version")


def export_checkpoint(src: str | Path, dst: str | Path) -> Path:
    """Write a small copy of a fit checkpoint: weights and rebuild metadata, no optimizer/loop state.

    The copy loads with `load_classifier`, `robust-train evaluate` and `compare`, and as
    `init_checkpoint` for fine-tuning; it cannot resume training.
    """
    ckpt = torch.load(src, map_location="cpu", weights_only=False)
    if "state_dict" not in ckpt or "robust_train" not in ckpt:
        raise ValueError(f"`src` {str(src)!r} is not a checkpoint written by `robust-train fit`")
    small = {k: ckpt[k] for k in KEEP_KEYS if k in ckpt}
    small["state_dict"] = {k: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    torch.save(small, dst)
    return dst


def export_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="robust-train export",
                                     description="Strip a fit checkpoint to weights + metadata for sharing.")
    parser.add_argument("src")
    parser.add_argument("dst")
    args = parser.parse_args(argv)
    path = export_checkpoint(args.src, args.dst)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
    return 0
