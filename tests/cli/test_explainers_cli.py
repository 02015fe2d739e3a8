"""`robust-train evaluate --explainers grad_cam lrp deeplift`: the attacks aimed at those maps and
every other part scoring them, through the console script."""

from __future__ import annotations

import json
import math
from pathlib import Path

from robust_train.core.resources import shipped_checkpoint

ROOT = Path(__file__).resolve().parents[2]
EXPLAINERS = ("grad_cam", "lrp", "deeplift")


def test_evaluate_reports_every_measure_of_grad_cam_lrp_and_deeplift(tmp_path: Path, cli):
    done = cli(
        "evaluate", "--ckpt", str(shipped_checkpoint("digits_baseline")),
        "--explainers", *EXPLAINERS,
        "--attacks", "topk", "random_sign", "--n-samples", "8", "--no-ensemble", "--n-steps", "3",
        "--lipschitz-samples", "2", "--fidelity-steps", "3", "--no-progress", "--no-wandb",
        "--out", "out", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = json.loads((tmp_path / "out" / "results.json").read_text()).values()
    measures, summary = result["measures"], (tmp_path / "out" / "summary.md").read_text()
    assert measures["n_attacked"] > 0
    for explainer in EXPLAINERS:
        keys = [
            f"attack/{explainer}/topk/topk_intersection",
            f"attack/{explainer}/topk/spearman",
            f"attack/{explainer}/random_sign/topk_intersection",
            f"lipschitz/{explainer}/lipschitz",
            f"fidelity/{explainer}/fidelity",
            f"fidelity/{explainer}/mif_auc",
        ]
        for key in keys:
            assert key in measures and math.isfinite(measures[key]), (key, measures.get(key))
            assert f"| `{key}` " in summary, key
        assert 0 <= measures[f"attack/{explainer}/topk/topk_intersection"] <= 1
        assert measures[f"lipschitz/{explainer}/lipschitz"] >= 0
    # the attacks ran on these maps only: no saliency attack rows
    assert not [k for k in measures if k.startswith("attack/saliency/")]


def test_a_flag_that_is_not_there_names_the_one_that_is(tmp_path: Path, cli):
    done = cli(
        "evaluate", "--ckpt", str(shipped_checkpoint("digits_baseline")),
        "--attack-explainers", "grad_cam", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2 and "did you mean --explainers?" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
