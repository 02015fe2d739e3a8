"""The per-epoch robustness figure of the demo: readable at a glance."""

from __future__ import annotations

import pytest

from robust_train.callbacks.figures import history_figure, history_label, render_history

KEYS = (
    "robustness/attack/saliency/topk/topk_intersection",
    "robustness/attack/saliency/mass_center/center_shift",
    "robustness/lipschitz/saliency/lipschitz",
    "robustness/fidelity/saliency/fidelity",
    "val/acc",
    "robustness/seconds/total",
)


def _histories(epochs: range = range(1, 20, 2)) -> dict[str, dict[str, list[tuple[int, float]]]]:
    return {
        run: {key: [(e, 0.5 + 0.01 * e + shift) for e in epochs] for key in KEYS}
        for run, shift in (("baseline", 0.0), ("robust", 0.1))
    }


def test_a_grid_of_panels_with_readable_titles_and_directions():
    fig = history_figure(_histories(), note="how to read it")
    panels = [ax for ax in fig.axes if ax.has_data()]
    assert len(panels) == 5  # the cost keys are left out
    rows = {round(ax.get_position().y0, 2) for ax in panels}
    assert len(rows) == 2, "a grid, not a strip"
    for ax in panels:
        title, ylabel = ax.get_title(), ax.get_ylabel()
        assert "/" not in title and "_" not in title.split("(")[0], title  # no raw keys
        assert ("higher" in ylabel) != ("lower" in ylabel), ylabel
        assert ax.get_xlabel() == "epochs trained"
    directions = {ax.get_title(): ax.get_ylabel() for ax in panels}
    assert "lower" in directions["mass center attack on saliency: center shift"]
    assert "lower" in directions["lipschitz of saliency: Lipschitz estimate"]
    assert "higher" in directions["topk attack on saliency: top-k intersection"]
    assert "higher" in directions["fidelity of saliency: fidelity (AUC_LIF - AUC_MIF)"]
    assert any(t.get_text() == "how to read it" for ax in fig.axes for t in ax.texts)


def test_epoch_ticks_are_whole_epochs_counted_from_one():
    fig = history_figure(_histories(range(0, 10, 2)))
    fig.canvas.draw()
    for ax in (ax for ax in fig.axes if ax.has_data()):
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
        xs = ax.lines[0].get_xdata()
        assert list(xs) == [1, 3, 5, 7, 9]  # logged 0-based epochs, shown as epochs trained


def test_one_legend_names_each_run_in_its_colour():
    fig = history_figure(_histories())
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["baseline", "robust"]
    panel = next(ax for ax in fig.axes if ax.has_data())
    handle_colours = [h.get_color() for h in legend.legend_handles]
    assert [line.get_color() for line in panel.lines] == handle_colours


def test_render_size_and_unknown_keys():
    image = render_history(_histories())
    height, width, _ = image.shape
    assert width / height < 2.5, "not a strip"  # the old figure was 2310 x 374
    # the label and direction come from the key's measure; an unknown measure keeps its name
    assert history_label("robustness/attack/saliency/targeted/region_mass") == (
        "targeted attack on saliency: map mass in target region",
        "map mass in target region (lower is better)",
    )
    assert history_label("robustness/custom/saliency/novel_score") == (
        "custom of saliency: novel score",
        "novel score",
    )
    with pytest.raises(ValueError, match="histories"):
        render_history({"a": {"robustness/seconds/total": [(0, 1.0)]}})
