"""The 224 px benchmarks (evaluate per image, the step of chosen variants) and the GPU script:
it runs both on CUDA under bf16 where a GPU is, and is skipped cleanly where none is."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def _bash(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT)], env={**os.environ, **env}, capture_output=True, text=True,
        timeout=120, cwd=ROOT,
    )  # fmt: skip


def test_gpu_check_runs_both_224_benchmarks_on_cuda(tmp_path):
    """With a device (a stand-in interpreter says CUDA is there), the dry run lists the
    commands: the fit/attack check, the step benchmark under bf16, evaluate per image."""
    fake = tmp_path / "python"
    fake.write_text("#!/usr/bin/env bash\nexit 0\n")  # the CUDA probe succeeds
    fake.chmod(0o755)
    done = _bash({"PYTHON": str(fake), "GPU_CHECK_DRY_RUN": "1"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and all(line.startswith("+ timeout ") for line in lines)
    assert "-m benchmarks.gpu_check" in lines[0]
    assert "run bench_step_224 --device cuda --precision bf16 --batch 32" in lines[1]
    assert "run bench_eval_224 --device cuda --presets default fast" in lines[2]


@pytest.mark.slow  # starts Python to ask torch for a device
def test_gpu_check_without_a_gpu_is_skipped_cleanly():
    done = _bash({"PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("gpu_check: no CUDA device, skipped")


@pytest.mark.slow  # a ResNet-18 evaluation at 32 px: seconds
def test_bench_eval_224_quick_measures_and_estimates(tmp_path):
    bench = importlib.import_module("benchmarks.bench_eval_224")
    text = bench.main(["--quick", "--no-write"])
    rows = [line for line in text.splitlines() if line.startswith("| fast") or
            line.startswith("| default")]  # fmt: skip
    assert [r.split(" | ")[:3] for r in rows] == [
        ["| fast", "saliency", "measured"],
        ["| fast", "input_x_gradient", "measured"],
        ["| default", "saliency", "estimated"],
        ["| default", "input_x_gradient", "estimated"],
    ]
    work = {tuple(r.split(" | ")[:2]): float(r.split(" | ")[3]) for r in rows}
    # the default's ensemble (members, restarts, search) plans more work than one attack
    assert work[("| default", "saliency")] > 2 * work[("| fast", "saliency")]


def test_bench_eval_224_refuses_bad_sizes():
    bench = importlib.import_module("benchmarks.bench_eval_224")
    with pytest.raises(SystemExit):
        bench.main(["--size", "16", "--no-write"])


def test_bench_step_224_refuses_an_unknown_variant(capsys):
    bench = importlib.import_module("benchmarks.bench_step_224")
    with pytest.raises(SystemExit):
        bench.main(["--variants", "every map", "--no-write"])
    assert "--variants: 'every map' is not one of" in capsys.readouterr().err
