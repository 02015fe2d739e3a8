"""Bad arguments are refused where they enter, naming the argument; subset selection, sharding."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from robust_train import RobustClassifier
from robust_train.callbacks import (
    FidelityMonitor,
    FragilityMonitor,
    LipschitzMonitor,
    RobustnessMonitor,
)
from robust_train.callbacks._subset import from_dataloader, select, shard
from tests.support.helpers import digits_tensors
from tests.support.monitor_helpers import CHEAP_FRAGILITY, CHEAP_LIPSCHITZ, TRAINER

BAD = [
    (LipschitzMonitor, dict(every_n_epochs=-1), ValueError, "every_n_epochs"),
    (LipschitzMonitor, dict(every_n_epochs=1.5), TypeError, "every_n_epochs"),
    (FidelityMonitor, dict(n_samples=0), ValueError, "n_samples"),
    (FragilityMonitor, dict(n_samples=-3), ValueError, "n_samples"),
    (FragilityMonitor, dict(attacks=["topk", "nope"]), ValueError, "attacks"),
    (FragilityMonitor, dict(attacks=[]), ValueError, "attacks"),
    (FragilityMonitor, dict(attacks=["topk", "topk"]), ValueError, "attacks"),
    (FragilityMonitor, dict(explainers="nope"), ValueError, "explainers"),
    (
        FragilityMonitor,
        dict(explainers="meaningful_perturbation", attacks=["topk"]),
        ValueError,
        "explainers",
    ),
    (FragilityMonitor, dict(epsilon=5.0), ValueError, "epsilon"),  # covers the whole pixel range
    (FragilityMonitor, dict(epsilon=0.0), ValueError, "epsilon"),
    (FragilityMonitor, dict(n_steps=0), ValueError, "n_steps"),
    (FragilityMonitor, dict(k=0), ValueError, "k"),
    (LipschitzMonitor, dict(explainers=["saliency", "nope"]), ValueError, "explainers"),
    (LipschitzMonitor, dict(explainers=[42]), TypeError, "explainers"),
    (LipschitzMonitor, dict(lipschitz_radius=-0.1), ValueError, "lipschitz_radius"),
    (LipschitzMonitor, dict(lipschitz_radius=1.0), ValueError, "lipschitz_radius"),
    (LipschitzMonitor, dict(lipschitz_samples=0), ValueError, "lipschitz_samples"),
    (LipschitzMonitor, dict(lipschitz_search="grid"), ValueError, "lipschitz_search"),
    (FidelityMonitor, dict(explainers="nope"), ValueError, "explainers"),
    (FidelityMonitor, dict(fidelity_steps=0), ValueError, "fidelity_steps"),
    (FidelityMonitor, dict(fidelity_perturbation="black"), ValueError, "fidelity_perturbation"),
    (FidelityMonitor, dict(fidelity_steps=3, perturbation="mean"), TypeError, "perturbation"),
    (RobustnessMonitor, dict(parts=["fragility", "speed"]), ValueError, "parts"),
    (RobustnessMonitor, dict(attacks=["nope"]), ValueError, "attacks"),
    (RobustnessMonitor, dict(explainers=["nope"]), ValueError, "explainers"),
    (LipschitzMonitor, dict(split="train"), ValueError, "split"),
    (LipschitzMonitor, dict(stage="test"), ValueError, "stage"),
    (LipschitzMonitor, dict(seed=-1), ValueError, "seed"),
    (LipschitzMonitor, dict(n_images=-1), ValueError, "n_images"),
    (LipschitzMonitor, dict(internal_batch_size=0), ValueError, "internal_batch_size"),
    (LipschitzMonitor, dict(inputs=torch.rand(4, 1, 8, 8)), ValueError, "targets"),
    (
        LipschitzMonitor,
        dict(inputs=torch.rand(4, 1, 8, 8) * 3, targets=torch.zeros(4, dtype=torch.long)),
        ValueError,
        "inputs",
    ),
    (
        LipschitzMonitor,
        dict(inputs=torch.rand(4, 1, 8, 8), targets=torch.zeros(3, dtype=torch.long)),
        ValueError,
        "targets",
    ),
]


@pytest.mark.parametrize(
    "cls, kwargs, error, name",
    BAD,
    ids=[f"{c.__name__}-{next(iter(k))}-{i}" for i, (c, k, _, _) in enumerate(BAD)],
)
def test_bad_arguments_name_the_argument(cls, kwargs, error, name):
    with pytest.raises(error, match=rf"`{name}`|'{name}'"):
        cls(**kwargs)


class _CountingModule(RobustClassifier):
    steps = 0

    def training_step(self, batch, batch_idx):
        type(self).steps += 1
        return super().training_step(batch, batch_idx)


def test_k_larger_than_the_image_is_refused_when_the_fit_starts(trained_digits, data):
    """it used to raise after a whole epoch; now before the first step."""
    import copy

    module = _CountingModule(copy.deepcopy(trained_digits[0]).train())
    monitor = FragilityMonitor(k=65, **CHEAP_FRAGILITY)
    trainer = pl.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, callbacks=[monitor], **TRAINER
    )
    with pytest.raises(ValueError, match=r"FragilityMonitor on 8x8 images: `k` must be .*64\]"):
        trainer.fit(module, datamodule=data)
    assert _CountingModule.steps == 0


def test_select_is_seeded_sorted_and_a_subset():
    x, y = torch.rand(50, 1, 2, 2), torch.arange(50)
    a = select(x, y, 10, seed=1)
    b = select(x, y, 10, seed=1)
    c = select(x, y, 10, seed=2)
    assert torch.equal(a[1], b[1]) and not torch.equal(a[1], c[1])
    assert a[1].tolist() == sorted(a[1].tolist()) and len(set(a[1].tolist())) == 10
    assert torch.equal(a[0], x[a[1]])
    assert select(x, y, 80, seed=0)[1].tolist() == list(range(50))  # fewer images than asked: all


@pytest.mark.parametrize("world_size", [1, 2, 3, 7])
def test_shards_partition_the_subset(world_size):
    x, y = torch.rand(10, 1, 2, 2), torch.arange(10)
    parts = [shard(x, y, rank, world_size)[1].tolist() for rank in range(world_size)]
    assert sorted(sum(parts, [])) == list(range(10))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


class Stream(IterableDataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __iter__(self):
        return zip(self.x, self.y, strict=True)


def test_subset_from_map_style_and_iterable_loaders():
    x, y = digits_tensors()
    x, y = x[:100], y[:100]
    mx, my = from_dataloader(
        DataLoader(TensorDataset(x, y), batch_size=16), 12, 3, "val dataloader"
    )
    rows = select(x, y, 12, 3)
    assert torch.equal(mx, rows[0]) and torch.equal(my, rows[1])  # same rows as select()
    ix, iy = from_dataloader(DataLoader(Stream(x, y), batch_size=5), 12, 3, "val dataloader")
    assert torch.equal(ix, x[:12]) and torch.equal(iy, y[:12])  # iterable: the first ones
    with pytest.raises(ValueError, match="held-out images of the val dataloader"):
        from_dataloader(
            DataLoader(TensorDataset(x * 16, y), batch_size=16), 12, 3, "val dataloader"
        )


def test_constructor_tensors_and_test_split_are_used(module, data):
    x, y = digits_tensors()
    given = LipschitzMonitor(inputs=x[:40], targets=y[:40], log_images=False, **CHEAP_LIPSCHITZ)
    from_test = LipschitzMonitor(
        split="test", explainers=["input_x_gradient"], log_images=False, **CHEAP_LIPSCHITZ
    )
    trainer = pl.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        callbacks=[given, from_test],
        **TRAINER,
    )
    trainer.fit(module, datamodule=data)
    gx, _ = given.held_out(trainer)
    assert gx.shape[0] == CHEAP_LIPSCHITZ["n_samples"]
    assert torch.equal(gx, select(x[:40], y[:40], CHEAP_LIPSCHITZ["n_samples"], 0)[0])
    tx, ty = from_test.held_out(trainer)
    test_x = torch.stack([v[0] for v in data.test])
    assert all((test_x == img).flatten(1).all(1).any() for img in tx)
    assert from_test.held_out(trainer)[0] is tx  # taken once, then kept


@pytest.mark.parametrize(
    "size, epsilon, k", [((8, 8), 0.1, 8), ((28, 28), 0.1, 98), ((32, 32), 8 / 255, 128)]
)
def test_size_defaults_come_from_the_evaluation_settings(size, epsilon, k):
    fragility, lipschitz = FragilityMonitor(), LipschitzMonitor()
    fragility.resolve(*size)
    lipschitz.resolve(*size)
    resolved = fragility.parts[0].settings
    assert resolved.epsilon == pytest.approx(epsilon) and resolved.k == k
    assert lipschitz.parts[0].settings.lipschitz_radius == pytest.approx(epsilon)
    explicit = RobustnessMonitor(epsilon=0.05, k=3)
    explicit.resolve(*size)
    assert all(p.settings.epsilon == 0.05 and p.settings.k == 3 for p in explicit.parts)
    assert explicit.parts[1].settings.lipschitz_radius == 0.05  # the radius follows epsilon


def test_two_monitors_that_would_log_one_key_are_refused_when_the_fit_starts(module, data):
    """RobustnessMonitor and FragilityMonitor used to average each other."""
    both = [RobustnessMonitor(**CHEAP_FRAGILITY), FragilityMonitor(**CHEAP_FRAGILITY)]
    trainer = pl.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, callbacks=both, **TRAINER
    )
    with pytest.raises(ValueError, match="RobustnessMonitor and FragilityMonitor would both log"):
        trainer.fit(module, datamodule=data)
