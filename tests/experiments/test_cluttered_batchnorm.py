"""Stale BatchNorm statistics on the cluttered benchmark (experiments.cluttered_batchnorm): a
model whose running statistics were never updated loses its accuracy in eval mode and gets it
back when they are recomputed, the variance gap says how far they were off (0 when they were
already the training set's), each fine-tune is paired with its natural model's accuracy, and
results become one table row each."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from experiments.cluttered import batchnorm_table
from experiments.cluttered_batchnorm import BATCH, main, natural_accuracy, recalibrated


def shifted_task(n: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """Two classes told apart by the sign of a feature that sits far from 0 (5 +- 3, noise 0.3):
    a network normalised with the initial statistics (mean 0, variance 1) misreads it."""
    torch.manual_seed(0)
    y = torch.randint(0, 2, (n,))
    x = 5 + 0.3 * torch.randn(n, 1) + (2 * y[:, None] - 1) * 3.0
    return x, y


def fitted_net() -> nn.Module:
    """Linear(1,1) -> BatchNorm1d(1) -> a fixed readout: class 1 when the normalised feature is
    above 0, its running statistics left at their initial values."""
    net = nn.Sequential(nn.Linear(1, 1), nn.BatchNorm1d(1), nn.Linear(1, 2))
    with torch.no_grad():
        net[0].weight.fill_(1.0)
        net[0].bias.zero_()
        net[2].weight.copy_(torch.tensor([[-1.0], [1.0]]))
        net[2].bias.zero_()
    return net


def test_recomputed_statistics_give_back_the_accuracy_and_the_gap_measures_the_staleness():
    x, y = shifted_task()
    net = fitted_net()
    out = recalibrated(net, x, x, y)
    assert out["accuracy"] == pytest.approx(float((y == 1).float().mean()))  # every image class 1
    assert out["accuracy_recomputed_bn"] == 1.0
    # the reference: the stored variance was 1, the recomputed one the average of the batches'
    # unbiased variances
    batch_var = torch.stack([b.var(0, unbiased=True) for b in x.split(BATCH)]).mean()
    assert out["bn_log_var_gap"] == pytest.approx(float(batch_var.log().abs()), rel=1e-4)
    again = recalibrated(net, x, x, y)  # statistics already the training set's: no gap
    assert again["bn_log_var_gap"] == pytest.approx(0.0, abs=1e-6)
    assert again["accuracy"] == again["accuracy_recomputed_bn"] == 1.0


def test_natural_accuracy_and_the_table(tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for label, acc in (("vgg_bn/max_natural_s1", 0.949), ("vgg_bn/max_natural_s0", 0.954)):
        (jobs / f"{label.replace('/', '_')}.json").write_text(
            json.dumps({"label": label, "accuracy": acc})
        )
    assert natural_accuracy("vgg_bn/max_mix_evalmode_e4_s1", jobs) == (
        "vgg_bn/max_natural_s1",
        0.949,
    )
    assert natural_accuracy("cnn/em_w3_r8_e16", jobs) == (None, None)
    folder = tmp_path / "batchnorm"
    folder.mkdir()
    row = {"label": "vgg_bn/max_mix_evalmode_e4_s1", "natural": "vgg_bn/max_natural_s1",
           "natural_accuracy": 0.949, "accuracy": 0.919, "accuracy_recomputed_bn": 0.9234,
           "bn_log_var_gap": 0.0211}  # fmt: skip
    (folder / "vgg_bn_max_mix_evalmode_e4_s1.json").write_text(json.dumps(row))
    table = batchnorm_table(folder)
    assert table["rows"] == [
        ["vgg_bn/max_mix_evalmode_e4_s1", "vgg_bn/max_natural_s1", "0.949", "0.919", "0.923",
         "0.021"]
    ]  # fmt: skip
    assert len(table["columns"]) == len(table["rows"][0])


@pytest.mark.parametrize(
    ("argv", "message"),
    [([], "`--model` is required"), (["--model", "a/b=c.ckpt", "--images", "0"], "`--images`")],
)
def test_bad_arguments_exit_2_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
