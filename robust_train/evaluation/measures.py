"""Every measure the project reports, declared once: its name, label, direction and unit.

One key scheme names every number the evaluation engine produces, in `results.json`, `summary.md`,
the monitors' logged scalars (under `robustness/`), W&B (`eval/` for a checkpoint's evaluation)
and the leaderboard:

- `accuracy` (of the evaluated images), `split_accuracy` (of the whole held-out split),
  `n_attacked`;
- `attack/<explainer>/<objective>/<measure>`: a fragility attack (Ghorbani et al. 2019) on an
  explainer's maps, e.g. `attack/saliency/topk/topk_intersection`;
- `<part>/<explainer>/<measure>` for the other parts, e.g. `lipschitz/saliency/lipschitz`,
  `fidelity/integrated_gradients/fidelity`.

The measure is always the last segment of a key, and `measure_of(key)` gives its `Measure`:
`higher_is_better` (like torchmetrics' attribute of that name; None: neither, e.g. a count),
`unit`, how it is reduced over images (`mean` or `sum`) and a sentence on how to read it. Every
report, table, plot label and selection rule reads the direction here. A new measure is one
`register_measure(Measure(...))` call, in the file of the part that produces it.
"""

from __future__ import annotations

from dataclasses import dataclass

from robust_train.core.registry import Registry

__all__ = [
    "MEASURES",
    "Measure",
    "attack_key",
    "key_measure",
    "measure_of",
    "part_key",
    "register_measure",
]


@dataclass(frozen=True)
class Measure:
    """What one reported number is.

    Attributes:
        name: the last segment of every key that reports it.
        label: short readable name for tables and plot titles.
        higher_is_better: True, False, or None (neither: a count, a rate of the attack itself).
        unit: "" (a fraction, a correlation, a score) or e.g. "px".
        reduce: "mean" or "sum" over images.
        meaning: one sentence on how to read it (summary.md, reports).
        fmt: format of one value in tables.
    """

    name: str
    label: str
    higher_is_better: bool | None
    unit: str = ""
    reduce: str = "mean"
    meaning: str = ""
    fmt: str = "{:.3f}"

    @property
    def direction(self) -> str:
        """'higher is better', 'lower is better' or '' (neither)."""
        if self.higher_is_better is None:
            return ""
        return "higher is better" if self.higher_is_better else "lower is better"

    def format(self, value: float | None) -> str:
        """`value` in this measure's format; '-' for None or NaN.

        Examples:
            >>> MEASURES["center_shift"].format(1.23456), MEASURES["n_attacked"].format(None)
            ('1.235', '-')
        """
        if value is None or value != value:
            return "-"
        return self.fmt.format(int(value) if self.fmt == "{:d}" else value)


MEASURES: Registry[Measure] = Registry("MEASURES", "measure")


def register_measure(measure: Measure) -> Measure:
    """Add `measure` to `MEASURES` (a re-registration of the same definition is a no-op).

    Examples:
        >>> m = register_measure(Measure("doc_score", "doc score", True))
        >>> measure_of("part/saliency/doc_score") is m
        True
        >>> _ = MEASURES.pop("doc_score")
    """
    if measure.reduce not in ("mean", "sum"):
        raise ValueError(f"`reduce` must be 'mean' or 'sum', got {measure.reduce!r}")
    return MEASURES.add(measure.name, measure)  # the same definition again (its repr) is no clash


def key_measure(key: str) -> str:
    """The measure name of a key: its last segment.

    Examples:
        >>> key_measure("attack/saliency/topk/spearman")
        'spearman'
    """
    return key.rsplit("/", 1)[-1]


def measure_of(key: str) -> Measure:
    """The `Measure` a key reports; a KeyError lists the registered measures.

    Examples:
        >>> measure_of("lipschitz/saliency/lipschitz").higher_is_better
        False
    """
    name = key_measure(key)
    if name not in MEASURES:
        raise KeyError(f"no measure {name!r} (from key {key!r}); registered: {sorted(MEASURES)}")
    return MEASURES[name]


def attack_key(explainer: str, objective: str, measure: str) -> str:
    """`attack/<explainer>/<objective>/<measure>`.

    Examples:
        >>> attack_key("saliency", "topk", "topk_intersection")
        'attack/saliency/topk/topk_intersection'
    """
    return f"attack/{explainer}/{objective}/{measure}"


def part_key(part: str, explainer: str, measure: str) -> str:
    """`<part>/<explainer>/<measure>`.

    Examples:
        >>> part_key("fidelity", "saliency", "fidelity")
        'fidelity/saliency/fidelity'
    """
    return f"{part}/{explainer}/{measure}"


for _measure in (
    Measure(
        "accuracy",
        "accuracy",
        True,
        meaning="share of the evaluated images classified correctly",
    ),
    Measure(
        "split_accuracy",
        "accuracy on the whole split",
        True,
        meaning="share of all images of the held-out split classified correctly",
    ),
    Measure("n_images", "images evaluated", None, reduce="sum", fmt="{:d}"),
    Measure(
        "n_attacked",
        "images attacked",
        None,
        reduce="sum",
        fmt="{:d}",
        meaning="the images the attacks ran on (the correctly classified ones, as in RAR/ART)",
    ),
    Measure(
        "topk_intersection",
        "top-k intersection",
        True,
        meaning="share of the clean map's top-k pixels still in the attacked map's top-k "
        "(1 = unchanged): higher is more robust",
    ),
    Measure(
        "lens_topk",
        "LENS top-k (3x3)",
        True,
        meaning="share of the attacked map's top-k pixels within one pixel (a 3x3 window) of a "
        "clean top-k pixel (Kamath et al. 2024): top-k intersection that forgives shifts of one "
        "pixel, so the gap between the two is the fragility that is small shifts",
    ),
    Measure(
        "spearman",
        "Spearman",
        True,
        meaning="rank correlation of the clean and attacked maps: higher is more robust",
    ),
    Measure(
        "kendall",
        "Kendall",
        True,
        meaning="Kendall's tau of the clean and attacked maps: higher is more robust",
    ),
    Measure(
        "center_shift",
        "center shift",
        False,
        unit="px",
        meaning="how far the map's center of mass moved: lower is more robust",
    ),
    Measure(
        "region_mass",
        "map mass in target region",
        False,
        meaning="share of the attacked map that a targeted attack pushed into its region: "
        "lower is more robust",
    ),
    Measure(
        "n_unmeasured",
        "images not measured",
        None,
        reduce="sum",
        fmt="{:d}",
        meaning="images the attack could not move (zero direction, constant map, diverged "
        "model): left out of the means, never counted as robust",
    ),
    Measure(
        "lipschitz",
        "Lipschitz estimate",
        False,
        meaning="largest change of the explanation per unit of input change found near each "
        "image (Alvarez-Melis & Jaakkola 2018): lower is more robust",
    ),
    Measure(
        "fidelity",
        "fidelity (AUC_LIF - AUC_MIF)",
        True,
        meaning="removing the pixels the map ranks first hurts the prediction more than "
        "removing the last ones (Brocki & Chung 2022); a random map scores about 0",
    ),
    Measure(
        "mif_auc",
        "AUC MIF",
        False,
        meaning="area under the most-important-first removal curve: lower is more faithful",
    ),
    Measure(
        "lif_auc",
        "AUC LIF",
        True,
        meaning="area under the least-important-first removal curve: higher is more faithful",
    ),
):
    register_measure(_measure)
