"""Resume through the command line: a fit killed with SIGKILL during epoch 3 and resumed with
`--ckpt_path last` ends with the weights of an uninterrupted deterministic fit, in the same run
folder, and the robustness monitor's schedule continues where it stopped."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch
import yaml

KILLER = '''
import os, signal
from pytorch_lightning.callbacks import Callback

class KillAt(Callback):
    """Send `sig` to this process after batch `batch` of epoch `epoch` (0-based)."""

    def __init__(self, epoch: int, batch: int = 1, sig: str = "SIGKILL") -> None:
        self.epoch, self.batch, self.sig = epoch, batch, getattr(signal, sig)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.current_epoch == self.epoch and batch_idx == self.batch:
            if self.sig == signal.SIGINT:
                # A shell's background job starts with SIGINT ignored, and Python then installs
                # no KeyboardInterrupt handler; Ctrl+C in a terminal always has one.
                signal.signal(signal.SIGINT, signal.default_int_handler)
            os.kill(os.getpid(), self.sig)
'''
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
MONITOR = {  # its schedule is what resuming must keep: one part, one attack, 4 images
    "class_path": "robust_train.callbacks.RobustnessMonitor",
    "init_args": {
        "every_n_epochs": 2, "n_samples": 4, "max_overhead": None, "log_images": False,
        "parts": ["fragility"], "attacks": ["topk"],
    },
}  # fmt: skip


def _override(tmp: Path, name: str, kill: bool, sig: str = "SIGKILL", epochs: int = 4) -> Path:
    killer = {"class_path": "killer.KillAt", "init_args": {"epoch": 2, "sig": sig}}
    callbacks = [MONITOR, *([killer] if kill else [])]
    config = {
        "trainer": {
            "max_epochs": epochs,
            "logger": False,
            "limit_train_batches": 3,
            "limit_val_batches": 2,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "callbacks": callbacks,
        }
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _fit(run, tmp: Path, root: str, override: Path, *extra: str):
    return run(
        "fit",
        "--config",
        str(CONFIGS / "digits_smoothness.yaml"),
        "--config",
        str(override),
        "--checkpoint_root",
        root,
        *extra,
        cwd=tmp,
        env={"PYTHONPATH": str(tmp)},
    )


def _load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.mark.slow
def test_killed_fit_resumes_to_the_weights_of_an_uninterrupted_fit(tmp_path: Path, console, cli):
    """The killed fit runs in a process of the warm console (its own process, killed by its own
    SIGKILL; the console script's signal handling is the next test's); the uninterrupted fit and
    the resume run its entry point in-process (they load no killer callback)."""
    (tmp_path / "killer.py").write_text(KILLER)
    plain = _fit(cli, tmp_path, "whole", _override(tmp_path, "whole", kill=False))
    assert plain.returncode == 0, plain.stderr[-2000:]

    killed = _fit(console, tmp_path, "cut", _override(tmp_path, "cut", kill=True))
    assert killed.returncode == -9, killed.stderr[-2000:]
    folder = tmp_path / "cut" / "digits_smoothness"
    cut = _load(folder / "latest" / "last.ckpt")
    assert cut["epoch"] == 1, (
        "last.ckpt must hold the end of the latest finished epoch (epoch 2 of 4)"
    )

    resumed = _fit(
        cli, tmp_path, "cut", _override(tmp_path, "resume", kill=False), "--ckpt_path", "last"
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "does not accept option" not in resumed.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["latest", "version_0"], (
        "resume continues its folder"
    )

    whole = _load(tmp_path / "whole" / "digits_smoothness" / "latest" / "last.ckpt")
    end = _load(folder / "latest" / "last.ckpt")
    assert (end["epoch"], end["global_step"]) == (whole["epoch"], whole["global_step"]) == (3, 12)
    for key, value in whole["state_dict"].items():
        torch.testing.assert_close(end["state_dict"][key], value, rtol=1e-5, atol=1e-6, msg=key)
    monitors = [k for k in end["callbacks"] if k.startswith("RobustnessMonitor")]
    assert len(monitors) == 1
    assert end["callbacks"][monitors[0]]["evaluated_epochs"] == [1, 3]
    assert whole["callbacks"][monitors[0]]["evaluated_epochs"] == [1, 3]


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_interrupt_during_an_epoch_leaves_the_last_finished_epoch(
    tmp_path: Path, console, sig: str, code: int
):
    """SIGTERM stops the console script in a subprocess; SIGINT a process of the warm console
    (the same handling, in the package, without the script's seconds of imports)."""
    (tmp_path / "killer.py").write_text(KILLER)
    runner = partial(console, fresh=True) if sig == "SIGTERM" else console
    stopped = _fit(
        runner, tmp_path, "ckpt", _override(tmp_path, "stop", kill=True, sig=sig, epochs=3)
    )
    assert stopped.returncode == code, stopped.stderr[-2000:]
    last = tmp_path / "ckpt" / "digits_smoothness" / "latest" / "last.ckpt"
    assert _load(last)["epoch"] == 1
    what = "interrupt" if sig == "SIGINT" else "SIGTERM"
    saved = str(last.parent.resolve() / "last.ckpt")
    assert (
        f"robust-train: fit stopped by {what}; {saved} holds the last finished epoch; "
        f"resume with --ckpt_path {saved}" in stopped.stderr
    )
