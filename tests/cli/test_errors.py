"""User errors through the real console script (and, for the cases that need no fresh
interpreter, in-process through the `cli` fixture): one line `robust-train: error: ...` on stderr,
exit code 2, no traceback (unless --debug); names checked before any work; failed starts leave
no W&B run and no run folder; one help lists every command."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SMOOTH = [
    "--config",
    str(CONFIGS / "digits_smoothness.yaml"),
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=3",
    "--trainer.limit_val_batches=1",
    "--trainer.enable_progress_bar=false",
]
NOISE = ("args parameter is intended", "litlogger", "anonymous setting", "LeafSpec")


def _one_error_line(result, fragment: str) -> str:
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("robust-train: error: "), result.stderr[-3000:]
    assert fragment in errors[0], errors[0]
    return errors[0]


def _leftovers(folder: Path) -> list[str]:
    runs = [p.name for p in (folder / "runs" / "wandb").glob("offline-run-*")]
    ckpt = folder / "checkpoints"
    return runs + ([str(p.relative_to(folder)) for p in ckpt.rglob("*")] if ckpt.is_dir() else [])


@pytest.mark.slow
def test_user_errors_are_one_line_with_exit_code_2(tmp_path: Path, console, cli):
    sandboxes = {name: tmp_path / name for name in ("images", "nonfinite", "plain")}
    for folder in sandboxes.values():
        folder.mkdir()
    (tmp_path / "bad.ckpt").write_text("garbage")
    torch.save(
        {"state_dict": {"model.other.weight": torch.zeros(3, 3)}, "epoch": 0},
        tmp_path / "other.ckpt",
    )
    cases = {
        "help": (["--help"], tmp_path),
        "typo": (["evalute"], tmp_path),
        "negative": (
            [*SMOOTH, "--trainer.logger=false", "--model.penalties.init_args.weight=-1"],
            tmp_path,
        ),
        "images": (
            [
                "--config",
                str(CONFIGS / "finetune_torchvision.yaml"),
                "--trainer.max_epochs=1",
                "--data.init_args.root",
                str(tmp_path / "no_images"),
            ],
            sandboxes["images"],
        ),
        "nonfinite": ([*SMOOTH, "--model.optimizer.init_args.lr=1e12"], sandboxes["nonfinite"]),
        "corrupt": (
            [*SMOOTH, "--trainer.logger=false", "--ckpt_path", str(tmp_path / "bad.ckpt")],
            tmp_path,
        ),
        "architecture": (
            [*SMOOTH, "--trainer.logger=false", "--ckpt_path", str(tmp_path / "other.ckpt")],
            tmp_path,
        ),
        "explainer": (["evaluate", "--ckpt", "missing.ckpt", "--explainers", "gradcam"], tmp_path),
    }
    fit = {"negative", "images", "nonfinite", "corrupt", "architecture"}
    in_console = {"typo"}  # the console script itself, in a subprocess; the rest in-process
    out = {
        name: (partial(console, fresh=True) if name in in_console else cli)(
            *(["fit"] if name in fit else []), *args, cwd=cwd
        )
        for name, (args, cwd) in cases.items()
    }

    assert out["help"].returncode == 0
    for command in ("fit", "validate", "test", "predict", "demo", "evaluate", "compare", "export"):
        assert f"\n  {command} " in out["help"].stdout
    _one_error_line(out["typo"], "did you mean 'evaluate'")
    _one_error_line(out["negative"], "`weight` must be >= 0, got -1.0")
    _one_error_line(out["images"], "no_images")
    _one_error_line(out["nonfinite"], "non-finite")
    _one_error_line(out["corrupt"], "bad.ckpt")
    _one_error_line(out["architecture"], "does not fit the configured model")
    _one_error_line(out["explainer"], "gradcam")  # checked before the (missing) checkpoint
    for name in ("images", "nonfinite"):  # failed starts: no orphan W&B run, no config-only folder
        assert _leftovers(sandboxes[name]) == [], (name, _leftovers(sandboxes[name]))
        for noise in NOISE:
            assert noise not in out[name].stderr + out[name].stdout, (name, noise)


def test_debug_shows_the_traceback_and_compare_needs_two_checkpoints(tmp_path: Path, cli):
    args = ["fit", *SMOOTH, "--trainer.logger=false", "--model.penalties.init_args.weight=-1"]
    done = cli(*args)
    assert done.returncode == 2
    *before, last = done.stderr.strip().splitlines()
    assert last == "robust-train: error: `weight` must be >= 0, got -1.0"
    assert before in ([], ["Seed set to 0"]), before  # Lightning's line, as from the script
    with pytest.raises(ValueError, match="must be >= 0"):  # --debug: the exception itself
        cli(*args, "--debug")
    done = cli("compare", tmp_path / "a.ckpt")
    assert done.returncode == 2 and "needs two or more checkpoints, got 1" in done.stderr
    done = cli("fit", *SMOOTH, "--trainer.max_epochz", "3")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "robust-train: error: unrecognized arguments: "
        "--trainer.max_epochz 3 (did you mean --trainer.max_epochs?)"
    )


def test_threads_option_sets_torch_threads(tmp_path: Path):
    from robust_train.app.lightning_cli import lightning_main

    before = torch.get_num_threads()
    try:
        for flag, expected in ((["--threads", "2"], 2), ([], 1)):  # default: 1 for a small model
            torch.set_num_threads(4)
            lightning_main(
                [*SMOOTH, "--trainer.logger=false", "--checkpoint_root", str(tmp_path), *flag],
                run=False,
            )
            assert torch.get_num_threads() == expected
        with pytest.raises(Exception, match="threads"):
            lightning_main([*SMOOTH, "--trainer.logger=false", "--threads", "0"], run=False)
    finally:
        torch.set_num_threads(before)
