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
    stored = json.loads(rg.RESULTS.read_text())
    with pytest.raises(SystemExit, match="not the model described"):
        rg.chance(stored, "mnist5k_robust")  # the model shipped now, not the one described
