"""`robust-train demo --data cluttered_mnist5k`: the pair on cluttered RGB digits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import robust_train.app.demo as demo


def parsed(*argv: str):
    return demo._parser().parse_known_args(list(argv))


def test_cluttered_data_takes_its_configs_and_the_rgb_budget():
    args, extra = parsed("--data", "cluttered_mnist5k")
    natural, robust = demo._configs(args)
    assert Path(natural).name == "cluttered_mnist5k_baseline.yaml" and Path(natural).is_file()
    assert Path(robust).name == "cluttered_mnist5k_finetune_every_map.yaml"
    settings = demo._settings(args)
    assert settings.epsilon == pytest.approx(8 / 255)
    # twice the budget over the protocol's steps, as the digits' 20 steps of 0.03 for 0.3
    assert settings.step_size * settings.n_steps == pytest.approx(2 * 8 / 255)
    assert settings.explainers == demo.demo_settings().explainers
    assert not demo._as_measured(args, extra, settings)  # MNIST-5k's ranges: a reference
    default, _ = parsed()
    assert demo._configs(default) == (str(demo.NATURAL_CONFIG), str(demo.ROBUST_CONFIG))
    assert demo._settings(default) == demo.demo_settings()
    given, _ = parsed("--data", "cluttered_mnist5k", "--natural", str(demo.NATURAL_CONFIG))
    assert demo._configs(given)[0] == str(demo.NATURAL_CONFIG)


def test_unknown_data_is_refused_naming_the_choices(capsys):
    with pytest.raises(SystemExit) as stop:
        parsed("--data", "cifar")
    assert stop.value.code == 2
    assert "argument --data: invalid choice: 'cifar'" in capsys.readouterr().err


@pytest.mark.heavy  # two fits and an evaluation at 64 px RGB
def test_quick_cluttered_demo_runs_the_pair_and_scores_localisation(tmp_path, cli):
    """In-process, one epoch of each fit (the pair, not its training, is under test)."""
    out = tmp_path / "run"
    argv = ["--data", "cluttered_mnist5k", "--quick", "--out", str(out), "--n-samples", "4"]
    argv += ["--epochs", "1", "--trainer.enable_progress_bar=false"]
    done = cli("demo", *argv, cwd=tmp_path, env={"WANDB_MODE": "disabled"})
    assert done.returncode == 0, done.stderr[-3000:]
    report = (out / "report.md").read_text()
    assert "cluttered MNIST-5k" in report and "reference, not a check" in report
    results = json.loads((out / "results.json").read_text())
    for name in ("natural", "robust"):
        assert results[name]["settings"]["epsilon"] == pytest.approx(8 / 255)
        measures = results[name]["measures"]
        # the masks reached the evaluation: clean and attacked maps are scored against them
        assert "localisation/saliency/relevance_mass" in measures
        assert "attack/grad_cam/topk/pointing_game" in measures
