"""`robust-train evaluate` and `compare` on checkpoints written by `robust-train fit`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from robust_train.app.lightning_cli import lightning_main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FAST = [
    "--n-samples",
    "24",
    "--no-ensemble",
    "--n-steps",
    "5",
    "--lipschitz-samples",
    "2",
    "--fidelity-steps",
    "4",
    "--ig-steps",
    "4",
    "--no-progress",
]


@pytest.fixture(scope="module")
def baseline_ckpt(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fit")
    built = lightning_main(
        [
            "--config",
            str(CONFIGS / "digits_baseline.yaml"),
            "--trainer.max_epochs=2",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            "--checkpoint_root",
            str(root),
        ],
        run=False,
    )
    built.trainer.fit(built.model, datamodule=built.datamodule)
    return root / "digits_baseline" / "latest" / "last.ckpt"


def test_evaluate_writes_results_and_summary(baseline_ckpt, tmp_path, cli):
    done = cli("evaluate", "--ckpt", baseline_ckpt, "--out", tmp_path, *FAST)
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = json.loads((tmp_path / "results.json").read_text()).values()
    m = result["measures"]
    attacks = {k.split("/")[2] for k in m if k.startswith("attack/saliency/")}
    assert attacks == {"random_sign", "topk", "mass_center", "targeted"}
    lipschitz = {k.split("/")[1] for k in m if k.startswith("lipschitz/")}
    assert lipschitz == {"saliency", "input_x_gradient"}
    assert 0 < m["split_accuracy"] <= 1 and result["n_images"] == 24
    assert result["training_seconds"] > 0
    row = "| `attack/saliency/topk/topk_intersection` ↑ |"
    assert row in (tmp_path / "summary.md").read_text()
    assert row in done.stdout


def test_test_subcommand_on_the_best_checkpoint_of_the_latest_run(baseline_ckpt, cli):
    """The README's `robust-train test --config ... --ckpt_path ...`."""
    root = baseline_ckpt.parents[2]
    before = sorted(p.name for p in (root / "digits_baseline").iterdir())
    done = cli(
        "test",
        "--config",
        CONFIGS / "digits_baseline.yaml",
        "--checkpoint_root",
        root,
        "--ckpt_path",
        "best",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "test/acc" in done.stdout
    assert (
        sorted(p.name for p in (root / "digits_baseline").iterdir()) == before
    )  # no new run folder


def test_default_out_follows_the_checkpoint_path_and_never_mixes_checkpoints(
    baseline_ckpt, tmp_path, monkeypatch, cli
):
    from robust_train.app.commands import default_out
    from robust_train.app.settings_flags import CommandParser, add_settings_arguments, settings_from

    monkeypatch.chdir(tmp_path)
    a = tmp_path / "checkpoints" / "one" / "version_0" / "best.ckpt"
    b = tmp_path / "checkpoints" / "two" / "version_0" / "best.ckpt"
    for path in (a, b):
        path.parent.mkdir(parents=True)
        path.write_bytes(baseline_ckpt.read_bytes())
    assert default_out(a) != default_out(b)
    assert default_out(a).as_posix() == "runs/eval/one/version_0/best/default"
    parser = CommandParser()
    add_settings_arguments(parser)
    flags = [*FAST, "--attacks", "topk"]
    custom = settings_from(parser.parse_args(flags))
    rar = settings_from(parser.parse_args(["--protocol", "rar"]))
    assert default_out(a, rar).name == "rar" and default_out(a, custom).name.startswith("custom-")
    assert cli("evaluate", "--ckpt", a, *flags, "--no-wandb").returncode == 0
    out = tmp_path / default_out(a, custom)
    summary = (out / "summary.md").read_text()
    assert (
        "## Settings" in summary
        and "| n_steps | 5 |" in summary
        and "| n_samples | 24 |" in summary
    )
    assert "higher is more robust" in summary and "lower is more robust" in summary
    done = cli("evaluate", "--ckpt", b, "--out", out, *FAST, "--attacks", "topk")
    assert done.returncode == 2 and "holds the results of other checkpoints" in done.stderr
    done = cli("evaluate", "--ckpt", a, "--out", out, *FAST, "--no-wandb")
    assert done.returncode == 2 and "holds the results of other settings" in done.stderr
    done = cli("evaluate", "--ckpt", a, *FAST, "--attacks", "topk", "--no-wandb")
    assert done.returncode == 0  # same one: fine


def test_protocol_preset_with_explicit_flags_on_top():
    import argparse

    from robust_train.app.commands import add_settings_arguments, settings_from
    from robust_train.evaluation import PROTOCOLS

    parser = argparse.ArgumentParser()
    add_settings_arguments(parser)
    rar = settings_from(parser.parse_args(["--protocol", "rar"]))
    assert rar == PROTOCOLS["rar"]
    mixed = settings_from(
        parser.parse_args(["--protocol", "rar", "--n-steps", "7", "--explainers", "saliency"])
    )
    assert (mixed.n_steps, mixed.explainers, mixed.epsilon, mixed.n_restarts) == (
        7,
        ("saliency",),
        0.3,
        3,
    )
    plain = settings_from(parser.parse_args(["--epsilon", "0.2"]))
    assert plain.epsilon == 0.2 and plain.n_restarts == 1


@pytest.mark.slow
def test_compare_writes_a_report_with_a_column_per_checkpoint(baseline_ckpt, tmp_path, cli):
    pair = [baseline_ckpt, baseline_ckpt]
    done = cli(
        "compare", *pair, "--names", "a", "b", "--out", tmp_path,
        "--attacks", "topk", "--explainers", "saliency", *FAST,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    text = (tmp_path / "report.md").read_text()
    assert "| measure | a | b |" in text
    assert (tmp_path / "robustness_per_epoch.png").is_file()  # from the checkpoints' history
    import matplotlib.image

    panels = matplotlib.image.imread(tmp_path / "robustness_per_epoch.png")
    assert panels.shape[0] <= (3.0 * 2 + 0.6) * 110  # two rows of headline panels at most
    rows = matplotlib.image.imread(tmp_path / "verdict.png")
    assert rows.shape[0] <= 2 * 1.9 * 90 + 10  # a row per model and explainer
    printed = done.stdout
    assert "\nbudget: L_inf epsilon" in printed
    assert "verdict (a): saliency: " in printed and "verdict (b): saliency: " in printed
    again = cli("compare", *pair, "--out", tmp_path, *FAST, "--names", "a", "b")
    assert again.returncode == 2  # other settings: refused
    assert "holds the results of other settings" in again.stderr
    assert (tmp_path / "fidelity_curves.png").is_file() and (
        tmp_path / "attack_examples.png"
    ).is_file()


def test_accuracy_covers_the_whole_split(baseline_ckpt):
    from robust_train.app.checkpoint_io import heldout_tensors, load_checkpoint

    model, data = load_checkpoint(baseline_ckpt)
    x, y, acc = heldout_tensors(data, 10, model=model)
    assert x.shape == (10, 1, 8, 8)
    full_x, full_y, _ = heldout_tensors(data, 10_000)
    assert acc == pytest.approx(float((model(full_x).argmax(1) == full_y).float().mean()))
    assert len(full_x) > 300 and torch.equal(full_x[:10], x)


def test_missing_checkpoint_is_named(tmp_path, cli):
    done = cli("evaluate", "--ckpt", tmp_path / "nope.ckpt")
    assert done.returncode == 2
    err = done.stderr.strip()
    assert err.startswith("robust-train: error: ") and "nope.ckpt" in err and "\n" not in err
