"""`robust-train evaluate` states its budget, protocol and planned work before the work starts,
and the closing budget line names the protocol: the attack ensemble or one attack per
objective (in-process, the shipped digits model, a few cheap steps)."""

from __future__ import annotations

import re

import pytest

QUICK = ["--n-samples", "6", "--n-steps", "2", "--parts", "fragility", "--attacks", "topk"]
QUICK += ["--explainers", "saliency", "--no-input-reference", "--no-progress", "--no-wandb"]


@pytest.mark.parametrize(
    ("flags", "how"),
    [
        (["--protocol", "fast"], "one attack per objective (not the ensemble)"),
        (["--search-queries", "3"], "the attack ensemble (its worst member per image, 3 random"),
    ],
)
def test_budget_protocol_and_planned_work_come_first(cli, tmp_path, flags, how):
    done = cli("evaluate", "--ckpt", "digits_robust", *QUICK, *flags, "--out", tmp_path / "o")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("evaluating "))
    budget, planned = lines[start + 1], lines[start + 2]
    assert budget.startswith("budget: L_inf epsilon 0.1 (25.5/255 of the pixel range), 2 steps")
    assert how in budget
    pattern = r"planned: ([\d,.]+) attack steps of work per image, ([\d,]+) in all"
    calls = re.fullmatch(pattern, planned)
    assert calls is not None, planned
    per_image, total = (float(g.replace(",", "")) for g in calls.groups())
    assert abs(total - 6 * per_image) <= 3  # each rounded
    # the fast protocol: one top-k attack of 2 steps (+ the clean map, a fifth of a step, and
    # the chance levels' 32 random maps, a forward each); the ensemble: its members with 2
    # restarts each, and the search's queries
    fast = 2 + 0.2 + 32 / 15
    assert per_image == round(fast, 1) if "fast" in flags else per_image > 2 * fast
    closing = done.stdout.splitlines()
    assert any(line.startswith("budget: ") and how in line for line in closing)
    summary = (tmp_path / "o" / "summary.md").read_text()
    assert "| measure | mean over the images | 95% interval |" in summary  # intervals there too
    assert any(line.startswith("- budget: ") and how in line for line in summary.splitlines())
