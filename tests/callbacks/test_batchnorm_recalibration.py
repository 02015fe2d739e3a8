"""BatchNormRecalibration and recalibrate_batchnorm against statistics computed by hand."""

from __future__ import annotations

import copy

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from robust_train import RobustClassifier
from robust_train.callbacks import BatchNormRecalibration, recalibrate_batchnorm
from tests.support.helpers import TinyCNN
from tests.support.monitor_helpers import TRAINER, DigitsData


def _batches(n: int = 3, size: int = 6, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 2, 5, 5, generator=g) * 2 + 1, torch.zeros(size)) for _ in range(n)]


def _two_bn_net() -> nn.Sequential:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)
    )
    with torch.no_grad():  # statistics and affine parameters far from a fresh layer's
        for bn in (net[1], net[4]):
            bn.running_mean.fill_(5.0)
            bn.running_var.fill_(9.0)
            bn.weight.uniform_(0.5, 2.0)
            bn.bias.uniform_(-1.0, 1.0)
    return net.train()


def _by_hand(net: nn.Sequential, batches) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each BatchNorm's average batch mean and unbiased variance, layer by layer, written out."""
    means: list[list[torch.Tensor]] = [[], []]
    variances: list[list[torch.Tensor]] = [[], []]
    with torch.no_grad():
        for x, _ in batches:
            a = net[0](x)
            means[0].append(a.mean((0, 2, 3)))
            variances[0].append(a.transpose(0, 1).flatten(1).var(1, unbiased=True))
            mu, var = (
                a.mean((0, 2, 3), keepdim=True),
                a.var((0, 2, 3), unbiased=False, keepdim=True),
            )
            bn = net[1]
            h = (a - mu) / torch.sqrt(var + bn.eps) * bn.weight.view(1, -1, 1, 1)
            h = torch.relu(h + bn.bias.view(1, -1, 1, 1))
            b = net[3](h)
            means[1].append(b.mean((0, 2, 3)))
            variances[1].append(b.transpose(0, 1).flatten(1).var(1, unbiased=True))
    return [
        (torch.stack(m).mean(0), torch.stack(v).mean(0))
        for m, v in zip(means, variances, strict=True)
    ]


def test_statistics_are_the_average_of_the_batch_statistics():
    net, batches = _two_bn_net(), _batches()
    expected = _by_hand(net, batches)
    peer = copy.deepcopy(net)
    torch.optim.swa_utils.update_bn(batches, peer)
    weights = copy.deepcopy(net.state_dict())
    assert recalibrate_batchnorm(net, batches) == 3
    for bn, other, (mean, var) in zip((net[1], net[4]), (peer[1], peer[4]), expected, strict=True):
        torch.testing.assert_close(bn.running_mean, mean, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(bn.running_var, var, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(bn.running_mean, other.running_mean)
        torch.testing.assert_close(bn.running_var, other.running_var)
        assert bn.momentum == 0.1 and int(bn.num_batches_tracked) == 3
    for name in ("0.weight", "1.weight", "1.bias", "3.weight", "4.bias"):
        assert torch.equal(net.state_dict()[name], weights[name])


def test_only_the_batchnorms_run_in_training_mode_and_every_flag_comes_back():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.Dropout(0.5), nn.BatchNorm1d(6))
    net[2].eval()  # a frozen BatchNorm inside a training model keeps its own flag
    batches = [torch.randn(16, 4) for _ in range(2)]
    recalibrate_batchnorm(net, batches)
    expected = torch.stack([net[0](x).mean(0) for x in batches]).mean(0).detach()
    torch.testing.assert_close(net[2].running_mean, expected, rtol=1e-5, atol=1e-6)
    assert [m.training for m in net] == [True, True, False] and net.training
    dropped = copy.deepcopy(net)  # update_bn runs dropout too: different statistics
    torch.optim.swa_utils.update_bn(batches, dropped)
    assert not torch.allclose(dropped[2].running_mean, expected, atol=1e-3)


def test_no_batchnorm_or_no_batch_is_refused_and_changes_nothing():
    with pytest.raises(ValueError, match="no BatchNorm layer"):
        recalibrate_batchnorm(nn.Linear(2, 2), [torch.randn(3, 2)])
    net = _two_bn_net()
    before = copy.deepcopy(net.state_dict())
    with pytest.raises(ValueError, match="`batches` is empty"):
        recalibrate_batchnorm(net, [])
    for name, value in net.state_dict().items():
        assert torch.equal(value, before[name]), name
    with pytest.raises(TypeError, match="got dict"):
        recalibrate_batchnorm(net, [{"x": torch.randn(3, 2, 5, 5)}])
    assert torch.equal(net[1].running_var, before["1.running_var"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_batches": 0}, "`n_batches` must be > 0, got 0"),
        ({"n_batches": 2.5}, "`n_batches`"),
        ({"every_n_steps": 0}, "`every_n_steps` must be > 0, got 0"),
        ({"before_validation": "yes"}, "`before_validation`"),
    ],
)
def test_arguments_are_checked(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        BatchNormRecalibration(**kwargs)


def _fit(callbacks: list[pl.Callback], model: nn.Module) -> RobustClassifier:
    torch.manual_seed(0)
    module = RobustClassifier(model)
    trainer = pl.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, callbacks=callbacks, **TRAINER
    )
    trainer.fit(module, datamodule=DigitsData())
    return module


def test_a_fit_ends_with_the_statistics_of_its_final_weights_and_its_own_random_stream():
    callback = BatchNormRecalibration(n_batches=8, every_n_steps=3)  # 8 x 64: every image
    fitted = _fit([callback], TinyCNN(batchnorm=True, dropout=0.1))
    plain = _fit([], TinyCNN(batchnorm=True, dropout=0.1))
    # steps 3 (every 3rd of 4), 4 (validation); the epoch's end finds nothing new
    assert callback.count == 2 and callback.seconds > 0
    # running statistics do not enter a training-mode loss: same draws, same weights
    for (name, a), b in zip(fitted.named_parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
    data = DigitsData()
    data.setup("fit")
    x = data.train.tensors[0]
    model = fitted.model
    bn = model.net[1]
    with torch.no_grad():
        mean = model.net[0](x).mean((0, 2, 3))  # equal batches: the batch means' mean
    torch.testing.assert_close(bn.running_mean, mean, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(plain.model.net[1].running_mean, mean, atol=1e-3)
    assert callback.state_dict()["last_step"] == 4


def test_a_model_without_batchnorm_is_refused_when_the_fit_starts():
    with pytest.raises(ValueError, match="no BatchNorm layer with running statistics"):
        _fit([BatchNormRecalibration()], TinyCNN())
