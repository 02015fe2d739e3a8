"""The chance levels beside the Grad-CAM diagnosis of RECIPE_SEARCH.md: the table prints a random
map's and "map = input"'s rows from the stored results, and refuses a model other than the one
the diagnosis described."""

from __future__ import annotations

import json
import statistics

import pytest

from experiments import recipe_gradcam as rg


def test_the_table_prints_both_chance_levels_beside_the_attacked_overlap() -> None:
    data = {"worst_member": ["search", "search"], "topk_intersection": [0.2, 0.4],
            "random_topk": [0.12, 0.14], "input_reference_topk": [0.6, None]}  # fmt: skip
    rows = {r[0].split(":")[0]: r[1:] for r in rg.diagnosis_table(data)["rows"]}
    assert rows["random map"] == [f"{statistics.mean([0.12, 0.14]):.3f}", "0.120", "0.140"]
    assert rows["map = input"] == ["0.600", "0.600", "0.600"]  # an unmeasured image left out
    stored = json.loads(rg.RESULTS.read_text())
    assert len(stored["random_topk"]) == len(stored["input_reference_topk"]) == len(stored["index"])
    assert statistics.mean(stored["random_topk"]) == pytest.approx(100 / 784, abs=0.01)


def test_a_model_other_than_the_described_one_is_refused() -> None:
    """The check `--chance` runs before measuring: the clean maps' quantities of the model it
    is given against the stored ones (two untrained networks on random images here)."""
    import torch

    from robust_train.models import MNISTConvNet

    torch.manual_seed(0)
    x, y = torch.rand(3, 1, 28, 28), torch.tensor([1, 4, 7])
    described, other = MNISTConvNet().eval(), MNISTConvNet().eval()
    data = rg.describe(described, x, x, y)
    assert rg.clean_differences(described, x, y, data) == []
    assert rg.clean_differences(other, x, y, data) != []
