"""What a monitor reports besides scalars, and its matplotlib rendering to RGB arrays / PNG files.

Figures use `matplotlib.figure.Figure` with the Agg canvas directly (no pyplot), so rendering
never touches a global backend or leaves figures open.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from torch import Tensor


@dataclass
class AttackExamples:
    """A few attacked images: rows of (input, clean map, attacked input, attacked map)."""

    title: str
    inputs: Tensor
    clean_maps: Tensor
    adversarial: Tensor
    attacked_maps: Tensor
    scores: Tensor  # per row: top-k intersection, listed in the caption

    @property
    def caption(self) -> str:
        """The title, the column order and each row's top-k intersection."""
        scores = ", ".join(f"{float(v):.2f}" for v in self.scores)
        return (
            f"{self.title}; columns: input | clean map | attacked input | attacked map; "
            f"top-k intersection per row: {scores}"
        )


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

    Example:
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

    Example:
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
    fig.subplots_adjust(left=0.17, right=0.97, bottom=0.16, top=0.9)  # tight_layout costs 2x
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def save_png(image: np.ndarray, path: Path) -> None:
    """Write an RGB array as a PNG file (creating the folder)."""
    from matplotlib.image import imsave

    path.parent.mkdir(parents=True, exist_ok=True)
    imsave(path, image)


def first_rows(t: Tensor, n: int) -> Tensor:
    """The first n rows of `t`, detached, on the CPU."""
    return t[:n].detach().cpu().clone() if n > 0 else t[:0].detach().cpu()


__all__ = [
    "AttackExamples",
    "Curves",
    "Report",
    "render_examples",
    "render_curves",
    "save_png",
    "first_rows",
]
