"""Run folders and what each checkpoint holds: every fit gets
`<root>/<experiment>/version_<N>/`, `latest` points to the newest, `last.ckpt` is the latest
finished epoch even when the monitored value never improves, `best.ckpt` follows the monitor."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from robust_train.app.lightning_cli import lightning_main
from robust_train.training.checkpointing import latest_run_folder, new_run_folder

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "digits_baseline.yaml"
TINY = [
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1",
    "--trainer.logger=false",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.callbacks=[]",
]


def _fit(root: Path, *extra: str) -> None:
    cli = lightning_main(
        ["--config", str(CONFIG), *TINY, "--checkpoint_root", str(root), *extra], run=False
    )
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)


def _epoch(path: Path) -> int:
    return int(torch.load(path, map_location="cpu", weights_only=True)["epoch"])


def test_last_is_the_latest_epoch_when_the_monitor_never_improves(tmp_path: Path):
    # `epoch` with mode=min is best at epoch 0 and never improves: Lightning >= 2.5 alone would
    # leave last.ckpt at epoch 0 (it rewrites last only beside a new best).
    _fit(tmp_path, "--trainer.max_epochs=3", "--checkpoint.monitor=epoch", "--checkpoint.mode=min")
    run = tmp_path / "digits_baseline" / "version_0"
    assert _epoch(run / "last.ckpt") == 2
    assert _epoch(run / "best.ckpt") == 0
    assert sorted(p.name for p in run.iterdir()) == ["best.ckpt", "config.yaml", "last.ckpt"]


def test_each_fit_gets_a_run_folder_and_latest_points_to_the_newest(tmp_path: Path):
    for _ in range(2):
        _fit(tmp_path, "--trainer.max_epochs=1")
    experiment = tmp_path / "digits_baseline"
    assert sorted(p.name for p in experiment.iterdir()) == ["latest", "version_0", "version_1"]
    for version in ("version_0", "version_1"):  # nothing mixed, no -v1 files
        assert sorted(p.name for p in (experiment / version).iterdir()) == [
            "best.ckpt",
            "config.yaml",
            "last.ckpt",
        ]
    assert os.readlink(experiment / "latest") == "version_1"
    assert latest_run_folder(experiment) == (experiment / "version_1").resolve()
    assert new_run_folder(experiment).name == "version_2"


def test_best_holds_the_weights_only_and_a_fit_resumes_from_last(tmp_path: Path, cli):
    from robust_train.models import load_classifier

    _fit(tmp_path, "--trainer.max_epochs=2")
    run = tmp_path / "digits_baseline" / "version_0"
    best = torch.load(run / "best.ckpt", map_location="cpu", weights_only=True)
    last = torch.load(run / "last.ckpt", map_location="cpu", weights_only=True)
    assert "optimizer_states" in last and "loops" in last  # what resuming needs
    assert "optimizer_states" not in best and "callbacks" not in best
    assert best["robust_train"]["model"] == last["robust_train"]["model"]  # rebuilds the model
    assert "rng_states" in best  # the callback's own records are kept
    # Adam keeps two tensors per weight: the full checkpoint is about three times the weights.
    assert (run / "best.ckpt").stat().st_size < 0.5 * (run / "last.ckpt").stat().st_size
    assert load_classifier(run / "best.ckpt") is not None
    args = ["--config", CONFIG, *TINY, "--checkpoint_root", tmp_path]
    done = cli("fit", *args, "--ckpt_path", "best")
    assert done.returncode == 2
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("robust-train: error:")]
    assert "holds weights only" in line and "resume with `--ckpt_path last`" in line
    assert sorted(p.name for p in (tmp_path / "digits_baseline").iterdir()) == [
        "latest",
        "version_0",
    ]  # refused before a new run folder was claimed
