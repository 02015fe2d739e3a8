"""Run folders are claimed, not guessed: `claim_run_folder` creates `version_<N>` with an
exclusive mkdir, so callers racing for the same experiment each get their own folder; a failed fit
releases what it claimed (and what Lightning's own loggers wrote); `--experiment` stays a plain
name under `--checkpoint_root`. In-process, through the `cli` fixture (the console script's entry
point)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
DIGITS = ["--config", str(CONFIGS / "digits_baseline.yaml")]
TINY = [
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=1",
    "--trainer.limit_val_batches=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.callbacks=[]",
]


def _everything(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_racing_claims_get_a_folder_each(tmp_path: Path):
    from robust_train.training.checkpointing import claim_run_folder

    experiment = tmp_path / "root" / "exp"
    (experiment / "version_3").mkdir(parents=True)
    n = 8
    barrier = threading.Barrier(n)
    claimed: list[Path] = []

    def claim() -> None:
        barrier.wait()
        claimed.append(claim_run_folder(experiment)[0])

    threads = [threading.Thread(target=claim) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(p.name for p in claimed) == sorted(f"version_{i}" for i in range(4, 4 + n))


def test_release_removes_only_an_unused_claim_and_the_folders_it_created(tmp_path: Path):
    from robust_train.training.checkpointing import claim_run_folder, release_run_folder

    folder, created = claim_run_folder(tmp_path / "root" / "exp")
    assert created == [folder, tmp_path / "root" / "exp", tmp_path / "root"]
    (folder / "config.yaml").write_text("x: 1\n")
    assert release_run_folder(folder, created) and not (tmp_path / "root").exists()
    kept, created = claim_run_folder(tmp_path / "exp")
    (kept / "last.ckpt").write_bytes(b"a checkpoint")
    assert not release_run_folder(kept, created) and (kept / "last.ckpt").is_file()


@pytest.mark.parametrize("name", ["../../escaped", "ABSOLUTE", "a/b", ".."])
def test_experiment_must_be_a_plain_run_name(tmp_path: Path, monkeypatch, cli, name: str):
    name = str(tmp_path / "absolute_run") if name == "ABSOLUTE" else name
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    args = ["fit", *DIGITS, *TINY, "--trainer.logger=false", "--experiment", name]
    done = cli(*args)
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("robust-train: error: `--experiment`") and "plain run name" in line
    assert _everything(tmp_path) == ["work"]  # nothing written, inside or outside
    assert not (tmp_path.parent / "escaped").exists()


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--model.model.init_args.num_classes", "5"], "has 5 outputs but the data"),
        (["--model.model.init_args.num_classes", "12"], "has 12 outputs but the data"),
        (["--model.num_classes", "5"], "`--model.num_classes` 5 does not match the data"),
    ],
)
def test_fit_refuses_a_model_that_does_not_fit_the_classes_before_training(
    tmp_path: Path, monkeypatch, cli, flags: list[str], fragment: str
):
    """Checked with the probe `evaluate` uses, before the model summary or any step; with
    `--trainer.logger null` (Lightning's own CSV logger) nothing is left either."""
    monkeypatch.chdir(tmp_path)
    done = cli("fit", *DIGITS, *TINY, "--trainer.logger", "null", *flags)
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]
    assert fragment in line and "DigitsDataModule) has 10 classes" in line, line
    assert "out of bounds" not in done.stderr and "Trainer.fit" not in done.stderr
    assert _everything(tmp_path) == []  # no run folder, no lightning_logs/version_0


def test_a_fit_failing_while_the_model_is_built_leaves_no_empty_runs_folder(
    tmp_path: Path, monkeypatch, cli
):
    """A fine-tune config whose `init_checkpoint` is not found from here (the default W&B
    logger): one line, exit 2, and no runs/ or checkpoints/ left behind."""
    monkeypatch.chdir(tmp_path)
    args = ["fit", "--config", str(CONFIGS / "finetune_digits_checkpoint.yaml"), *TINY]
    done = cli(*args, "--model.init_checkpoint", "checkpoints/not_here.ckpt")
    assert done.returncode == 2
    assert "not_here.ckpt" in done.stderr
    assert _everything(tmp_path) == []


@pytest.mark.slow
def test_a_fit_stopping_mid_run_removes_what_lightning_s_csv_logger_wrote(
    tmp_path: Path, monkeypatch, cli
):
    """A non-finite loss at the first step with `--trainer.logger null`: Lightning's CSVLogger
    would leave lightning_logs/version_0/hparams.yaml; nothing is left."""
    monkeypatch.chdir(tmp_path)
    args = ["fit", *DIGITS, *TINY, "--trainer.logger", "null", "--trainer.limit_train_batches=2"]
    done = cli(*args, "--model.optimizer.init_args.lr=1e12")
    assert done.returncode == 2
    assert "non-finite loss" in done.stderr
    assert _everything(tmp_path) == []


@pytest.mark.slow
def test_limit_train_batches_1_is_one_batch_and_the_fit_prints_its_run_folder(
    tmp_path: Path, monkeypatch, cli, recwarn
):
    import torch
    import yaml

    monkeypatch.chdir(tmp_path)
    done = cli("fit", *DIGITS, *TINY, "--trainer.logger=false")
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "checkpoints" / "digits_baseline" / "version_0"
    assert f"run folder: {run}" in done.stdout
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["trainer"]["limit_train_batches"] == 1
    assert isinstance(config["trainer"]["limit_train_batches"], int)
    last = torch.load(run / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == 1  # one batch, not the whole epoch (1.0)
    assert not [w for w in recwarn if "does not round-trip" in str(w.message)]
