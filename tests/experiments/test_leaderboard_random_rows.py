"""The random-map row beside the leaderboard's cheap-protocol and full-RAR tables: a uniformly
random map's expectation (top-k ∩ k/N, Kendall 0; LENS measured where stored), checked against
random maps and against the committed page."""

from __future__ import annotations

import itertools
import re

import pytest
import torch

from experiments import leaderboard_report as report
from experiments.chance import random_topk_expectation
from experiments.pages import HERE
from robust_train.explain.similarity import kendall_tau, topk_intersection


def _every_order(pixels: int) -> torch.Tensor:
    """Every ranking of `pixels` pixels as maps (pixels!, 1, pixels) of values 1..pixels: the
    uniformly random map's distribution, exactly."""
    orders = list(itertools.permutations(range(1, pixels + 1)))
    return torch.tensor(orders, dtype=torch.float64).unsqueeze(1)


def test_a_random_maps_kendall_tau_with_any_fixed_map_averages_zero_exactly() -> None:
    """The Kendall cell's 0: over every order of six pixels, against fixed maps with and
    without ties (tau-b)."""
    orders = _every_order(6)
    for fixed in ([0.0, 0.0, 1.0, 2.0, 2.0, 5.0], [3.0, 1.0, 4.0, 1.5, 9.0, 2.6]):
        maps = torch.tensor(fixed, dtype=torch.float64).expand_as(orders).contiguous()
        tau = kendall_tau(maps, orders)
        assert tau.abs().max().item() > 0.5  # single orders do correlate
        assert tau.mean().item() == pytest.approx(0.0, abs=1e-12)


def test_the_topk_cell_is_k_over_n_and_an_upper_bound_for_sparse_clean_maps() -> None:
    """k/N where the clean map has k positive pixels, s/N (lower) where it has s < k: over
    every order of six pixels at k = 3."""
    orders = _every_order(6)
    for fixed, want in (
        ([0.0, 0.5, 1.0, 2.0, 2.5, 5.0], 3 / 6),
        ([0.0, 0.0, 0.0, 0.0, 2.0, 5.0], 2 / 6),
    ):
        maps = torch.tensor(fixed, dtype=torch.float64).expand_as(orders).contiguous()
        assert topk_intersection(maps, orders, 3).mean().item() == pytest.approx(want, abs=1e-12)
    want = random_topk_expectation(report.RANDOM_K, report.PIXELS)
    assert (report.RANDOM_K, report.PIXELS) == (100, 28 * 28)
    assert report.random_cell("attack/lrp/topk/topk_intersection") == f"{want:.3f}"
    assert report.random_cell("attack/lrp/random_sign/topk_intersection") == f"{want:.3f}"
    assert report.random_cell("attack/saliency/topk/kendall") == "0.000"


@pytest.mark.parametrize(
    "key",
    ["attack/lrp/topk/lens_topk", "accuracy", "fragility/grad_cam/fidelity",
     "fragility/saliency/blank_map", "lipschitz/saliency/lipschitz"],
)  # fmt: skip
def test_the_other_columns_get_no_expectation(key: str) -> None:
    assert report.random_cell(key) == "-"


def _table(text: str, header_cell: str) -> tuple[list[str], list[list[str]]]:
    """The columns and rows of the first markdown table of `text` whose header holds a cell."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if f"| {header_cell} |" in line)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return [c.strip() for c in lines[start].strip("|").split("|")], rows


def test_the_committed_page_holds_the_random_row_in_both_tables() -> None:
    text = (HERE / "LEADERBOARD.md").read_text()
    want = f"{random_topk_expectation(100, 784):.3f}"
    cols, rows = _table(text, "sal top-k ∩ attack")
    random = [r for r in rows if r[0] == report.random_label(measured=True)]
    assert len(random) == 1 and len(random[0]) == len(cols)
    cells = dict(zip(cols, random[0], strict=True))
    for head in ("sal", "IG", "Grad-CAM", "LRP", "DeepLIFT"):
        assert cells[f"{head} top-k ∩ attack"] == cells[f"{head} noise"] == want
        # measured on the table's models (experiments.leaderboard_chance): above k/N
        lens = cells[f"{head} LENS attack"]
        assert re.fullmatch(r"0\.\d{3} ± 0\.\d{3}", lens) and float(lens[:5]) > float(want)
    assert cells["sal Kendall"] == cells["IG Kendall"] == "0.000"
    assert cells["test acc"] == "-"
    cols, rows = _table(text, "sal topk ∩ / Kendall")
    random = [r for r in rows if r[0] == report.random_label()]
    assert len(random) == 1
    assert random[0][2:6] == [f"{want} / 0.000"] * 4
    assert {c for c in cols[2:6]} == {f"{m} {a} ∩ / Kendall" for m in ("sal", "IG")
                                       for a in ("topk", "random_sign")}  # fmt: skip
