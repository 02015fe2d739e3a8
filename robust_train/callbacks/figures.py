"""What a monitor reports besides scalars, and its matplotlib rendering to RGB arrays / PNG files.

Figures use `matplotlib.figure.Figure` with the Agg canvas directly (no pyplot), so rendering
never touches a global backend or leaves figures open.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from torch import Tensor

from robust_train.evaluation.parts.base import AttackExamples

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class Curves:
    """Mean curves over a shared x axis (MIF/LIF fidelity curves)."""

    title: str
    xs: list[float]
    xname: str
    lines: dict[str, list[float]]


@dataclass
class Report:
    """Everything one evaluation produced; keys are the logged names."""

    scalars: dict[str, float] = field(default_factory=dict)
    examples: dict[str, AttackExamples] = field(default_factory=dict)
    curves: dict[str, Curves] = field(default_factory=dict)

    def merge(self, other: Report) -> None:
        self.scalars.update(other.scalars)
        self.examples.update(other.examples)
        self.curves.update(other.curves)


def _panel(t: Tensor, scale: int) -> np.ndarray:
    """(C, H, W) image in [0, 1] -> (H*scale, W*scale, 3) uint8, nearest-neighbour upscaled."""
    t = t.detach().float().cpu().clamp(0, 1)
    t = t.expand(3, -1, -1) if t.shape[0] == 1 else t[:3]
    rgb = (t.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
    return rgb.repeat(scale, axis=0).repeat(scale, axis=1)


def _heat(m: Tensor, scale: int) -> np.ndarray:
    """(H, W) importance map -> (H*scale, W*scale, 3) uint8 through the "inferno" colormap,
    each map scaled by its own maximum."""
    from matplotlib import colormaps

    m = m.detach().float().cpu().clamp_min(0)
    m = m / m.max().clamp_min(1e-12)
    rgb = (colormaps["inferno"](m.numpy())[..., :3] * 255).round().astype(np.uint8)
    return rgb.repeat(scale, axis=0).repeat(scale, axis=1)


def render_examples(ex: AttackExamples, *, border: int = 2) -> np.ndarray:
    """The grid of `ex` as an RGB uint8 array: one row per image, columns input, clean map,
    attacked input, attacked map; small images are upscaled to about 64 px (nearest).

    Built with numpy (no matplotlib axes), so it costs milliseconds.

    Examples:
        >>> import torch
        >>> x = torch.rand(2, 1, 8, 8)
        >>> ex = AttackExamples("topk", x, x[:, 0], x, x[:, 0], torch.ones(2))
        >>> render_examples(ex).shape
        (134, 266, 3)
    """
    rows, _, height, width = ex.inputs.shape
    scale = max(1, 64 // max(height, width))
    ph, pw = height * scale, width * scale
    grid = np.full((rows * (ph + border) + border, 4 * (pw + border) + border, 3), 255, np.uint8)
    for i in range(rows):
        panels = (
            _panel(ex.inputs[i], scale),
            _heat(ex.clean_maps[i], scale),
            _panel(ex.adversarial[i], scale),
            _heat(ex.attacked_maps[i], scale),
        )
        top = border + i * (ph + border)
        for j, panel in enumerate(panels):
            left = border + j * (pw + border)
            grid[top : top + ph, left : left + pw] = panel
    return grid


def render_curves(curves: Curves) -> np.ndarray:
    """A line plot of `curves` as an RGB uint8 array (H, W, 3).

    Examples:
        >>> c = Curves("fidelity", [0.0, 1.0], "fraction", {"MIF": [1.0, 0.1], "LIF": [1.0, 0.9]})
        >>> render_curves(c).dtype
        dtype('uint8')
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.0, 3.0), dpi=72)
    canvas = FigureCanvasAgg(fig)
    ax = fig.subplots()
    for name, ys in curves.lines.items():
        ax.plot(curves.xs, ys, marker=".", label=name)
    ax.set_xlabel(curves.xname)
    ax.set_ylabel("score")
    ax.set_title(curves.title, fontsize=9)
    ax.legend(fontsize=8)
    fig.subplots_adjust(left=0.17, right=0.97, bottom=0.16, top=0.9)  # not tight_layout: slower
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


# The panels drawn first, in this order, when a history holds them.
FIRST_PANELS = (
    "robustness/attack/saliency/topk/topk_intersection",
    "robustness/attack/saliency/mass_center/center_shift",
    "robustness/lipschitz/saliency/lipschitz",
    "robustness/fidelity/saliency/fidelity",
    "val/acc",
)
_LIGHTNING = {"val/acc": ("Validation accuracy", "accuracy (higher is better)")}


def history_label(key: str) -> tuple[str, str]:
    """Readable (title, y label) of a logged key; the label and direction come from the key's
    `Measure` (`robust_train.evaluation.measures`), the title from its parts.

    Examples:
        >>> history_label("val/acc")
        ('Validation accuracy', 'accuracy (higher is better)')
        >>> history_label("robustness/attack/saliency/topk/topk_intersection")
        ('topk attack on saliency: top-k intersection', 'top-k intersection (higher is better)')
        >>> history_label("robustness/lipschitz/input_x_gradient/lipschitz")[0]
        'lipschitz of input x gradient: Lipschitz estimate'
    """
    from robust_train.evaluation.measures import MEASURES, key_measure

    if key in _LIGHTNING:
        return _LIGHTNING[key]
    parts = [p.replace("_", " ") for p in key.removeprefix("robustness/").split("/")]
    measure = MEASURES.get(key_measure(key))
    label = measure.label if measure is not None else parts[-1]
    unit = f" ({measure.unit})" if measure is not None and measure.unit else ""
    direction = f" ({measure.direction})" if measure is not None and measure.direction else ""
    if parts[0] == "attack" and len(parts) == 4:
        title = f"{parts[2]} attack on {parts[1]}: {label}"
    elif len(parts) == 3:
        title = f"{parts[0]} of {parts[1]}: {label}"
    else:
        title = label
    return title, f"{label}{unit}{direction}"


def render_history(
    histories: dict[str, dict[str, list[tuple[int, float]]]],
    *,
    columns: int = 3,
    note: str | None = None,
) -> np.ndarray:
    """`history_figure` as an RGB uint8 array.

    Examples:
        >>> h = {"baseline": {"val/acc": [(0, 0.9), (1, 0.95)]},
        ...      "robust": {"val/acc": [(0, 0.88), (1, 0.94)]}}
        >>> render_history(h).shape
        (360, 460, 3)
    """
    fig = history_figure(histories, columns=columns, note=note)
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()  # type: ignore[attr-defined]


def history_figure(
    histories: dict[str, dict[str, list[tuple[int, float]]]],
    *,
    columns: int = 3,
    note: str | None = None,
) -> Figure:
    """Per-epoch values of several runs as an RGB uint8 array: a grid of panels, one per key.

    `histories[run][key]` holds (epoch, value) pairs with 0-based epochs, as logged; the x axis
    shows epochs trained (epoch + 1) with integer ticks. Keys under `robustness/seconds` and
    `robustness/share` are left out. Each run keeps one colour, named in one shared legend.
    `note` (how to read the values) goes into the first empty cell of the grid, else below it.

    Examples:
        >>> h = {"run": {"robustness/attack/saliency/topk/topk_intersection": [(0, 0.6), (1, 0.7)]}}
        >>> history_figure(h).axes[0].get_title()
        'topk attack on saliency: top-k intersection'
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    skip = ("robustness/seconds", "robustness/share")
    keys = [k for k in FIRST_PANELS if any(k in h for h in histories.values())]
    keys += sorted(
        {k for h in histories.values() for k in h if k not in keys and not k.startswith(skip)}
    )
    if not keys:
        raise ValueError("`histories` holds no values to plot")
    ncols = min(columns, len(keys))
    nrows = -(-len(keys) // ncols)
    fig = Figure(figsize=(4.6 * ncols, 3.0 * nrows + 0.6), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, key in zip(axes, keys, strict=False):
        title, ylabel = history_label(key)
        for i, history in enumerate(histories.values()):
            if history.get(key):
                epochs = [e + 1 for e, _ in history[key]]
                ax.plot(epochs, [v for _, v in history[key]], marker="o", ms=3, color=f"C{i}")
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.set_xlabel("epochs trained", fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[len(keys) :]:
        ax.set_axis_off()
    if note and len(axes) > len(keys):
        axes[len(keys)].text(0.02, 0.5, note, fontsize=9, va="center", wrap=True)
    elif note:
        fig.text(0.01, 0.005, note, fontsize=8)
    handles = [
        Line2D([], [], color=f"C{i}", marker="o", label=run) for i, run in enumerate(histories)
    ]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / (3.0 * nrows + 0.6)))
    return fig


def save_png(image: np.ndarray, path: Path) -> None:
    """Write an RGB array as a PNG file (creating the folder)."""
    from matplotlib.image import imsave

    path.parent.mkdir(parents=True, exist_ok=True)
    imsave(path, image)


def first_examples(ex: AttackExamples, n: int) -> AttackExamples:
    """The first `n` rows of an example grid."""
    return AttackExamples(
        title=ex.title,
        inputs=first_rows(ex.inputs, n),
        clean_maps=first_rows(ex.clean_maps, n),
        adversarial=first_rows(ex.adversarial, n),
        attacked_maps=first_rows(ex.attacked_maps, n),
        scores=first_rows(ex.scores, n),
    )


def first_rows(t: Tensor, n: int) -> Tensor:
    """The first n rows of `t`, detached, on the CPU."""
    return t[:n].detach().cpu().clone() if n > 0 else t[:0].detach().cpu()


__all__ = [
    "Curves",
    "Report",
    "render_examples",
    "render_curves",
    "render_history",
    "history_figure",
    "history_label",
    "save_png",
    "first_examples",
    "first_rows",
]
