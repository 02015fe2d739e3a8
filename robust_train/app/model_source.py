"""A model given on the command line instead of a fit checkpoint (`--model`, `--weights`).

An auditor with `resnet50_xray.pth` and an image folder measures how fragile its explanations
are without training anything here:

    robust-train evaluate --model torchvision:resnet50 --weights resnet50_xray.pth \
        --data-config data.yaml
    robust-train evaluate --model my_model.yaml --weights my.pth --data-config data.yaml
    robust-train compare --model configs/mnist5k_baseline.yaml --data-config D.yaml a.pt b.pt

`--model` is `torchvision:NAME` (a `TorchvisionClassifier`: ImageNet normalisation, RGB, grey
data repeated to RGB, as many outputs as the weights' head or else the data's classes), a YAML
file (`class_path`/`init_args` of an nn.Module, or a fit config / its `model:` section, whose
`model:` is used), or a dotted class path built with its defaults. Every class path resolves to an
nn.Module subclass before anything is built (a user's module is found on PYTHONPATH, then in the
working directory: `--model` is the user's own choice). `--weights` is read tensors-only
(`robust_train.models.read_checkpoint`; never fully unpickled, no opt-in): a state
dict, possibly nested under "state_dict" / "model" / "model_state_dict", with or without a
"model." or "module." prefix; keys that do not fit are named with the file.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

from robust_train.app.checkpoint_io import check_input_file, evaluation_data
from robust_train.app.shipped_files import file_argument
from robust_train.core.trust import resolve_class
from robust_train.evaluation import EvaluationSettings
from robust_train.evaluation.heldout import instantiate
from robust_train.evaluation.split import evaluate_on_split
from robust_train.models import Normalize, softplus, torchvision_classifier_names
from robust_train.models.config import build_model
from robust_train.models.input_check import data_classes, data_shape
from robust_train.models.loading import CheckpointError, UntrustedCheckpointError, read_checkpoint

__all__ = [
    "ModelSource",
    "WeightsError",
    "add_model_source_arguments",
    "build_source_model",
    "evaluate_model_source",
    "fit_state_dict",
    "model_source_from",
    "read_state_dict",
    "resolve_module_class",
]

TORCHVISION = "torchvision:"
SAVE_STATE_DICT = "save a state dict: torch.save(model.state_dict(), path)"
NESTED = ("state_dict", "model", "model_state_dict", "net")  # where state dicts are nested
PREFIXES = ("model.", "module.", "_orig_mod.")  # Lightning, DataParallel/DDP, torch.compile


class WeightsError(ValueError):
    """A `--weights` file that cannot be read tensors-only, or does not fit the model."""

    user_error = True  # robust_train.app.cli: one line, exit code 2


@dataclass(frozen=True)
class ModelSource:
    """What `--model` / `--weights` name: `spec` (torchvision:NAME, a YAML file or a class path)
    and an optional weights file."""

    spec: str
    weights: str | None = None

    @property
    def label(self) -> str:
        """The weights file, else the spec (names results and output folders)."""
        return self.weights or self.spec.replace(":", "_")


def add_model_source_arguments(parser: argparse.ArgumentParser, weights: bool = True) -> None:
    """`--model` and (for `evaluate`; `compare` takes weights files as its arguments)
    `--weights`: the alternative to a fit checkpoint."""
    parser.add_argument(
        "--model",
        default=None,
        type=file_argument("configs", "`--model`"),
        help="a model not trained here: torchvision:NAME, a YAML with class_path/init_args of an "
        "nn.Module (or a fit config: its model section), or a class path; needs --data-config",
    )
    if not weights:
        return
    parser.add_argument(
        "--weights",
        default=None,
        help="state dict file for --model, read tensors-only (nested under state_dict/model, "
        "model./module. prefixes accepted)",
    )


def resolve_module_class(class_path: object, where: str) -> type[nn.Module]:
    """The nn.Module subclass `class_path` names, imported but not instantiated (a class path the
    user gave: its module may be in the working folder).

    Examples:
        >>> resolve_module_class("torch.nn.Linear", "`--model`").__name__
        'Linear'
    """
    if not isinstance(class_path, str) or "." not in class_path.strip("."):
        raise ValueError(f"{where}: class_path must be a dotted 'module.Class', got {class_path!r}")
    return cast(type[nn.Module], resolve_class(class_path, nn.Module, where))


def _yaml_model(path: Path) -> tuple[dict[str, Any], float | None]:
    """The {"class_path", "init_args"} of the model a YAML names, and its softplus_beta."""
    import yaml

    where = f"`--model` {str(path)!r}"
    try:
        node: Any = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ValueError(f"{where} is not valid YAML: {str(err).splitlines()[0]}") from None
    beta = None
    for _ in range(4):  # fit config -> model section -> (RobustClassifier) -> the module
        if isinstance(node, Mapping) and "class_path" in node:
            cls = resolve_module_class(node["class_path"], where)
            init_args = node.get("init_args") or {}
            if not isinstance(init_args, Mapping):
                raise ValueError(f"{where}: init_args must be a mapping, got {init_args!r}")
            inner = init_args.get("model")
            if _is_lightning(cls) and isinstance(inner, Mapping):
                beta, node = init_args.get("softplus_beta", beta), inner
                continue
            return {"class_path": node["class_path"], "init_args": dict(init_args)}, beta
        if isinstance(node, Mapping) and isinstance(node.get("model"), Mapping):
            beta, node = node.get("softplus_beta", beta), node["model"]
            continue
        break
    raise ValueError(
        f"{where} names no model: give class_path/init_args of an nn.Module, or a fit config "
        "whose model section has one"
    )


def _is_lightning(cls: type) -> bool:
    return any(c.__name__ == "LightningModule" for c in cls.__mro__)


def model_source_from(args: argparse.Namespace) -> ModelSource | None:
    """The `--model`/`--weights` of a command line, checked before anything is loaded or built
    (files exist, torchvision names and class paths resolve to nn.Module classes); None when
    `--model` is not given."""
    spec, weights = getattr(args, "model", None), getattr(args, "weights", None)
    if spec is None:
        if weights is not None:
            raise ValueError("`--weights` needs `--model` (the architecture to load them into)")
        return None
    if not getattr(args, "data_config", None):
        raise ValueError(f"`--model` {spec!r} needs `--data-config` (a YAML with a data: section)")
    if weights is not None:
        check_input_file(weights, "--weights")
    source = ModelSource(spec, weights)
    _config_of(source)  # every check that needs no data
    return source


def _config_of(source: ModelSource) -> tuple[dict[str, Any], float | None]:
    spec = source.spec
    if spec.startswith(TORCHVISION):
        name = spec[len(TORCHVISION) :]
        if name not in torchvision_classifier_names():
            raise ValueError(
                f"`--model` {spec!r}: unknown torchvision classifier {name!r} (e.g. resnet50, "
                "vgg11_bn, densenet121; robust_train.models.torchvision_classifier_names())"
            )
        return {"class_path": "robust_train.models.TorchvisionClassifier", "init_args": {}}, None
    path = Path(spec)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise FileNotFoundError(f"`--model` {spec!r} does not exist")
        return _yaml_model(path)
    if path.is_file():
        raise ValueError(
            f"`--model` {spec!r} is a file but not a YAML config; pass weights with --weights and "
            "the architecture as --model torchvision:NAME, CONFIG.yaml or a class path"
        )
    resolve_module_class(spec, "`--model`")
    return {"class_path": spec, "init_args": {}}, None


def read_state_dict(path: str | Path) -> dict[str, Tensor]:
    """The state dict in `path`, read tensors-only, unnested from "state_dict" / "model" /
    "model_state_dict" / "net" (e.g. a Lightning checkpoint or `{"model": sd, "epoch": 3}`)."""
    check_input_file(path, "--weights")
    try:
        obj: Any = read_checkpoint(Path(path), opt_in=f"load it in Python and {SAVE_STATE_DICT}")
    except UntrustedCheckpointError as err:
        raise WeightsError(f"`--weights`: {err} (weights are read tensors-only)") from None
    except CheckpointError as err:
        raise WeightsError(
            f"`--weights`: {err} (weights are read tensors-only); {SAVE_STATE_DICT}"
        ) from None
    for _ in range(3):
        if isinstance(obj, Mapping) and obj and all(isinstance(v, Tensor) for v in obj.values()):
            return {str(k): v for k, v in obj.items()}
        inner = [
            obj[k] for k in NESTED if isinstance(obj, Mapping) and isinstance(obj.get(k), Mapping)
        ]
        if not inner:
            break
        obj = {k: v for k, v in inner[0].items() if isinstance(v, Tensor)} or inner[0]
    keys = sorted(map(str, obj))[:8] if isinstance(obj, Mapping) else type(obj).__name__
    raise WeightsError(
        f"`--weights` {str(path)!r} holds no state dict (a mapping of names to tensors, possibly "
        f"under {'/'.join(NESTED)}); found {keys}"
    )


def _variants(state: dict[str, Tensor]) -> list[dict[str, Tensor]]:
    """`state` and its sub-dicts with each known prefix stripped (up to two levels deep)."""
    out, frontier = [state], [state]
    for _ in range(2):
        frontier = [
            {k[len(p) :]: v for k, v in s.items() if k.startswith(p)}
            for s in frontier
            for p in PREFIXES
            if any(k.startswith(p) for k in s)
        ]
        out += frontier
    return out


def _layout(state: dict[str, Tensor], own: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The prefix-stripped / prefixed variant of `state` whose keys best match `own`'s."""
    adds = [""] + sorted({k.split(".", 1)[0] + "." for k in own if "." in k})
    candidates = [{a + k: v for k, v in s.items()} for s in _variants(state) for a in adds]
    return max(candidates, key=lambda c: (len(c.keys() & own.keys()), -len(c)))


def fit_state_dict(state: dict[str, Tensor], model: nn.Module, path: str) -> dict[str, Tensor]:
    """`state` with its keys laid out as `model.state_dict()`'s: known prefixes stripped, and the
    model's own prefix (e.g. TorchvisionClassifier's "backbone.") added to a plain torchvision
    state dict. Normalisation buffers the file lacks keep the model's values.

    Raises:
        WeightsError: keys missing or unexpected, or shapes that differ; names the file.

    Examples:
        >>> import torch
        >>> net = nn.Sequential(nn.Linear(2, 3))
        >>> sd = {"model.0.weight": torch.ones(3, 2), "model.0.bias": torch.zeros(3)}
        >>> sorted(fit_state_dict(sd, net, "net.pt"))
        ['0.bias', '0.weight']
    """
    own = model.state_dict()
    best = _layout(state, own)
    kept = {
        f"{name}.{buffer}"
        for name, module in model.named_modules()
        if isinstance(module, Normalize)
        for buffer in ("mean", "std")
    }
    missing = sorted(own.keys() - best.keys() - kept)
    unexpected = sorted(best.keys() - own.keys())
    shapes = [
        f"{k}: file {tuple(v.shape)} vs model {tuple(own[k].shape)}"
        for k, v in best.items()
        if k in own and v.shape != own[k].shape
    ]
    if missing or unexpected or shapes:
        raise WeightsError(
            f"`--weights` {path!r} does not fit {type(model).__name__}: missing keys "
            f"{missing[:8]} ({len(missing)}), unexpected keys {unexpected[:8]} ({len(unexpected)})"
            f", shape mismatches {shapes[:4]}"
        )
    return {**{k: own[k] for k in kept if k not in best}, **best}


def _torchvision_config(name: str, datamodule: Any, state: dict[str, Tensor] | None) -> dict:
    """TorchvisionClassifier init args: grey data repeated to RGB, as many outputs as the
    weights' head (else the data's classes), so a mismatch is reported as one."""
    from robust_train.models.head import find_head

    shape = data_shape(datamodule)
    init_args: dict[str, Any] = {
        "name": name,
        "num_classes": data_classes(datamodule) or 1000,
        "in_channels": 1 if shape is not None and shape[0] == 1 else 3,
    }
    config = {"class_path": "robust_train.models.TorchvisionClassifier", "init_args": init_args}
    if state is not None:
        probe = build_model(config, skip_pretrained=True)
        head_name = find_head(cast(nn.Module, probe.backbone)).name
        head = _layout(state, probe.state_dict()).get(f"backbone.{head_name}.weight")
        if head is not None:
            init_args["num_classes"] = int(head.shape[0])
    return config


def build_source_model(source: ModelSource, datamodule: Any) -> nn.Module:
    """The model `source` names, with its weights loaded (strictly, after `fit_state_dict`), in
    eval mode; `datamodule` gives torchvision:NAME its channels and classes."""
    state = read_state_dict(source.weights) if source.weights else None
    config, beta = _config_of(source)
    if source.spec.startswith(TORCHVISION):
        config = _torchvision_config(source.spec[len(TORCHVISION) :], datamodule, state)
    model = build_model(config, skip_pretrained=state is not None)
    if beta is not None:
        softplus(model, float(beta), inplace=True)
    if state is not None and source.weights is not None:
        model.load_state_dict(fit_state_dict(state, model, source.weights), strict=True)
    return model.eval()


def evaluate_model_source(
    source: ModelSource,
    settings: EvaluationSettings,
    *,
    data_config: str,
    split: str = "test",
    progress: bool = True,
    threads: int | None = None,
    device: torch.device | str = "cpu",
) -> dict[str, Any]:
    """`evaluate_checkpoint` for a model given by `--model`/`--weights` and `--data-config`: the
    same probe (channels, size, classes), held-out images and suite, on `device`."""
    config, where = evaluation_data(data_config)
    datamodule = instantiate(config, where) if isinstance(config, dict) else config
    model = build_source_model(source, datamodule)
    if source.weights is None:
        print(
            f"note: no --weights: {source.spec} is evaluated with the weights its config builds "
            "(random unless it loads pretrained ones)",
            file=sys.stderr,
        )
    result = evaluate_on_split(
        model, datamodule, settings, split, progress=progress, threads=threads, where=where,
        device=device,
    )  # fmt: skip
    result.update(checkpoint=source.label, model=source.spec, weights=source.weights, split=split)
    return result
