"""`robust-train certify --method interval|crown` on the shipped digits pair: results.json and
summary.md, the certified overlap never above what the attack and random points leave, and
one-line user errors with exit code 2 before any work."""

from __future__ import annotations

import json

import pytest

from robust_train.core.resources import shipped_checkpoint

PAIR = [str(shipped_checkpoint(f"digits_{name}")) for name in ("baseline", "robust")]
FAST = ["--n-images", "3", "--k", "8", "--attack-steps", "1", "--random-points", "2"]


@pytest.mark.slow
def test_certify_bounds_writes_results_and_summary(tmp_path, cli) -> None:
    method = "crown"  # interval bounds, then back-substitution: both code paths
    out = tmp_path / "run"
    args = ["certify", "--method", method, "--ckpt", *PAIR, "--eps", "0", "0.01", "0.1"]
    done = cli(*args, "--out", out, *FAST)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["method"] == method and len(results["images"]) == 3
    for model in results["models"].values():
        assert model["epsilons"] == [0.0, 0.01, 0.1] and model["k"] == 8
        assert model["certified_overlap"][0] == 1.0  # radius 0: the map itself
        curve = model["certified_overlap"]
        assert curve == sorted(curve, reverse=True)
        assert model["empirical_min_gap"] >= 0  # no point of any ball below its certificate
        assert model["stable_relus"][0] == 1.0 and model["stable_relus"][2] < 1.0
    summary = (out / "summary.md").read_text()
    assert f"# Deterministic certificate ({method}, saliency, top-8)" in summary
    assert "| L_inf radius | digits_baseline certified (median) |" in summary
    assert "wrote" in done.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--method", "interval", "--eps", "2"], "`--eps` must be an L_inf radius in [0, 1]"),
        (["--method", "crown", "--explainer", "grad_cam"], "`--explainer` must be one of"),
        (["--method", "interval", "--radii", "0.1"], "`--radii` are L2 radii"),
        (["--eps", "0.1"], "`--eps` sets the L_inf radii of --method interval or crown"),
        (["--method", "interval", "--k", "0"], "`--k` must be > 0, got 0"),
        (["--method", "interval", "--n-images", "0"], "`--n-images` must be > 0, got 0"),
    ],
)
def test_user_errors_are_one_line_with_exit_code_2(args, message, cli) -> None:
    done = cli("certify", "--ckpt", PAIR[0], *args)
    assert done.returncode == 2
    err = done.stderr.strip()
    assert err.count("\n") == 0 and message in err, err
