"""architectures.py's `--bn-every`: checked before any work, named in the options cell."""

from __future__ import annotations

import importlib

import pytest


@pytest.fixture(scope="module")
def arch():
    return importlib.import_module("experiments.architectures")


def test_a_fit_with_statistics_kept_in_step_is_named_in_its_options_cell(arch):
    job = {"penalty_options": {"model_mode": "eval"}, "settings": {"robust": {}, "bn_every": 5}}
    assert arch.fit_label(job) == "model_mode=eval + " + arch.RECALIBRATED.format(5)
    job["settings"]["recompute_bn"] = True
    assert arch.fit_label(job).endswith(f"every 5 steps + {arch.RECOMPUTED}")


def test_a_negative_step_count_stops_the_run_before_any_work(arch, tmp_path):
    out = tmp_path / "run"
    argv = ["run", "--recipe", "mnist5k_finetune_every_map.yaml", "--out", str(out)]
    with pytest.raises(SystemExit, match="--bn-every must be >= 0, got -2"):
        arch.main([*argv, "--bn-every", "-2"])
    assert not out.exists()
