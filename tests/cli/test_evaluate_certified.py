"""`robust-train evaluate --parts certified`: the certified block beside the other parts."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

KEYS = [
    "certified/saliency/certified_overlap",
    "certified/saliency/smoothed_attack_overlap",
    "certified/saliency/certified_radius_half",
]


def test_evaluate_command_reports_the_certified_block(cli, tmp_path) -> None:
    """The part is one more `--parts` name: results.json and summary.md carry its keys."""
    out = tmp_path / "eval"
    result = cli(
        "evaluate", "--ckpt", "checkpoints/digits_robust.ckpt", "--parts", "certified",
        "--n-samples", "6", "--certify-samples", "100", "--certify-attack-steps", "2",
        "--no-progress", "--out", str(out), cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    text = json.dumps(json.loads((out / "results.json").read_text()))
    summary = (out / "summary.md").read_text()
    for key in KEYS:
        assert key in text
    assert "certified top-k overlap" in summary
