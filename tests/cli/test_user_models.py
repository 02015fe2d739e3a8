"""`evaluate`/`compare --model ... --weights ...`: a model not trained here.

Through the console script: a user's own module found in the working directory; in processes of
the warm console (tests/support/warm_console.py: the same command in a process of its own, without
the script's seconds of imports): a torchvision architecture with a plain torchvision state dict on
an image folder (an auditor's case), every common state-dict layout; through its entry point
in-process, the refusals (a class path that is
not an nn.Module is never called; a weights file that unpickles code never runs it; keys that do
not fit are named).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import torchvision
from PIL import Image

from robust_train.app.checkpoint_io import heldout_tensors
from robust_train.core.resources import shipped_checkpoint
from robust_train.data import SyntheticDataModule
from robust_train.models import load_classifier

ROOT = Path(__file__).resolve().parents[2]
MNIST = ROOT / "configs" / "mnist5k_baseline.yaml"
FAST = ["--n-samples", "4", "--n-steps", "2", "--lipschitz-samples", "2", "--fidelity-steps"]
FAST += ["3", "--ig-steps", "3", "--explainers", "saliency", "--attacks", "topk", "--no-progress"]
FAST += ["--no-ensemble", "--parts", "fragility"]  # the tests read the accuracy and one attack
TINY_NET = """
import pathlib
from torch import nn


class TinyNet(nn.Module):
    def __init__(self, num_classes: int = 3):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.Softplus())
        self.head = nn.Linear(8, num_classes)

    def forward(self, x):
        return self.head(self.body(x))


class NotAModule:
    def __init__(self, **kwargs):
        pathlib.Path("called.txt").write_text("instantiated")
"""


def _error(result, *fragments: str) -> str:
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("robust-train: error: "), result.stderr[-2000:]
    for fragment in fragments:
        assert fragment in line, line
    return line


def _measures(folder: Path) -> dict[str, dict[str, float]]:
    return {n: r["measures"] for n, r in json.loads((folder / "results.json").read_text()).items()}


def _image_folder(root: Path, counts: dict[str, int]) -> Path:
    """root/{train,test}/<class>/*.png (16x16 RGB noise) and its data config."""
    generator = torch.Generator().manual_seed(0)
    for split in ("train", "test"):
        for name, n in counts.items():
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                pixels = torch.randint(0, 256, (16, 16, 3), generator=generator, dtype=torch.uint8)
                Image.fromarray(pixels.numpy()).save(root / split / name / f"{i}.png")
    config = root / "data.yaml"
    config.write_text(
        "data:\n  class_path: robust_train.data.ImageFolderDataModule\n"
        f"  init_args: {{root: {root}, image_size: 16, batch_size: 4, val_fraction: 0.5}}\n"
    )
    return config


@pytest.mark.slow
def test_torchvision_architecture_with_plain_torchvision_weights_on_an_image_folder(
    tmp_path: Path, console
):
    """The auditor: `--model torchvision:resnet18 --weights my.pth` (torchvision's own keys; and
    nested under "model" with DDP's "module." prefix). Heads biased to one class make the split
    accuracy the share of that class (1/4 and 3/4): only loaded weights give both."""
    data = _image_folder(tmp_path / "images", {"cat": 1, "dog": 3})
    to_cat = torchvision.models.resnet18(num_classes=2).state_dict()
    to_cat["fc.bias"] = torch.tensor([1e4, 0.0])
    torch.save(to_cat, tmp_path / "to_cat.pth")
    to_dog = {**to_cat, "fc.bias": torch.tensor([0.0, 1e4])}
    torch.save({"model": {f"module.{k}": v for k, v in to_dog.items()}}, tmp_path / "to_dog.pth")
    out = tmp_path / "compare"
    done = console(
        "compare", "to_cat.pth", "to_dog.pth", "--model", "torchvision:resnet18",
        "--data-config", str(data), "--out", str(out), *FAST, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    measures = _measures(out)
    assert measures["to_cat"]["split_accuracy"] == 0.25
    assert measures["to_dog"]["split_accuracy"] == 0.75
    assert 0 <= measures["to_cat"]["attack/saliency/topk/topk_intersection"] <= 1


@pytest.mark.slow
def test_every_common_state_dict_layout_gives_the_checkpoint_s_numbers(tmp_path: Path, console):
    """A fit config as `--model`; weights plain, nested under "state_dict" (Lightning, "model."
    prefix), under "model" with "module." (DDP) and the shipped checkpoint itself: all give the
    shipped checkpoint's own accuracy on the MNIST-5k test split."""
    model = load_classifier(shipped_checkpoint("mnist5k_baseline"))
    state = model.state_dict()
    layouts = {
        "plain": state,
        "lightning": {"state_dict": {f"model.{k}": v for k, v in state.items()}, "epoch": 3},
        "ddp": {"model": {f"module.{k}": v for k, v in state.items()}},
    }
    for name, obj in layouts.items():
        torch.save(obj, tmp_path / f"{name}.pt")
    files = [f"{n}.pt" for n in layouts] + [str(shipped_checkpoint("mnist5k_baseline"))]
    out = tmp_path / "layouts"
    done = console(
        "compare", *files, "--model", str(MNIST), "--data-config", str(MNIST),
        "--out", str(out), *FAST, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    config = {"class_path": "robust_train.data.MNIST5kDataModule", "init_args": {}}
    _, _, accuracy = heldout_tensors(config, 1, model=model)
    accuracies = {n: m["split_accuracy"] for n, m in _measures(out).items()}
    assert accuracies == dict.fromkeys([*layouts, "mnist5k_baseline"], accuracy), accuracies


@pytest.mark.slow
def test_a_user_module_in_the_working_directory(tmp_path: Path, console):
    """`class_path: mynet.TinyNet` in a YAML, mynet.py in the working directory (not on
    PYTHONPATH); weights with the "model." prefix. A head biased to class 2 gives the share of
    class 2 in the synthetic test split."""
    (tmp_path / "mynet.py").write_text(TINY_NET)
    (tmp_path / "model.yaml").write_text("class_path: mynet.TinyNet\ninit_args: {num_classes: 3}\n")
    data_init = {"num_samples": 64, "image_size": 8, "in_channels": 1, "num_classes": 3}
    (tmp_path / "data.yaml").write_text(
        "data:\n  class_path: robust_train.data.SyntheticDataModule\n"
        f"  init_args: {json.dumps({**data_init, 'batch_size': 8})}\n"
    )
    state = {
        "body.1.weight": torch.zeros(8, 64),
        "body.1.bias": torch.zeros(8),
        "head.weight": torch.zeros(3, 8),
        "head.bias": torch.tensor([0.0, 0.0, 5.0]),
    }
    torch.save({f"model.{k}": v for k, v in state.items()}, tmp_path / "tiny.pt")
    out = tmp_path / "eval"
    done = console(
        "evaluate", "--model", "model.yaml", "--weights", "tiny.pt", "--data-config", "data.yaml",
        "--out", str(out), *FAST, cwd=tmp_path, fresh=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    dm = SyntheticDataModule(**data_init)
    dm.setup("test")
    share = float((dm.test_set.tensors[1] == 2).float().mean())
    assert _measures(out)["tiny"]["split_accuracy"] == share
    result = json.loads((out / "results.json").read_text())["tiny"]
    assert result["model"] == "model.yaml" and result["weights"] == "tiny.pt"
    assert "tiny.pt" in (out / "summary.md").read_text()


class _Payload:
    """Unpickling this runs `touch pwned.txt` (what a crafted weights file does)."""

    def __reduce__(self):
        import os

        return (os.system, ("touch pwned.txt",))


def test_refusals_name_the_file_or_class_and_run_nothing(tmp_path: Path, cli, monkeypatch):
    """In-process (the script's entry point): mynet is dropped from sys.modules after each
    command, as if each ran in its own process."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # --model may append the working directory
    (tmp_path / "mynet.py").write_text(TINY_NET)
    (tmp_path / "evil.yaml").write_text("model:\n  class_path: mynet.NotAModule\n")
    (tmp_path / "data.yaml").write_text(
        "data:\n  class_path: robust_train.data.SyntheticDataModule\n"
        "  init_args: {num_samples: 16, image_size: 8, in_channels: 1, num_classes: 3}\n"
    )
    torch.save(
        {"head.weight": torch.zeros(3, 8), "head.bias": torch.zeros(3)}, tmp_path / "half.pt"
    )
    torch.save({"state_dict": _Payload()}, tmp_path / "evil.pt")
    common = ["--data-config", "data.yaml", *FAST]
    cases = {
        "not a module": (["--model", "evil.yaml", *common], ("mynet.NotAModule", "nn.Module")),
        "pickled code": (
            ["--model", "mynet.TinyNet", "--weights", "evil.pt", *common],
            ("evil.pt", "tensors-only"),
        ),
        "missing keys": (
            ["--model", "mynet.TinyNet", "--weights", "half.pt", *common],
            ("half.pt", "TinyNet", "body.1.weight"),
        ),
    }
    done = {}
    for name, (argv, _) in cases.items():
        done[name] = cli("evaluate", *argv, "--out", name, cwd=tmp_path)
        sys.modules.pop("mynet", None)
    for name, (_, fragments) in cases.items():
        _error(done[name], *fragments)
        assert not (tmp_path / name).exists(), name
    assert not (tmp_path / "called.txt").exists()  # NotAModule was never instantiated
    assert not (tmp_path / "pwned.txt").exists()  # the pickled call never ran


def test_argument_mistakes_are_refused_before_any_work(tmp_path: Path, cli, monkeypatch):
    """The same one-line errors, in-process (the `cli` fixture: the script's entry point)."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # --model may append the working directory
    (tmp_path / "data.yaml").write_text("data: {class_path: robust_train.data.DigitsDataModule}\n")
    torch.save({"w": torch.zeros(1)}, tmp_path / "w.pt")
    cases = {
        "torchvision:resnet5": ["--model", "torchvision:resnet5", "--data-config", "data.yaml"],
        "--data-config": ["--model", "torch.nn.Linear"],
        "needs `--model`": ["--weights", "w.pt", "--data-config", "data.yaml"],
        "not both": [
            "--model",
            "torch.nn.Linear",
            "--ckpt",
            "x.ckpt",
            "--data-config",
            "data.yaml",
        ],
        "not neither": ["--data-config", "data.yaml"],
        "is a file but not a YAML": ["--model", "w.pt", "--data-config", "data.yaml"],
        "cannot import class_path 'nomodule.Net'": [
            "--model",
            "nomodule.Net",
            "--data-config",
            "data.yaml",
        ],  # fmt: skip
    }
    for fragment, argv in cases.items():
        done = cli("evaluate", *argv, "--out", "out", cwd=tmp_path)
        assert done.returncode == 2, fragment
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("robust-train: error: ") and fragment in line, line
    done = cli("compare", "a.pt", "b.pt", "--model", "torch.nn.Linear", "--weights", "w.pt",
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and "--weights" in done.stderr
    assert not (tmp_path / "out").exists()
