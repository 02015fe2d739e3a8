"""The cluttered diagnosis: BatchNorm statistics recomputed on images equal the average over the
chunks of 64 of each chunk's mean and unbiased variance, the original model is left as it was,
and its results become one table row each, huge values (a broken model's fidelity) written in
short form."""

from __future__ import annotations

import json

import torch
from torch import nn

from experiments.cluttered import diagnosis_table
from experiments.cluttered_diagnosis import recomputed_statistics


def test_recomputed_statistics_are_the_images_statistics():
    torch.manual_seed(0)
    net = nn.Sequential(nn.BatchNorm2d(3)).eval()
    images = torch.rand(150, 3, 4, 4) * 2 + 1  # three chunks of at most 64
    fresh = recomputed_statistics(net, images)
    chunks = images.split(64)
    mean = torch.stack([c.mean(dim=(0, 2, 3)) for c in chunks]).mean(0)
    var = torch.stack([c.var(dim=(0, 2, 3)) for c in chunks]).mean(0)
    torch.testing.assert_close(fresh[0].running_mean, mean)
    torch.testing.assert_close(fresh[0].running_var, var)
    assert not fresh.training and torch.equal(net[0].running_mean, torch.zeros(3))


def test_diagnosis_rows(tmp_path):
    result = {"label": "resnet18/x", "accuracy": 0.5, "fidelity/grad_cam@layer2": -1.8e10}
    (tmp_path / "x.json").write_text(json.dumps(result))
    table = diagnosis_table(tmp_path)
    row = table["rows"][0]
    assert row[0] == "resnet18/x" and row[1] == "0.500" and "-1.8e+10" in row
    assert len(row) == len(table["columns"]) and row.count("-") == len(row) - 3
