"""One held-out subset selector (robust_train.data.base.heldout_rows) with its two modes: the
monitors' seeded random subset and the commands' seeded class-stratified one."""

from __future__ import annotations

import pytest
import torch

from robust_train.callbacks._subset import select
from robust_train.data.base import heldout_rows, stratified_order


def test_random_rows_are_a_seeded_permutation_prefix_in_data_order():
    rows = heldout_rows(4, 7, mode="random", size=20)
    expected = torch.randperm(20, generator=torch.Generator().manual_seed(7))[:4]
    assert rows.tolist() == sorted(expected.tolist())
    assert torch.equal(rows, heldout_rows(4, 7, mode="random", size=20))
    assert not torch.equal(rows, heldout_rows(4, 8, mode="random", size=20))
    assert heldout_rows(50, 0, mode="random", size=5).tolist() == [0, 1, 2, 3, 4]


def test_the_monitors_subset_is_the_random_mode():
    x, y = torch.rand(12, 1, 2, 2), torch.arange(12)
    rows = heldout_rows(5, 3, mode="random", size=12)
    assert torch.equal(select(x, y, 5, seed=3)[1], y[rows])


def test_stratified_rows_are_the_stratified_order_prefix():
    labels = torch.tensor([0] * 8 + [1] * 4 + [2] * 4)
    rows = heldout_rows(8, 2, mode="stratified", targets=labels)
    assert torch.equal(rows, stratified_order(labels, 2)[:8])
    assert torch.bincount(labels[rows], minlength=3).tolist() == [4, 2, 2]


def test_bad_requests_are_refused():
    with pytest.raises(ValueError, match="`mode` 'first'"):
        heldout_rows(3, 0, mode="first", size=5)
    with pytest.raises(ValueError, match="`targets`"):
        heldout_rows(3, 0, mode="stratified", size=5)
    with pytest.raises(ValueError, match="`size` or `targets`"):
        heldout_rows(3, 0, mode="random")
