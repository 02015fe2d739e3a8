"""Why the every-map penalty does not move Grad-CAM under the attack ensemble: a diagnosis.

On the shipped robust MNIST-5k model and the first --images test images of
experiments/ENSEMBLE_MAPS.md, the full `ensemble` protocol's attack on Grad-CAM (every member, the
random search) is run once, and for each image the clean and the worst attacked Grad-CAM are
described at the layer they are computed on (the default layer: the last block's pooled rectified
output, 7 x 7 on a 28 x 28 input) before their ReLU and after it:

- the member that gave the worst value (a gradient member or the random search);
- the positive mass sum(ReLU(cam)) of the attacked map over the clean one's, and the share of
  positive cells, before the upsampling: how much of the map the attack switches off;
- whether the attacked map is blank (all zero) or nearly constant after the ReLU;
- how many of the 49 cells the top-100 pixels of the upsampled map lie in, and how many of the
  clean top cells the attacked top cells keep;
- the floor of the clean and attacked maps: the smallest cell over the largest (a map that is
  positive everywhere on a high floor ranks its pixels by small differences);
- the share of the clean map's mass in its top cells (the cells the top-100 pixels mostly lie
  in) and the gap between the last top cell and the next, over the largest cell;
- the largest change of a cell between the clean and attacked maps scaled to the same mass,
  over the largest clean cell (set beside the gap: a change larger than the gap swaps cells);
- the L1 distance of the sum-normalised upsampled maps (what the every-map penalty measures) at
  the attack's point, and the same of the maps raised to the power 4 (`map_powers`);
- the signed (pre-ReLU) map's top-100 intersection between clean and attacked: whether the
  attack moves the signed map or only which part of it the ReLU keeps.

    python -m experiments run recipe_gradcam --images 20 --out runs/recipe_gradcam.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

RESULTS = Path(__file__).resolve().parent / "results" / "recipe_gradcam.json"


def signed_cam(
    model: Any, x: torch.Tensor, y: torch.Tensor, layer: str | None = None
) -> torch.Tensor:
    """The signed Grad-CAM sum_k w_k A_k (B, h, w) at `layer` (None: the default layer), before
    ReLU and upsampling."""
    from robust_train.explain.autograd import target_scores
    from robust_train.explain.grad_cam import one_activation
    from robust_train.explain.layers import capture_output, find_layer

    name, module = find_layer(model, layer, caller="recipe_gradcam")
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        with capture_output(module, name, caller="recipe_gradcam") as seen:
            logits = model(x)
        act = one_activation(seen.outputs, name, module, x.shape[0])
        (g,) = torch.autograd.grad(target_scores(logits, y).sum(), act)
    return (g.mean(dim=(2, 3), keepdim=True) * act).sum(1).detach()


def describe(model: Any, clean_x: torch.Tensor, adv_x: torch.Tensor, y: torch.Tensor,
             k: int = 100, layer: str | None = None) -> dict[str, list[float]]:  # fmt: skip
    """Per image: positive mass ratio, positive cell shares, blank / near-constant flags, the
    cells under the top-k pixels, the kept top cells and the signed map's top-k intersection,
    of Grad-CAM at `layer` (None: the default layer)."""
    from robust_train.explain.similarity import topk_intersection

    a, b = signed_cam(model, clean_x, y, layer), signed_cam(model, adv_x, y, layer)
    size = clean_x.shape[-2:]

    def up(c: torch.Tensor) -> torch.Tensor:
        return F.interpolate(c[:, None], size=size, mode="bilinear", align_corners=False)[:, 0]

    pa, pb = a.clamp(min=0), b.clamp(min=0)
    cells = a[0].numel()
    n_top = max(1, round(k * cells / size.numel()))
    out: dict[str, list[float]] = {key: [] for key in (
        "mass_ratio", "positive_clean", "positive_attacked", "blank", "near_constant",
        "cells_under_topk", "top_cells_kept", "signed_topk", "relu_topk", "floor_clean",
        "floor_attacked", "top_cells_share", "top_gap", "cell_change", "l1",
        "l1_power4")}  # fmt: skip
    relu_topk = topk_intersection(up(pa), up(pb), k)
    signed = topk_intersection(up(a), up(b), k)
    for i in range(len(y)):
        flat_b = up(pb)[i].flatten()
        top = up(pa)[i].flatten().topk(k).indices
        rows, cols = top // size[1] * a.shape[1] // size[0], top % size[1] * a.shape[2] // size[1]
        ca, cb = set(pa[i].flatten().topk(n_top).indices.tolist()), set(
            pb[i].flatten().topk(n_top).indices.tolist())  # fmt: skip
        out["mass_ratio"].append(float(pb[i].sum() / pa[i].sum().clamp_min(1e-12)))
        out["positive_clean"].append(float((a[i] > 0).float().mean()))
        out["positive_attacked"].append(float((b[i] > 0).float().mean()))
        out["blank"].append(float(not bool(flat_b.any())))
        spread = float(flat_b.std() / flat_b.mean().clamp_min(1e-12)) if flat_b.any() else 0.0
        out["near_constant"].append(float(spread < 0.1))
        cells_hit = set(zip(rows.tolist(), cols.tolist(), strict=True))
        out["cells_under_topk"].append(float(len(cells_hit)))
        out["top_cells_kept"].append(len(ca & cb) / n_top)
        out["signed_topk"].append(float(signed[i]))
        out["relu_topk"].append(float(relu_topk[i]))
        out["floor_clean"].append(float(a[i].min() / a[i].max().clamp_min(1e-12)))
        out["floor_attacked"].append(float(b[i].min() / b[i].max().clamp_min(1e-12)))
        ranked = pa[i].flatten().sort(descending=True).values
        out["top_cells_share"].append(float(ranked[:n_top].sum() / ranked.sum()))
        out["top_gap"].append(float((ranked[n_top - 1] - ranked[n_top]) / ranked[0]))
        na, nb = pa[i] / pa[i].sum().clamp_min(1e-12), pb[i] / pb[i].sum().clamp_min(1e-12)
        out["cell_change"].append(float((na - nb).abs().max() / na.max().clamp_min(1e-12)))
        for key, power in (("l1", 1), ("l1_power4", 4)):
            ua, ub = up(pa)[i] ** power, up(pb)[i] ** power
            out[key].append(float((ua / ua.sum() - ub / ub.sum()).abs().sum()))
    return out


def run(n: int) -> dict[str, Any]:
    """The ensemble on Grad-CAM of the shipped robust model, and each image described."""
    from experiments.ensemble_maps import images
    from robust_train.attacks.ensemble import ensemble_attack
    from robust_train.evaluation import PROTOCOLS
    from robust_train.explain.layers import find_layer
    from robust_train.models import load_classifier

    model = load_classifier("mnist5k_robust")
    x, y, index = images(n)
    s = PROTOCOLS["ensemble"]
    start = time.process_time()
    ens = ensemble_attack(model, x, y, explainer="grad_cam", seed=s.seed,
                          betas=s.ensemble_betas, search_queries=s.search_queries,
                          options=s.attack)  # fmt: skip
    names = [m.name for m in ens.members]
    row = describe(model, x, ens.result.adversarial, y)
    layer, _ = find_layer(model, None, caller="recipe_gradcam")
    return {
        "index": index,
        "layer": layer,
        "cam_shape": list(signed_cam(model, x[:1], y[:1]).shape[1:]),
        "worst_member": [names[int(i)] for i in ens.worst],
        "topk_intersection": ens.result.topk_intersection.tolist(),
        "linf": (ens.result.adversarial - x).abs().flatten(1).max(1).values.tolist(),
        "vertex_share": ((ens.result.adversarial - x).abs() > 0.29)
        .flatten(1)
        .float()
        .mean(1)
        .tolist(),
        **row,
        "cpu_s": time.process_time() - start,
    }


CLEAN = ("floor_clean", "cells_under_topk", "top_cells_share", "top_gap", "positive_clean")
INPUT_KEY = "attack/input_reference/topk/topk_intersection"


def clean_differences(model: Any, x: torch.Tensor, y: torch.Tensor, data: dict[str, Any]) -> list:
    """The quantities of `CLEAN` (of the clean maps alone) that `model` on images `x`, labels
    `y` gives otherwise than the stored diagnosis `data` (beyond 1e-4 on some image)."""
    clean = describe(model, x, x, y)
    return [k for k in CLEAN if any(abs(a - b) > 1e-4 for a, b in zip(
        clean[k], data[k], strict=True))]  # fmt: skip


def chance(data: dict[str, Any], checkpoint: str) -> dict[str, list[Any]]:
    """The chance levels of a stored diagnosis on its images: each clean Grad-CAM map's top-100
    overlap with seeded random maps (`random_topk`) and "map = input" under the same ensemble
    with the model's label kept (`input_reference_topk`), both through the evaluation engine as
    the `ensemble` protocol measures them beside its attack. `checkpoint` must be the model the
    diagnosis described: its clean maps' quantities (`CLEAN`) are recomputed and compared.

    Raises:
        SystemExit: `checkpoint` is not the model of `data` (its clean maps differ).
    """
    import math
    import warnings

    from experiments.leaderboard import test_split
    from experiments.leaderboard_ensemble import REFERENCE, random_map_levels, settings
    from robust_train.evaluation.engine import run_parts, summarize
    from robust_train.models import load_classifier

    model = load_classifier(checkpoint)
    x, y = test_split()
    idx = torch.tensor(data["index"])
    differ = clean_differences(model, x[idx], y[idx], data)
    if differ:
        raise SystemExit(f"--chance {checkpoint!r}: not the model described ({differ} differ)")
    levels = random_map_levels(checkpoint, "grad_cam", data["index"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = summarize(run_parts(model, x[idx], y[idx], settings(REFERENCE, len(idx), False)))
    return {
        "random_topk": levels["fragility/grad_cam/random_topk"],
        "input_reference_topk": [
            v if math.isfinite(v) else None for v in ref["per_image"][INPUT_KEY]
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments run recipe_gradcam")
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--chance",
        metavar="CHECKPOINT",
        default=None,
        help="only add the chance levels to the stored results --out, measured on CHECKPOINT "
        "(the model they describe; checked)",
    )
    args = parser.parse_args(argv)
    if args.images < 1:
        parser.error(f"`--images` must be >= 1, got {args.images}")
    torch.set_num_threads(1)
    if args.chance is not None:
        if not args.out.is_file():
            parser.error(f"`--chance`: no stored results at `--out` {str(args.out)!r}")
        data = json.loads(args.out.read_text())
        data.update(chance(data, args.chance))
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print(f"chance levels added to {args.out}; {store_table(data)}")
        return 0
    data = run(args.images)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


QUANTITIES = {
    "topk_intersection": "top-100 intersection, clean against the worst attacked map",
    "mass_ratio": "positive mass of the attacked map over the clean map's (before upsampling)",
    "positive_clean": "share of the 49 cells above zero before the ReLU, clean",
    "positive_attacked": "share of the 49 cells above zero before the ReLU, attacked",
    "blank": "attacked map blank (all zero) after the ReLU",
    "near_constant": "attacked map nearly constant (std under 0.1 of its mean)",
    "floor_clean": "smallest cell over the largest, clean",
    "floor_attacked": "smallest cell over the largest, attacked",
    "cells_under_topk": "cells (of 49) the clean top-100 pixels lie in",
    "top_cells_share": "share of the clean map's mass in its 6 top cells",
    "top_gap": "gap between the 6th and 7th cells over the largest, clean",
    "cell_change": "largest change of a cell (maps of equal mass) over the largest clean cell",
    "top_cells_kept": "share of the clean 6 top cells among the attacked 6 top cells",
    "signed_topk": "top-100 intersection of the signed maps (before the ReLU)",
    "l1": "L1 of the sum-normalised maps at the attack's point (the penalty's distance)",
    "l1_power4": "the same of the maps raised to the power 4",
    "random_topk": "random map: top-100 intersection with the clean map (no attack)",
    "input_reference_topk": "map = input: top-100 intersection under the same ensemble",
}


def store_table(data: dict[str, Any], page: str = "RECIPE_SEARCH.md") -> Path:
    """`diagnosis_table(data)` as the page's "gradcam" table (the page's other tables, which
    `recipe_search collect` writes from its runs, left as they are); the page rewritten."""
    from experiments.pages import RESULTS as PAGE_RESULTS
    from experiments.pages import tables_page

    path = PAGE_RESULTS / f"{Path(page).stem.lower()}.json"
    stored = json.loads(path.read_text())
    stored["tables"]["gradcam"] = diagnosis_table(data)
    path.write_text(json.dumps(stored, indent=1) + "\n")
    return tables_page(page)


def diagnosis_table(data: dict[str, Any]) -> dict[str, Any]:
    """The diagnosis as a table: each quantity's mean, min and max over the images, and the
    member that gave each image's worst value.

    Examples:
        >>> d = {"worst_member": ["search", "k100"], "blank": [0.0, 1.0]}
        >>> [r[1:] for r in diagnosis_table(d)["rows"]]
        [['0.500', '0.000', '1.000'], ['search 1, k100 1', '', '']]
    """
    from collections import Counter

    rows = []
    for key, words in QUANTITIES.items():
        if key in data:
            v = [x for x in data[key] if x is not None]
            rows.append([words, f"{sum(v) / len(v):.3f}", f"{min(v):.3f}", f"{max(v):.3f}"])
    members = ", ".join(f"{m} {n}" for m, n in Counter(data["worst_member"]).most_common())
    rows.append(["member that gave the worst value (images)", members, "", ""])
    return {
        "columns": ["quantity (per image)", "mean", "min", "max"],
        "align": "|---" * 4 + "|",
        "rows": rows,
    }
