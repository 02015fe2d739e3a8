"""A user's own model class through the console script (the fit in a process of its own, the warm
console's, tests/support/warm_console.py; the other commands through its entry point
`robust_train.app.cli.main` in-process): `fit` with `class_path: usernet.TinyNet` (no RecordsConfig)
records its class path and init args, so `evaluate --trust-class-path` rebuilds it (a recorded
module outside the installed packages is imported only with that opt-in); a class path that cannot
be imported and offline pretrained weights are user errors (exit 2, one line), not internal
errors."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from robust_train.core.resources import shipped_checkpoint

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
USER_MODULE = '''
from torch import nn


class TinyNet(nn.Module):
    """A user's model: a plain nn.Module, no RecordsConfig."""

    def __init__(self, hidden: int = 8, num_classes: int = 10):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, x):
        return self.net(x)
'''
FIT = [
    "fit",
    "--config",
    str(CONFIGS / "digits_baseline.yaml"),
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.logger=false",
]
TINY_EVAL = ["--n-samples", "4", "--parts", "fragility", "--explainers", "saliency"]
TINY_EVAL += ["--attacks", "topk", "--no-ensemble", "--n-steps", "1", "--no-progress", "--no-wandb"]


def _error_line(result, *fragments: str) -> str:
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("robust-train: ")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "internal error" not in errors[0], errors[0]
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def _pythonpath(*folders: Path) -> str:
    return os.pathsep.join([*map(str, folders), os.environ.get("PYTHONPATH", str(ROOT))])


@pytest.mark.slow
def test_fit_records_a_user_model_and_evaluate_rebuilds_it(
    tmp_path: Path, console, cli, monkeypatch
):
    user = tmp_path / "user_code"
    user.mkdir()
    (user / "usernet.py").write_text(USER_MODULE)
    work = tmp_path / "work"
    work.mkdir()
    env = {"PYTHONPATH": _pythonpath(user)}
    fit = console(
        *FIT, "--model.model", "usernet.TinyNet", "--model.model.init_args.hidden", "6",
        "--experiment", "mine", cwd=work, env=env,
    )  # fmt: skip
    assert fit.returncode == 0, fit.stderr[-3000:]
    last = work / "checkpoints" / "mine" / "latest" / "last.ckpt"
    meta = torch.load(last, map_location="cpu", weights_only=True)["robust_train"]
    assert meta["model"] == {
        "class_path": "usernet.TinyNet",
        "init_args": {"hidden": 6, "num_classes": 10},
    }
    out = tmp_path / "eval"
    # In-process, sys.path stands for PYTHONPATH; usernet is dropped from sys.modules after each
    # command, so every command imports it (or fails to) afresh, as its own process would.
    plain_path = list(sys.path)

    def evaluate(*args: str, cwd: Path, on_path: tuple[Path, ...] = ()):
        monkeypatch.setattr(sys, "path", [*map(str, on_path), *plain_path])
        try:
            return cli("evaluate", "--ckpt", str(last), *args, *TINY_EVAL, cwd=cwd)
        finally:
            monkeypatch.setattr(sys, "path", plain_path)
            sys.modules.pop("usernet", None)

    # usernet.py is on PYTHONPATH but not an installed package: refused without the opt-in
    refused = evaluate("--out", str(out), cwd=work, on_path=(user,))
    _error_line(refused, "usernet.TinyNet", "outside the installed packages", "--trust-class-path")
    trusted = evaluate("--out", str(out), "--trust-class-path", cwd=work, on_path=(user,))
    assert trusted.returncode == 0, trusted.stderr[-3000:]
    assert "split_accuracy" in (out / "results.json").read_text()

    # The module is not importable from here: exit 2 and one line saying what to do.
    elsewhere = evaluate(cwd=tmp_path)
    _error_line(
        elsewhere, "usernet.TinyNet", "No module named 'usernet'", "PYTHONPATH", "last.ckpt"
    )
    # ... and with the opt-in the working directory is searched, as `python -m` would.
    in_cwd = evaluate("--out", str(tmp_path / "e2"), "--trust-class-path", cwd=user)
    assert in_cwd.returncode == 0, in_cwd.stderr[-3000:]


def test_unimportable_class_paths_are_user_errors(tmp_path: Path, cli):
    fit = cli(*FIT, "--model.model", "nowhere_pkg.Net", cwd=tmp_path)
    _error_line(fit, "nowhere_pkg")
    config = tmp_path / "data.yaml"
    config.write_text("data:\n  class_path: nowhere_pkg.Data\n")
    evaluate = cli(
        "evaluate", "--ckpt", str(shipped_checkpoint("digits_baseline")),
        "--data-config", str(config), *TINY_EVAL, "--out", str(tmp_path / "e"), cwd=tmp_path,
    )  # fmt: skip
    _error_line(evaluate, "nowhere_pkg.Data", "No module named 'nowhere_pkg'")


def test_offline_pretrained_weights_are_a_user_error(tmp_path: Path, cli):
    """No cached file and no network (an unreachable proxy): the clear message, exit 2."""
    unreachable = "http://127.0.0.1:9"
    env = {"TORCH_HOME": str(tmp_path / "torch_home"), "NO_PROXY": "", "no_proxy": ""}
    env |= {"HTTPS_PROXY": unreachable, "https_proxy": unreachable}
    result = cli(
        *FIT, "--model.model", "robust_train.models.TorchvisionClassifier",
        "--model.model.init_args.name", "squeezenet1_1", "--model.model.init_args.weights",
        "DEFAULT", "--model.model.init_args.num_classes", "10", cwd=tmp_path, env=env,
    )  # fmt: skip
    line = _error_line(result, "Could not get the pretrained weights", "squeezenet1_1")
    assert "weights_path=" in line and str(tmp_path / "torch_home") in line
