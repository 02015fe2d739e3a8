"""experiments/architectures.py's diagnosis options: a fit's training curve (`curve_callback`),
BatchNorm statistics recomputed after a fit (`recompute_statistics`, `--recompute-bn`) and named
in the variants table, and `--curve-every` checked before any work."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset


@pytest.fixture(scope="module")
def arch():
    return importlib.import_module("experiments.architectures")


def test_recomputed_statistics_are_the_batches_average_and_leave_weights_and_mode(arch):
    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm2d(2), nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3))
    model[0].running_mean.fill_(5.0)
    model.eval()
    weights = {k: v.clone() for k, v in model.state_dict().items() if "running" not in k}
    weights = {k: v for k, v in weights.items() if "num_batches" not in k}
    images = torch.randn(128, 2, 6, 6) * 3 + 1
    arch.recompute_statistics(model, images)
    assert not model.training
    # reference: the cumulative average of the two batches of 64's means and unbiased variances
    halves = images.split(64)
    mean = torch.stack([h.mean((0, 2, 3)) for h in halves]).mean(0)
    var = torch.stack([h.transpose(0, 1).flatten(1).var(1) for h in halves]).mean(0)
    torch.testing.assert_close(model[0].running_mean, mean)
    torch.testing.assert_close(model[0].running_var, var)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in weights.items())


def test_the_curve_keeps_steps_losses_and_eval_mode_accuracy(arch):
    torch.manual_seed(0)
    x, y = torch.randn(300, 4), torch.randint(0, 3, (300,))
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).train()
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    trainer = SimpleNamespace(
        datamodule=SimpleNamespace(val_set=TensorDataset(x, y)),
        optimizers=[opt],
        global_step=0,
        callback_metrics={"train/ce_step": torch.tensor(1.5), "train/ce_epoch": torch.tensor(9.0)},
    )
    module = SimpleNamespace(model=net)
    curve = arch.curve_callback(2)
    curve.on_train_start(trainer, module)
    for step in (1, 2, 3):
        trainer.global_step = step
        curve.on_train_batch_end(trainer, module, None, None, step - 1)
    curve.on_train_end(trainer, module)
    kept = curve.curve
    assert net.training  # the evaluations put the model back in training mode
    assert kept["step"] == [1, 2, 3] and kept["lr"] == [0.5] * 3 and kept["train/ce"] == [1.5] * 3
    assert kept["val_step"] == [0, 2, 3] and "train/ce_epoch" not in kept
    with torch.no_grad():
        expected = float(net.eval()(x).argmax(1).eq(y).float().mean())
    assert kept["val_acc"] == pytest.approx([expected] * 3)


def test_a_recomputed_fit_is_named_in_its_options_cell(arch):
    job = {"penalty_options": {"model_mode": "eval"}, "settings": {"robust": {}}}
    assert arch.fit_label(job) == "model_mode=eval"
    job["settings"]["recompute_bn"] = True
    assert arch.fit_label(job) == f"model_mode=eval + {arch.RECOMPUTED}"


def test_a_negative_curve_step_stops_the_run_before_any_work(arch, tmp_path):
    out = tmp_path / "run"
    argv = ["run", "--recipe", "mnist5k_finetune_every_map.yaml", "--out", str(out)]
    with pytest.raises(SystemExit, match="--curve-every must be >= 0, got -1"):
        arch.main([*argv, "--curve-every", "-1"])
    assert not out.exists()


def test_the_curve_table_reads_start_epoch_end_and_extremes(arch, tmp_path):
    import json

    steps = list(range(1, 21))
    ce = [1.0] * 20
    ce[6] = 4.0  # a spike at step 7
    curve = {"step": steps, "lr": [0.1] * 20, "val_step": [0, 5, 10, 15, 20],
             "val_acc": [0.9, 0.8, 0.85, 0.7, 0.75], "train/ce": ce,
             "train/penalty/multi_map": [2.0] * 10 + [1.0] * 10}  # fmt: skip
    job = {"kind": "fit", "arch": "resnet18", "model": "robust", "seed": 2, "explainer": None,
           "id": "fit_resnet18_robust_s2", "epoch_cpu_s": [1.0, 1.0], "curve": curve}  # fmt: skip
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "fit_resnet18_robust_s2.json").write_text(json.dumps(job))
    no_curve = {**job, "seed": 0, "id": "fit_resnet18_robust_s0", "curve": None}
    (tmp_path / "jobs" / "fit_resnet18_robust_s0.json").write_text(json.dumps(no_curve))
    (row,) = arch.curve_table([("eval mode", tmp_path)])["rows"]
    assert row == ["resnet18", "eval mode", "2", "0.900", "0.850", "0.750", "0.700 (15)",
                   "0.800", "1.300", "1.000", "4.000 (7)", "2.000", "1.000"]  # fmt: skip
