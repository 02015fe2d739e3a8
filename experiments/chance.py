"""A random map's top-k chance level in expectation, beside the stored tables whose models are gone.

A uniformly random map ranks the N pixels of an image in a uniformly random order, so its top-k
set is a uniformly random k-subset of the pixels. Its overlap with any fixed k-set (the top-k set
of the clean map, whatever the model, the explainer or the attack that produced it) is
hypergeometric: N pixels, k of them marked, k drawn, mean k * k / N. The top-k intersection, the
overlap over k, therefore has expectation exactly k / N (100 of 784 MNIST pixels: 0.1276), the
level the engine measures with seeded random maps (`fragility/<map>/random_topk`).

The studies in `EXPECTED` kept only their tables, not their models, so their random-map rows are
this expectation, computed from each table's own k and image size and labelled as such (not a
measurement). `add_expected_rows` writes the rows into the stored results (again after a study is
rerun; it is idempotent), then `python -m experiments page NAME` writes the pages:

    python -m experiments.chance
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from experiments.pages import RESULTS
from experiments.support import read_text

MNIST = 28 * 28

# "<results file stem>:<table key>" -> (k, pixels per image, the columns holding a top-k
# intersection of a map with its clean map: under attack or under noise; in a table of one row
# per quantity, the columns of the models).
EXPECTED: dict[str, tuple[int, int, tuple[str, ...]]] = {
    "architectures:one-recipe-three-architectures": (100, MNIST, tuple(
        f"{m} ∩ attack" for m in ("sal", "IG", "Grad-CAM", "LRP", "DeepLIFT")
    ) + tuple(f"{m} noise" for m in ("sal", "IG", "Grad-CAM", "LRP", "DeepLIFT"))),
    "cheaper:mean-over-the-two-seeds": (100, MNIST, (
        "saliency top-100 under attack (range over seeds)",)),
    "cheaper:per-run": (100, MNIST, ("saliency top-100 under attack (95% CI)",)),
    "cheaper:saliency-and-ig-together-input-x-2": (100, MNIST, (
        "saliency top-100 under attack (range over seeds)",)),
    "cheaper:the-shipped-recipe-and-every": (100, MNIST, (
        "saliency top-100 under attack (range over seeds)",)),
    "every_map:test-split-three-seeds": (100, MNIST, (
        "natural (shipped)", "every-map, 3 seeds (mean ± sd)", "seed 0 (shipped)")),
    "independent_attacks:result-the-shipped-pair": (100, MNIST, (
        "attack top-100 ∩ [95% CI]", "noise top-100 ∩ [95% CI]")),
    "independent_attacks:attacked-set-b-the-top-100": (100, MNIST, (
        "k = 200", "k = 100 [95% CI]", "worst of both [95% CI]", "noise (k = 100 run)")),
    "lrp:summary": (100, MNIST, ("saliency ∩ (attack on saliency)", "lrp ∩ (attack on lrp)")),
    "lrp:surrogate": (100, MNIST, ("top-100 ∩ (lower: stronger attack)",)),
    "lrp:sweep": (100, MNIST, ("val lrp top-100 ∩ (attack)",)),
    "lrp:sweep-2": (100, MNIST, ("val lrp top-100 ∩ (attack)",)),
    "lrp:table": (100, MNIST, (
        "saliency top-100 ∩ (attack on saliency)", "lrp top-100 ∩ (attack on lrp)")),
    "lrp:table-2": (100, MNIST, (
        "saliency top-100 ∩ (attack on saliency)", "lrp top-100 ∩ (attack on lrp)")),
    "measurements:3-grad-cam-the-default-layer-3": (100, MNIST, ("top-k attack ∩", "noise ∩")),
    "new_explainers:2-fine-tuning-for-them-weight": (100, MNIST, ("val top-100 ∩ (attack)",)),
    "new_explainers:2-fine-tuning-for-them-weight-2": (100, MNIST, ("val top-100 ∩ (attack)",)),
}  # fmt: skip


def random_topk_expectation(k: int, pixels: int) -> float:
    """The expected top-k intersection of a uniformly random map with any fixed map.

    Args:
        k: the size of the top-k sets, 1 <= k <= pixels.
        pixels: the pixels of one map (H * W).

    Returns:
        k / pixels: the mean of a hypergeometric overlap (pixels, k marked, k drawn) over k.

    Raises:
        ValueError: `k` or `pixels` out of range.

    Example:
        >>> round(random_topk_expectation(100, 28 * 28), 4)
        0.1276
    """
    if pixels < 1:
        raise ValueError(f"`pixels` must be at least 1, got {pixels!r}")
    if not 1 <= k <= pixels:
        raise ValueError(f"`k` must be in [1, pixels={pixels}], got {k!r}")
    return k / pixels


def expected_label(k: int, pixels: int) -> str:
    """The first cell of the row: what it is (an expectation, not a measurement) and its k / N."""
    return f"random map (expectation k/N = {k}/{pixels}, any model and attack)"


def with_expected_row(
    table: dict[str, Any], k: int, pixels: int, columns: tuple[str, ...]
) -> dict[str, Any]:
    """`table` with its random-map row: the expectation in `columns`, "-" in the others; a row
    it had already is replaced, so the result is the same however often this runs.

    Raises:
        KeyError: a name of `columns` is not a column of `table`.
    """
    missing = [c for c in columns if c not in table["columns"]]
    if missing:
        raise KeyError(f"`columns` {missing!r} are not in the table's {table['columns']!r}")
    label, value = expected_label(k, pixels), f"{random_topk_expectation(k, pixels):.3f}"
    row = [value if c in columns else "-" for c in table["columns"]]
    row[0] = label
    rows = [r for r in table["rows"] if not str(r[0]).startswith("random map (expectation")]
    return {**table, "rows": [*rows, row]}


def add_expected_rows(results: Path = RESULTS) -> list[str]:
    """Put the random-map row into each table of `EXPECTED` in the results files under
    `results`; return the tables whose stored text changed."""
    changed = []
    for stem in sorted({key.split(":")[0] for key in EXPECTED}):
        path = results / f"{stem}.json"
        data = json.loads(read_text(path))
        before = json.dumps(data, ensure_ascii=False)
        for key, (k, pixels, columns) in EXPECTED.items():
            page, name = key.split(":")
            if page == stem:
                data["tables"][name] = with_expected_row(data["tables"][name], k, pixels, columns)
        if json.dumps(data, ensure_ascii=False) != before:
            path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
            changed.append(stem)
    return changed


def main(argv: list[str] | None = None) -> None:
    """`python -m experiments.chance`: put the expected random-map rows back into the stored
    results (after a study is rerun) and name the results files that changed."""
    parser = argparse.ArgumentParser(
        prog="python -m experiments.chance",
        description="Put the random-map row (the expectation k/N) into each stored table of "
        "EXPECTED; regenerate the pages with `python -m experiments page NAME` afterwards.",
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results folder")
    args = parser.parse_args(argv)
    print("\n".join(add_expected_rows(args.results)) or "nothing changed")


if __name__ == "__main__":
    main()
