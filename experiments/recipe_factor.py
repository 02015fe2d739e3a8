"""Where the input-times-gradient maps lose their top-k: the input factor or the gradient factor?

Input x gradient and integrated gradients (zero baseline) are products `x * G(x)`: the input and a
gradient factor, `G = grad f(x)` for input x gradient and `G = int_0^1 grad f(a x) da` (the same
quadrature as the evaluation's, `ig_steps` points) for integrated gradients. An attack moves both
factors. This study freezes the gradient factor at its clean value and attacks the rest: the
"frozen" map `|x' * G(x)|` changes only through the input. For such a map, separable over
pixels and increasing in each |x'_i|, the point of the L_inf ball (clipped to [0, 1]) that keeps
the fewest of its clean top-k is known in closed form: every clean top-k pixel as low as the ball
allows, every other pixel as high (`extreme_point`); with the model's label kept, the step
towards it is cut by bisection (`label_kept_step`). What that frozen map keeps bounds what a model
whose gradient factor does not move at all could keep under this attack; the real map at the
same point (each explainer of REAL, its evaluation settings) shows what the gradient factor adds;
"map = input" (G = 1) checks the attack against the ensemble, which attacks that map itself.

Images: the first `--images` MNIST-5k test images both shipped models classify correctly (the
images of experiments/ENSEMBLE_MAPS.md), those each model classifies correctly; models: the
shipped pair and any `--checkpoint TAG=PATH`, beside the same maps under the attack ensemble on
the same images where the front of experiments/RECIPE_SEARCH.md measured a model of that tag.

    python -m experiments run recipe_factor --checkpoint \
        corner_w6_s1=runs/front_price/search/corner_w6_s1.ckpt \
        corner_w10_s1=runs/front_price/search/corner_w10_s1.ckpt
    python -m experiments page recipe_search       # its table on RECIPE_SEARCH.md
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

RESULTS = Path(__file__).resolve().parent / "results" / "recipe_factor.json"
ENSEMBLE_RESULTS = RESULTS.parent / "recipe_front.json"
TARGET = 0.75  # the pixel-level maps' target under the ensemble
FROZEN = ("input", "input_x_gradient", "integrated_gradients")
REAL = ("input_x_gradient", "integrated_gradients", "deeplift", "lrp", "saliency")
LABELS = {"input": "map = input", "input_x_gradient": "input x gradient",
          "integrated_gradients": "integrated gradients", "deeplift": "DeepLIFT",
          "lrp": "LRP", "saliency": "saliency"}  # fmt: skip
MODELS = {"natural": "mnist5k_baseline", "shipped_s0": "mnist5k_robust"}  # the front's tags
BACKGROUND = 0.05  # a pixel whose every channel is below this, clean, is background


def gradient_factor(model: nn.Module, x: Tensor, y: Tensor, name: str, steps: int) -> Tensor:
    """The gradient factor G of the map `name` (FROZEN), so that the map is `x * G` (B, C, H, W):
    ones for "input", the gradient of the target logit for "input_x_gradient", its average along
    the path from the black image (the integration rule of `robust_train.explain.
    integrated_gradients`, `steps` points) for "integrated_gradients".

    Raises:
        ValueError: `name` is not one of FROZEN.
    """
    from robust_train.explain import integration_rule

    if name not in FROZEN:
        raise ValueError(f"`name` must be one of {FROZEN}, got {name!r}")
    if name == "input":
        return torch.ones_like(x)

    def grad(points: Tensor) -> Tensor:
        points = points.detach().requires_grad_(True)
        logit = model(points).gather(1, y[:, None]).sum()
        return torch.autograd.grad(logit, points)[0]

    if name == "input_x_gradient":
        return grad(x)
    alphas, weights = integration_rule("riemann_trapezoid", steps)
    return sum(float(w) * grad(float(a) * x) for a, w in zip(alphas, weights, strict=True))


def extreme_point(x: Tensor, factor: Tensor, epsilon: float, k: int) -> Tensor:
    """The point of the L_inf ball of radius `epsilon` around `x`, clipped to [0, 1], where the
    frozen map `sum_c |x' * factor|` keeps the fewest of its clean top-k pixels: each pixel of
    the clean top-k as close to 0 as the ball allows, every other pixel as far from 0.

    For a map that is a sum over its own pixel's channels of terms increasing in |x'|, no other
    point of the ball keeps fewer: any other choice raises a top-k pixel or lowers another one.

    Examples:
        >>> x = torch.tensor([[[[0.9, 0.5], [0.0, 0.2]]]])
        >>> (10 * extreme_point(x, torch.ones_like(x), 0.3, 1)).round().int().tolist()
        [[[[6, 8], [3, 5]]]]
    """
    from robust_train.explain.similarity import topk_mask

    clean = (x * factor).abs().sum(1)
    top = topk_mask(clean, k)[:, None].expand_as(x)
    return torch.where(top, (x - epsilon).clamp(min=0.0), (x + epsilon).clamp(max=1.0))


def entering_from_background(x: Tensor, clean: Tensor, moved: Tensor, k: int) -> list[float]:
    """Per image, the share of the pixels that enter the top-k of a map (in `moved`'s top-k, not
    in `clean`'s) whose clean input is background (every channel below `BACKGROUND`); NaN
    where none enters. The rest are pixels of the object the attack raised past the top-k's own.

    Examples:
        >>> x = torch.tensor([[[[0.0, 0.9], [0.5, 0.0]]]])
        >>> clean = torch.tensor([[[0.1, 0.9], [0.5, 0.0]]])
        >>> moved = torch.tensor([[[0.9, 0.1], [0.5, 0.0]]])  # the background pixel enters
        >>> entering_from_background(x, clean, moved, 2)
        [1.0]
        >>> entering_from_background(x, clean, clean, 2)  # nothing entered
        [nan]
    """
    from robust_train.explain.similarity import topk_mask

    entering = topk_mask(moved, k) & ~topk_mask(clean, k)
    background = x.amax(1) < BACKGROUND
    count = entering.flatten(1).sum(1).float()
    share = (entering & background).flatten(1).sum(1).float() / count.clamp_min(1)
    return torch.where(count > 0, share, torch.full_like(share, float("nan"))).tolist()


def label_kept_step(
    model: nn.Module, x: Tensor, y: Tensor, far: Tensor, iterations: int = 20
) -> tuple[Tensor, Tensor]:
    """The largest step t in [0, 1] along x + t (far - x) at which the model still predicts `y`,
    per image, by bisection (t = 1 where `far` keeps it); returns (t, the point). The model must
    predict `y` at x.

    Raises:
        ValueError: the model does not predict `y` on every clean image.
    """
    with torch.no_grad():
        if not bool((model(x).argmax(1) == y).all()):
            raise ValueError("the model must predict `y` on every clean image")
        low, high = torch.zeros(len(x)), torch.ones(len(x))
        kept = model(far).argmax(1) == y
        for _ in range(iterations):
            mid = (low + high) / 2
            ok = model(x + mid[:, None, None, None] * (far - x)).argmax(1) == y
            low, high = torch.where(ok, mid, low), torch.where(ok, high, mid)
        step = torch.where(kept, torch.ones_like(low), low)
    return step, x + step[:, None, None, None] * (far - x)


def measure(
    model: nn.Module, x: Tensor, y: Tensor, *, epsilon: float, k: int, steps: int,
    real: tuple[str, ...] = REAL,
) -> dict[str, Any]:  # fmt: skip
    """For each map of FROZEN: the frozen map's top-k kept at its label-kept extreme point (per
    image), the step t taken, and each real map of `real` (`robust_train.explain`, with the
    evaluation's integrated-gradients settings) at that same point; on the images the model
    classifies correctly (their positions in `x` under "images")."""
    from robust_train.evaluation.parts.fragility import random_map_level
    from robust_train.explain import get_explainer, importance_map
    from robust_train.explain.similarity import topk_intersection

    with torch.no_grad():
        correct = model(x).argmax(1) == y
    x, y = x[correct], y[correct]

    def real_map(name: str, points: Tensor) -> Tensor:
        kwargs = {"n_steps": steps, "baseline": 0.0} if name == "integrated_gradients" else {}
        explanation = get_explainer(name, **kwargs)(model, points, y)
        return importance_map(explanation.detach())

    clean_real = {other: real_map(other, x) for other in {*real, *FROZEN} - {"input"}}
    out: dict[str, Any] = {"images": correct.nonzero().squeeze(1).tolist()}
    for name in FROZEN:
        factor = gradient_factor(model, x, y, name, steps)
        step, point = label_kept_step(model, x, y, extreme_point(x, factor, epsilon, k))
        clean, frozen = (x * factor).abs().sum(1), (point * factor).abs().sum(1)
        at_point = {other: real_map(other, point) for other in {*real, name} - {"input"}}
        own = frozen if name == "input" else at_point[name]  # the map itself at the point
        own_clean = clean if name == "input" else clean_real[name]
        row: dict[str, Any] = {
            "frozen": topk_intersection(clean, frozen, k).tolist(),
            "background": entering_from_background(x, own_clean, own, k),
            "step": step.tolist(),
            "random": random_map_level(clean, k, "random_topk", seed=0).tolist(),
        }
        for other in real:
            row[other] = topk_intersection(clean_real[other], at_point[other], k).tolist()
        out[name] = row
    return out


def ensemble_levels(path: Path = ENSEMBLE_RESULTS) -> dict[tuple[str, str], dict[int, float]]:
    """(model tag, map) -> {test image index: the map's top-k under the attack ensemble} from the
    front's results (experiments/RECIPE_SEARCH.md, "The front over every map"; "input" is "map =
    input" under the same ensemble, the model's label kept); empty where the file is missing."""
    if not path.is_file():
        return {}
    out = {}
    for tag, model in json.loads(path.read_text())["models"].items():
        for name, level in model["maps"].items():
            pairs = zip(level["index"], level["values"], strict=True)
            out[(tag, name)] = {i: v for i, v in pairs if v == v}  # NaN: not measured
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _step_cell(steps: list[float]) -> str:
    """The mean step and the count of full steps; an image the attack could not move at all (the
    label lost at any step) measured nothing there, and is counted apart.

    Examples:
        >>> _step_cell([1.0, 0.5]), _step_cell([1.0, 0.0])
        ('0.75 (1)', '0.50 (1; 1 not moved: its value measures nothing)')
    """
    cell = f"{_mean(steps):.2f} ({sum(s == 1.0 for s in steps)}"
    unmoved = sum(s == 0.0 for s in steps)
    return cell + (f"; {unmoved} not moved: its value measures nothing)" if unmoved else ")")


def _share_cell(shares: list[float] | None) -> str:
    """The mean share over the images where some pixel entered ("-": not measured).

    Examples:
        >>> _share_cell([0.25, float("nan"), 0.75]), _share_cell(None)
        ('0.50', '-')
    """
    finite = [v for v in shares or [] if v == v]
    return f"{_mean(finite):.2f}" if finite else "-"


def table(data: dict[str, Any]) -> dict[str, Any]:
    """The page's table: per model and map, the frozen map at its extreme point (label kept), the
    real map at the same point, the real map under the attack ensemble (the same images)."""
    levels = ensemble_levels()
    index = data["settings"]["images"]
    rows = []
    for tag, maps in data["models"].items():
        images = [index[i] for i in maps["images"]]
        for name in FROZEN:
            row = maps[name]
            ensemble = levels.get((tag, name), {})
            kept = [ensemble[i] for i in images if i in ensemble]
            frozen = row["frozen"]
            rows.append([
                tag, f"{len(images)}", LABELS[name], f"{_mean(frozen):.3f}",
                f"{sum(v >= TARGET for v in frozen)}/{len(frozen)}",
                "-" if name == "input" else f"{_mean(row[name]):.3f}",
                f"{_mean(kept):.3f}" if len(kept) == len(images) else "-",
                _step_cell(row["step"]),
                _share_cell(row.get("background")),
                f"{_mean(row['random']):.3f}",
                ", ".join(f"{LABELS[o]} {_mean(row[o]):.3f}" for o in REAL if o in row),
            ])  # fmt: skip
    columns = ["model", "images", "map", "gradient factor frozen: top-k kept",
               f"frozen: images at >= {TARGET}", "the map itself at the same point",
               "the map under the attack ensemble", "step taken, label kept (full steps)",
               f"pixels entering its top-k there: from the background (x < {BACKGROUND})",
               "random map (chance)",
               "every map at the same point"]  # fmt: skip
    return {"columns": columns, "align": "|---" * len(columns) + "|", "rows": rows}


def run(images: int, checkpoints: dict[str, str], epsilon: float, k: int,
        steps: int) -> dict[str, Any]:  # fmt: skip
    """Measure every model on the images of ENSEMBLE_MAPS.md; return the results."""
    from experiments.ensemble_maps import images as shared_images
    from robust_train.models import load_classifier

    x, y, index = shared_images(images)
    data: dict[str, Any] = {
        "about": "python -m experiments run recipe_factor: input-times-gradient maps with their "
        "gradient factor frozen, at the extreme point of the ball for the frozen map (label "
        "kept), against the real maps there and under the attack ensemble",
        "settings": {"epsilon": epsilon, "k": k, "ig_steps": steps, "images": index},
        "checkpoints": {**MODELS, **checkpoints},
        "models": {},
    }
    start = time.process_time()
    for tag, file in data["checkpoints"].items():
        model = load_classifier(file).eval()
        data["models"][tag] = measure(model, x, y, epsilon=epsilon, k=k, steps=steps)
    data["cpu_seconds"] = time.process_time() - start
    data["tables"] = {"factor": table(data)}
    return data


def main(argv: list[str] | None = None) -> int:
    from robust_train.evaluation import PROTOCOLS

    ensemble = PROTOCOLS["ensemble"]
    parser = argparse.ArgumentParser(prog="python -m experiments run recipe_factor")
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--checkpoint", nargs="*", default=[], metavar="TAG=PATH")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.images < 1:
        parser.error(f"`--images` must be >= 1, got {args.images}")
    files = dict(c.split("=", 1) for c in args.checkpoint if "=" in c)
    if len(files) != len(args.checkpoint):
        parser.error(f"`--checkpoint` takes TAG=PATH, got {args.checkpoint}")
    torch.set_num_threads(1)
    data = run(args.images, files, ensemble.attack.epsilon, ensemble.attack.k, ensemble.ig_steps)
    args.results.write_text(json.dumps(data, indent=1) + "\n")
    if args.results == RESULTS:
        from experiments.recipe_gradcam_probe import store_tables

        store_tables(data["tables"])
    print(f"wrote {args.results} ({len(data['models'])} models, {data['cpu_seconds']:.0f} CPU s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
