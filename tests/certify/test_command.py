"""`robust-train certify` on the shipped digits pair: results.json, summary.md and the plot, the
same images for both models, one-line user errors with exit code 2, and no silent overwrite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robust_train.core.resources import shipped_checkpoint

ROOT = Path(__file__).resolve().parents[2]
PAIR = [str(shipped_checkpoint(f"digits_{name}")) for name in ("baseline", "robust")]
FAST = ["--n-images", "3", "--noise-samples", "60", "--sigma", "0.1", "--attack-steps", "2"]
FAST += ["--attack-samples", "2", "--random-points", "1", "--attack-radii", "0.1", "--no-progress"]


@pytest.mark.slow
def test_certify_two_checkpoints_writes_results_summary_and_plot(tmp_path, cli) -> None:
    out = tmp_path / "run"
    done = cli("certify", "--ckpt", *PAIR, "--names", "base", "robust", "--out", out, *FAST)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert set(results["models"]) == {"base", "robust"} and len(results["images"]) == 3
    for model in results["models"].values():
        assert model["n_images"] == 3 and len(model["radii"]) == 11
        curve = model["certified_overlap"]
        assert curve == sorted(curve, reverse=True) and 0 <= curve[-1] <= curve[0] <= 1
        (record,) = model["attack"]
        assert record["radius"] == 0.1 and record["attack_label_kept"] == 1.0
        assert record["certified"] <= record["empirical"] <= record["attack"]
        assert model["seconds"]["certify_per_image"] > 0
    summary = (out / "summary.md").read_text()
    assert "| L2 radius | base certified | base attack (UCB) |" in summary
    assert "smoothed" in summary and "not about the raw saliency map" in summary
    assert (out / "certify.png").stat().st_size > 10_000
    assert "base: certified in" in done.stdout
    # the same folder for other checkpoints is refused, for the same ones it is rewritten
    done = cli("certify", "--ckpt", PAIR[0], "--out", out, *FAST)
    assert done.returncode == 2 and "holds the results of other checkpoints" in done.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sigma", "0"], "`--sigma` must be > 0, got 0.0"),
        (["--sigma", "1.5"], "`--sigma` must be <= 1"),
        (["--alpha", "2"], "`--alpha` must lie strictly between 0 and 1"),
        (["--radii", "-1"], "`--radii` must be >= 0, got -1.0"),
        (["--attack-radii", "0"], "`--attack-radii` must be > 0"),
        (["--explainer", "nope"], "Unknown `--explainer` 'nope'"),
        (["--n-images", "0"], "`--n-images` must be > 0, got 0"),
        (["--names", "a"], "`--names` ['a'] must be 2 distinct names"),
    ],
)
def test_user_errors_are_one_line_with_exit_code_2(args, message, cli) -> None:
    ckpts = PAIR if "--names" in args else PAIR[:1]
    done = cli("certify", "--ckpt", *ckpts, *args)
    assert done.returncode == 2
    err = done.stderr.strip()
    assert err.count("\n") == 0 and message in err, err


def test_missing_checkpoint_and_radius_beyond_the_box(tmp_path, cli) -> None:
    done = cli("certify", "--ckpt", tmp_path / "none.ckpt")
    assert done.returncode == 2 and "does not exist" in done.stderr
    args = ["certify", "--ckpt", PAIR[0], "--radii", "9", "--out", tmp_path, *FAST[:4]]
    done = cli(*args, "--attack-steps", "0", "--random-points", "0")
    assert done.returncode == 2 and "exceeds sqrt(64) = 8" in done.stderr
