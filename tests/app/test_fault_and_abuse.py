"""Fault and abuse, as a user (or an attacker) meets them: `robust-train` in processes of its own,
several at once, killed with SIGKILL at several points of `fit`, `evaluate` and `export`, and
handed crafted files. The real console script runs in a subprocess as the fit killed
mid-training and for the recorded module; the other processes are the warm
console's (tests/support/warm_console.py: the same command in a process of its own, killable like
any, without the script's seconds of imports), and where a case needs no process of its own, the
script's entry point `robust_train.app.cli.main` runs in-process. What must hold:

- fits started at the same moment with the same experiment get a run folder each (default W&B
  logger, offline), and `--trainer.limit_train_batches 1` is one batch;
- a process killed with SIGKILL never leaves a truncated file under a file's own name: every
  checkpoint, results.json and exported copy on disk is complete, and the run resumes / the
  command reruns;
- crafted inputs run nothing and change nothing: a recorded class path naming a module of the
  working folder, recorded data that would download, a `!!python` tag, a symlink in `--out`, an
  export onto its own source, an `--experiment` that climbs out of `--checkpoint_root`;
- bad input is one line and exit code 2, before any work.
"""

from __future__ import annotations

import json
import os
import signal
import time
from functools import partial
from pathlib import Path

import pytest
import torch

from robust_train.models import SmallCNN
from tests.support.paths import CONFIGS
from tests.support.reliability import (
    TINY_CERTIFY,
    TINY_EVAL,
    error_line,
    evil_module,
    image_folder,
    save_fit_checkpoint,
)

pytestmark = pytest.mark.slow

DIGITS = ["--config", str(CONFIGS / "digits_baseline.yaml")]
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
ONE_BATCH = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=1"]
ONE_BATCH += ["--trainer.limit_val_batches=1", "--trainer.callbacks=[]", *QUIET]


def _wait_for(condition, timeout: float = 240.0, every: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return False


def _ended_or_reached(process, reached) -> bool:
    return process.poll() is not None or reached(process)


def _kill(process) -> None:
    """SIGKILL a console-script subprocess or a warm console process."""
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL


def _loads(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def test_fits_started_at_the_same_moment_get_a_run_folder_each(tmp_path: Path, console):
    """Two warm processes start within milliseconds of each other: the closest race for a run
    folder (the console script itself starts seconds later, after its imports, and is killed
    mid-fit in test_a_fit_killed_...)."""
    n = 2
    fit = ["fit", *DIGITS, *ONE_BATCH]
    processes = [console.start(*fit, cwd=tmp_path) for _ in range(n)]
    results = [p.communicate(timeout=600) for p in processes]
    for process, (_, err) in zip(processes, results, strict=True):
        assert process.returncode == 0, err[-3000:]
        assert "JsonargparseWarning" not in err and "does not round-trip" not in err
    experiment = tmp_path / "checkpoints" / "digits_baseline"
    folders = sorted(p.name for p in experiment.iterdir() if p.name.startswith("version_"))
    assert folders == [f"version_{i}" for i in range(n)]
    printed = sorted(
        line for out, _ in results for line in out.splitlines() if "run folder" in line
    )
    assert len(printed) == n and len(set(printed)) == n
    runs = set()
    for folder in folders:
        run = experiment / folder
        assert sorted(p.name for p in run.iterdir()) == ["best.ckpt", "config.yaml", "last.ckpt"]
        last = _loads(run / "last.ckpt")
        assert last["global_step"] == 1  # `limit_train_batches 1` is one batch
        runs.add(last["wandb_run"]["id"])
    assert len(runs) == n  # and a W&B run each
    assert len(list((tmp_path / "runs" / "wandb").glob("offline-run-*"))) == n


def test_a_fit_killed_at_several_points_leaves_only_whole_checkpoints(tmp_path: Path, console):
    """SIGKILL right after the run folder is claimed (a warm process), then mid-training after
    the first last.ckpt (the console script): every checkpoint on disk loads, a new fit claims a
    new folder, and `--ckpt_path last` resumes the killed run to the end (a warm process)."""
    args = [*DIGITS, *QUIET, "--trainer.callbacks=[]", "--trainer.logger=false"]
    args += ["--trainer.max_epochs=3", "--trainer.limit_val_batches=2"]
    experiment = tmp_path / "checkpoints" / "digits_baseline"
    early = console.start("fit", *args, cwd=tmp_path)
    assert _wait_for(lambda: (experiment / "version_0").is_dir())
    _kill(early)
    assert not list(experiment.rglob("*.ckpt"))
    mid = console.start("fit", *args, cwd=tmp_path, fresh=True)
    run = experiment / "version_1"  # the killed fit's empty folder stays claimed
    assert _wait_for(lambda: (run / "last.ckpt").is_file())
    time.sleep(0.5)
    _kill(mid)
    saved = sorted(experiment.rglob("*.ckpt"))
    assert saved and all(p.parent == run for p in saved)
    for path in saved:
        assert "state_dict" in _loads(path)
    assert not [p for p in run.iterdir() if ".partial" in p.name or p.name.startswith(".")]
    resumed = console("fit", *args, "--ckpt_path", "last", cwd=tmp_path, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _loads(run / "last.ckpt")["epoch"] == 2
    assert os.readlink(experiment / "latest") == "version_1"


def test_an_export_killed_mid_write_leaves_no_truncated_copy(tmp_path: Path, console):
    """The killed export and its rerun are warm processes (test_a_fit_killed_... kills the
    console script itself)."""
    src = save_fit_checkpoint(
        tmp_path / "big.ckpt", optimizer_states=[{"big": torch.zeros(40_000_000)}]
    )
    content = _loads(src)
    content["state_dict"]["model.padding"] = torch.zeros(40_000_000)  # kept by the export
    torch.save(content, src)
    dst = tmp_path / "small.ckpt"
    export = console.start("export", str(src), str(dst), cwd=tmp_path)
    started = _wait_for(lambda: dst.exists() or any(tmp_path.glob(".small.ckpt.*")), every=0.001)
    assert started
    _kill(export)
    assert not dst.exists() or "state_dict" in _loads(dst)  # absent, or whole: never truncated
    again = console("export", str(src), str(dst), "--overwrite", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _loads(dst)["state_dict"]["model.padding"].shape == (40_000_000,)
    assert not list(tmp_path.glob(".small.ckpt.*"))  # the killed write's partial is gone
    assert _loads(src)["optimizer_states"]  # the source is untouched


def test_an_evaluate_killed_at_several_points_leaves_whole_files_or_none(tmp_path: Path, console):
    """Killed once it says it is evaluating, and once its first output file is there; then run
    to the end (warm processes; test_a_fit_killed_... kills the console script itself)."""
    ckpt = save_fit_checkpoint(tmp_path / "model.ckpt")
    out = tmp_path / "out"
    args = ["evaluate", "--ckpt", str(ckpt), "--out", str(out), "--n-samples", "24"]
    args += ["--no-progress", "--no-wandb", "--explainers", "saliency", "--n-steps", "5"]
    args += ["--no-ensemble"]
    points = {
        "evaluating": lambda process: "\nevaluating " in "\n" + process.stderr_so_far(),
        "writing": lambda process: out.is_dir() and any(out.iterdir()),
    }
    for name, reached in points.items():
        process = console.start(*args, cwd=tmp_path)
        assert _wait_for(partial(_ended_or_reached, process, reached), every=0.001), name
        assert reached(process), f"{name} never reached: {process.stderr_so_far()[-3000:]}"
        if process.poll() is None:
            _kill(process)
        if (out / "results.json").exists():
            (result,) = json.loads((out / "results.json").read_text()).values()
            assert result["subset"]["n_images"] == 24, name
        if (out / "summary.md").exists():
            assert (out / "summary.md").read_text().endswith("\n"), name
        if (out / "verdict.png").exists():
            assert (out / "verdict.png").read_bytes().endswith(b"IEND\xaeB`\x82"), name
    done = console(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["results.json", "summary.md", "verdict.png"]


def test_crafted_inputs_run_nothing_and_change_nothing(tmp_path: Path, cli, console):
    work = tmp_path / "work"
    work.mkdir()
    name, marker = evil_module(work)
    save_fit_checkpoint(
        work / "evil.ckpt", model_spec={"class_path": f"{name}.Net", "init_args": {}}
    )
    cifar = {
        "class_path": "robust_train.data.CIFAR10DataModule",
        "init_args": {"data_dir": str(tmp_path / "nowhere"), "download": True},
    }
    rgb = SmallCNN(in_channels=3, num_classes=10, input_size=32)
    downloads = save_fit_checkpoint(work / "cifar.ckpt", model=rgb, datamodule=cifar)
    good = save_fit_checkpoint(work / "good.ckpt")
    (work / "tag.yaml").write_text(f"data: !!python/object/apply:os.system ['touch {marker}']\n")
    (work / "precious.txt").write_text("keep me")
    (work / "linked").mkdir()
    (work / "linked" / "summary.md").symlink_to(work / "precious.txt")
    fit = ["fit", *DIGITS, *ONE_BATCH, "--trainer.logger=false"]
    cases = {  # name -> (arguments, fragments of the one error line)
        "evil_evaluate": (
            ["evaluate", "--ckpt", "evil.ckpt", *TINY_EVAL],
            (f"{name}.Net", "--trust-class-path"),
        ),
        "evil_certify": (["certify", "--ckpt", "evil.ckpt", *TINY_CERTIFY], (f"{name}.Net",)),
        "download": (["evaluate", "--ckpt", "cifar.ckpt", *TINY_EVAL], ("--data-config",)),
        "python_tag": (
            ["evaluate", "--ckpt", "good.ckpt", "--data-config", "tag.yaml", *TINY_EVAL],
            ("`--data-config`",),
        ),
        "symlink_out": (
            ["evaluate", "--ckpt", "good.ckpt", "--out", "linked", *TINY_EVAL],
            ("summary.md",),
        ),
        "climbing_experiment": ([*fit, "--experiment", "../../escaped"], ("`--experiment`",)),
        "five_outputs": (
            [*fit, "--model.model.init_args.num_classes", "5"],
            ("has 5 outputs", "has 10 classes"),
        ),
    }
    before = good.read_bytes()
    # The console script in a subprocess for the recorded module, the export in a warm process;
    # the other cases through its entry point in-process (the marker proves the module never ran
    # in any).
    in_console = {"evil_evaluate"}
    results = {
        k: (partial(console, fresh=True) if k in in_console else cli)(*a, cwd=work)
        for k, (a, _) in cases.items()
    }
    exported = console("export", "evil.ckpt", "copy.ckpt", cwd=work)
    for case, (_, fragments) in cases.items():
        result = results[case]
        error_line(result, *fragments)
        assert "out of bounds" not in result.stderr and "Trainer.fit" not in result.stderr, case
    assert exported.returncode == 0, exported.stderr  # copied, never imported
    assert _loads(work / "copy.ckpt")["robust_train"]["model"]["class_path"] == f"{name}.Net"
    assert not marker.exists()  # neither the recorded module nor the YAML tag ran
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "escaped").exists()
    assert not (work / "checkpoints").exists()
    assert (work / "precious.txt").read_text() == "keep me" and good.read_bytes() == before
    assert sorted(p.name for p in (work / "linked").iterdir()) == ["summary.md"]
    assert not (work / "runs").exists()  # nothing was evaluated
    assert downloads.is_file()


def test_an_image_folder_with_an_empty_class_is_reported_before_training(
    tmp_path: Path, cli, console
):
    """check-data in a warm process, the fit in-process."""
    image_folder(tmp_path / "images", {"cat": 6, "dog": 6, "emu": 6})
    (tmp_path / "images" / "train" / "yak").mkdir()
    (tmp_path / "cfg.yaml").write_text(
        "model:\n  model:\n    class_path: robust_train.models.SmallCNN\n"
        "    init_args: {in_channels: 1, num_classes: 3, input_size: 8}\n"
        "data:\n  class_path: robust_train.data.ImageFolderDataModule\n"
        "  init_args: {root: images, image_size: 8, grayscale: true, batch_size: 4,\n"
        "              val_fraction: 0.25}\n"
    )
    check = console("check-data", "--config", "cfg.yaml", cwd=tmp_path)
    fit = cli("fit", "--config", "cfg.yaml", *ONE_BATCH, cwd=tmp_path)  # in-process
    error_line(check, "['yak']", "hold no image")
    error_line(fit, "['yak']")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.yaml", "images"]
