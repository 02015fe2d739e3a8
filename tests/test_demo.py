"""`robust-train demo` end to end, shortened: two fits, two W&B runs, the table and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from wandb_reader import read_run

from robust_train.cli import main


@pytest.mark.slow
def test_demo_trains_both_models_and_writes_the_report(tmp_path, capsys):
    assert (
        main(
            [
                "demo",
                "--out",
                str(tmp_path),
                "--epochs",
                "2",
                "--n-samples",
                "24",
                "--monitor-every",
                "1",
                "--trainer.enable_progress_bar=false",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "| measure | baseline | robust |" in out
    assert "| `attack/saliency/topk/topk_intersection` ↑ |" in out
    # The demo states its gain and compares it with the range measured over seeds (README).
    assert "gain of the robust model: top-k intersection" in out
    assert "the range measured over seeds" in out
    # Checkpoint rule: each model is evaluated at the end of its last epoch, not at best val/acc.
    results = json.loads((tmp_path / "results.json").read_text())
    for name in ("baseline", "robust"):
        checkpoint = Path(results[name]["checkpoint"])
        assert checkpoint.name == "last.ckpt"
        assert torch.load(checkpoint, map_location="cpu", weights_only=False)["epoch"] == 1
    report = (tmp_path / "report.md").read_text()
    for png in ("robustness_per_epoch.png", "fidelity_curves.png", "attack_examples.png"):
        assert (tmp_path / png).stat().st_size > 1000 and png in report
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2, "each fit gets its own W&B run"
    for run_dir in runs:
        run = read_run(run_dir)
        values = run.column("robustness/attack/saliency/topk/topk_intersection")
        assert len(values) == 2 and all(0 <= v <= 1 for v in values)
