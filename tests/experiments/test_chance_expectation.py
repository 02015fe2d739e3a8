"""A random map's top-k chance level in expectation (experiments/chance.py): k / N, checked against
scipy's hypergeometric mean and a Monte-Carlo estimate with the engine's seeded random maps, and
the rows it puts beside the stored tables whose models are gone."""

from __future__ import annotations

import json
import shutil

import pytest

from experiments import chance


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # scipy's kurtosis at k = N
@pytest.mark.parametrize(("k", "pixels"), [(100, 784), (1, 1), (7, 64), (200, 3072)])
def test_the_expectation_is_the_hypergeometric_mean_over_k(k, pixels) -> None:
    from scipy.stats import hypergeom

    # N pixels, k of them in the fixed map's top-k set, k drawn by the random map.
    want = hypergeom(M=pixels, n=k, N=k).mean() / k
    assert chance.random_topk_expectation(k, pixels) == pytest.approx(want, rel=1e-12)


def test_the_expectation_matches_random_maps_against_any_fixed_maps() -> None:
    import torch

    from robust_train.evaluation.parts.fragility import random_map_level

    # Fixed maps of every kind (smooth, peaked, tied in blocks as an upsampled 7 x 7 Grad-CAM),
    # drawn from a stream other than the engine's seed-0 random maps (which they would equal).
    g = torch.Generator().manual_seed(1)
    smooth = torch.rand(150, 28, 28, generator=g)
    peaked = torch.rand(150, 28, 28, generator=g) ** 8
    blocks = torch.rand(150, 1, 7, 7, generator=g).repeat_interleave(4, 2).repeat_interleave(4, 3)
    want = chance.random_topk_expectation(100, 784)
    assert round(want, 4) == 0.1276
    for maps in (smooth, peaked, blocks[:, 0]):
        level = random_map_level(maps, 100, "random_topk", 0).mean().item()
        # 150 images x the engine's 16 draws; one draw's sd is about 0.031.
        assert level == pytest.approx(want, abs=0.004)
    # A plain Monte-Carlo estimate: random top-k sets against one fixed set.
    draws = torch.rand(5000, 784, generator=g).topk(100, dim=1).indices
    assert (draws < 100).float().sum(1).mean().item() / 100 == pytest.approx(want, abs=0.003)


@pytest.mark.parametrize(
    ("k", "pixels", "match"), [(0, 784, "`k`.*0"), (785, 784, "`k`.*785"), (1, 0, "`pixels`.*0")]
)
def test_out_of_range_arguments_are_named(k, pixels, match) -> None:
    with pytest.raises(ValueError, match=match):
        chance.random_topk_expectation(k, pixels)


def test_the_row_fills_the_named_columns_once_however_often_it_is_added() -> None:
    table = {"columns": ["model", "acc", "sal ∩ attack"], "align": "|---|---|---|",
             "rows": [["natural", "0.97", "0.193"]]}  # fmt: skip
    once = chance.with_expected_row(table, 7, 64, ("sal ∩ attack",))
    assert once["rows"][0] == ["natural", "0.97", "0.193"]
    assert once["rows"][1] == [chance.expected_label(7, 64), "-", "0.109"]  # 7 / 64
    assert "expectation" in once["rows"][1][0] and "random map" in once["rows"][1][0]
    assert chance.with_expected_row(once, 7, 64, ("sal ∩ attack",)) == once
    with pytest.raises(KeyError, match="ig ∩ attack"):
        chance.with_expected_row(table, 7, 64, ("ig ∩ attack",))


def test_the_stored_tables_hold_the_rows_the_code_computes(tmp_path) -> None:
    from experiments.pages import RESULTS

    stems = {key.split(":")[0] for key in chance.EXPECTED}
    for stem in stems:
        shutil.copy(RESULTS / f"{stem}.json", tmp_path / f"{stem}.json")
    assert chance.add_expected_rows(tmp_path) == []  # nothing to change: they are there
    stem, name = next(iter(chance.EXPECTED)).split(":")
    data = json.loads((tmp_path / f"{stem}.json").read_text())
    del data["tables"][name]["rows"][-1]  # a study rerun writes its table without the row
    (tmp_path / f"{stem}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False))
    assert chance.add_expected_rows(tmp_path) == [stem]
    again = json.loads((tmp_path / f"{stem}.json").read_text())["tables"][name]["rows"]
    assert again == json.loads((RESULTS / f"{stem}.json").read_text())["tables"][name]["rows"]


def test_each_listed_table_is_scored_at_the_k_its_columns_name() -> None:
    import re

    from experiments.pages import RESULTS
    from experiments.support import read_text

    for key, (k, pixels, _columns) in chance.EXPECTED.items():
        stem, name = key.split(":")
        table = json.loads(read_text(RESULTS / f"{stem}.json"))["tables"][name]
        named = {int(n) for n in re.findall(r"top-(\d+)", " ".join(table["columns"]))}
        assert named <= {k}, key
        assert pixels == 28 * 28, key  # every listed study is on MNIST-5k
