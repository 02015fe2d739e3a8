"""The leaderboard's report: LEADERBOARD.md (test table over seeds, CV sweeps, full RAR preset,
settings, costs, what is missing) and the trade-off plots (`leaderboard_plots.py`).

Reads only the run's results (results.json, written by `leaderboard_run.Leaderboard`) and the
method table; never imports `leaderboard.py`. A cell that was not measured says so ("not run");
a run with missing jobs is labelled PARTIAL at the top.
"""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path
from typing import Any

from experiments.chance import MNIST, expected_label, random_topk_expectation
from experiments.leaderboard_methods import BATCH, EXPLAINERS, FINETUNE_LR, LR, METHODS, MODEL
from experiments.leaderboard_plots import method_cost, tradeoff_plot

SHORT_HEAD = {
    "saliency": "sal",
    "integrated_gradients": "IG",
    "grad_cam": "Grad-CAM",
    "lrp": "LRP",
    "deeplift": "DeepLIFT",
}


def columns(results: dict[str, Any]) -> list[tuple[str, str, str, int]]:
    """(eval group, measure key, header, digits) of the main table: per explainer its attack,
    noise and share of blank clean maps, and for a layer explainer (Grad-CAM) the fidelity of
    its maps beside them."""
    from robust_train.explain import explainer_spec

    cols = [("saliency", "accuracy", "test acc", 3)]
    for ex in EXPLAINERS:
        h = SHORT_HEAD[ex]
        cols.append((ex, f"attack/{ex}/topk/topk_intersection", f"{h} top-k ∩ attack", 3))
        cols.append((ex, f"attack/{ex}/topk/lens_topk", f"{h} LENS attack", 3))
        cols.append((ex, f"attack/{ex}/random_sign/topk_intersection", f"{h} noise", 3))
        if explainer_spec(ex).layer:
            cols.append((ex, f"fragility/{ex}/fidelity", f"{h} fidelity", 3))
        cols.append((ex, f"fragility/{ex}/blank_map", f"{h} blank", 2))
    cols.append(("saliency", "attack/saliency/topk/kendall", "sal Kendall", 3))
    cols.append(
        ("integrated_gradients", "attack/integrated_gradients/topk/kendall", "IG Kendall", 3)
    )
    for ex in ("saliency", "integrated_gradients"):
        h = SHORT_HEAD[ex]
        cols.append(("fidelity", f"fidelity/{ex}/fidelity", f"fidelity {h}", 3))
        cols.append(
            ("faithfulness", f"faithfulness/{ex}/faithfulness_correlation", f"faithf. corr {h}", 3)
        )
    cols.append(("fidelity", "lipschitz/saliency/lipschitz", "Lipschitz sal", 2))
    return cols + localisation_columns(results)


def localisation_columns(results: dict[str, Any]) -> list[tuple[str, str, str, int]]:
    """Where the evaluations scored the maps against ground-truth masks (data with masks of the
    evidence): each explainer's relevance mass accuracy on its clean and its attacked maps and
    the pointing game of its attacked maps; none otherwise.

    Example:
        >>> run = {"jobs": [{"kind": "eval", "method": "natural", "seed": 0, "group": "saliency",
        ...                  "test": {"localisation/saliency/relevance_mass": 0.2}}]}
        >>> [c[2] for c in localisation_columns(run)]
        ['sal rel. mass clean']
    """
    held = {key for test in _evals(results).values() for key in test}
    cols = []
    for ex in EXPLAINERS:
        h = SHORT_HEAD[ex]
        for key, header in (
            (f"localisation/{ex}/relevance_mass", f"{h} rel. mass clean"),
            (f"attack/{ex}/topk/relevance_mass", f"{h} rel. mass attack"),
            (f"attack/{ex}/topk/pointing_game", f"{h} pointing attack"),
        ):
            if key in held:
                cols.append((ex, key, header, 3))
    return cols


REFERENCE = "input_reference"  # the explanation "map = input", attacked beside the explainers
REFERENCE_METHOD = "natural"  # whose images and label checks the reference row uses
RANDOM_K, PIXELS = 100, MNIST  # the reported k of the RAR preset; MNIST-5k's pixels per image


def reference_key(key: str) -> str | None:
    """The reference's key of an attack column (`attack/<explainer>/...`), else None.

    Example:
        >>> reference_key("attack/lrp/topk/lens_topk"), reference_key("accuracy")
        ('attack/input_reference/topk/lens_topk', None)
    """
    parts = key.split("/")
    return "/".join(["attack", REFERENCE, *parts[2:]]) if parts[0] == "attack" else None


def reference_cells(results: dict[str, Any]) -> list[str]:
    """The reference row: each attack column's attack on "map = input" (measured in the
    saliency group of the natural model, on its images), mean over seeds; '' elsewhere."""
    evals, seeds = _evals(results), results["plan"]["seeds"]
    got = [
        evals[(REFERENCE_METHOD, s, "saliency")]
        for s in seeds
        if (REFERENCE_METHOD, s, "saliency") in evals
    ]
    cells = []
    for _, key, _, digits in columns(results):
        ref = reference_key(key)
        values = [g.get(ref, math.nan) for g in got] if ref is not None else []
        cells.append(cell(values, digits, len(seeds)) if ref is not None else "")
    return cells


def random_cell(key: str) -> str:
    """A uniformly random map's expected score in the column of measure `key`: k/N in a top-k
    intersection column (attack or noise; `experiments.chance`), 0 in a Kendall column (a random
    order against any fixed one: each pair is as likely concordant as discordant), "-" where the
    expectation depends on the model's own clean maps (LENS: the share of the image within one
    pixel of their top-k set; these runs kept no maps) or is no top-k measure.

    Examples:
        >>> random_cell("attack/lrp/random_sign/topk_intersection"), random_cell("accuracy")
        ('0.128', '-')
        >>> random_cell("attack/saliency/topk/kendall"), random_cell("attack/lrp/topk/lens_topk")
        ('0.000', '-')
    """
    parts = key.split("/")
    if parts[0] != "attack" or parts[-1] not in ("topk_intersection", "kendall"):
        return "-"
    if parts[-1] == "kendall":
        return f"{0.0:.3f}"
    return f"{random_topk_expectation(RANDOM_K, PIXELS):.3f}"


def random_label(measured: bool = False) -> str:
    """The first cell of the random-map row: an expectation at k/N, not a measurement; with
    `measured`, the LENS cells measured on the table's models (`measured_random_cell`)."""
    if measured:
        return (
            f"random map (top-k ∩, noise: expectation k/N = {RANDOM_K}/{PIXELS}; LENS: "
            "measured on these models' clean maps)"
        )
    return expected_label(RANDOM_K, PIXELS)


def measured_random_cell(results: dict[str, Any], group: str, key: str) -> str | None:
    """A uniformly random map's LENS level in the column (`group`, `key`), measured: for each
    model of the column, the mean of its per-image level (`results["chance"]`, stored by
    `experiments.leaderboard_chance`) over the column's images (those every model of the
    column measured, `shared`'s), then mean ± sd over the models. None when the column is no
    attacked LENS column or a model of it has no stored level on one of those images.

    Example:
        >>> results = {"names": ["natural"], "chosen": {"natural": None}, "jobs": [
        ...     {"kind": "eval", "method": "natural", "seed": s, "group": "saliency",
        ...      "id": f"eval_saliency_natural_s{s}", "test": {"indices": [3, 4],
        ...      "per_image": {"attack/saliency/topk/lens_topk": [0.5, None]}}}
        ...     for s in (0, 1)], "chance": {"levels": {
        ...     f"eval_saliency_natural_s{s}": {"indices": [3, 4],
        ...      "fragility/saliency/random_lens": [0.2 + s / 10, 0.9]} for s in (0, 1)}}}
        >>> measured_random_cell(results, "saliency", "attack/saliency/topk/lens_topk")
        '0.250 ± 0.071'
    """
    levels = (results.get("chance") or {}).get("levels")
    if not levels or key != f"attack/{group}/topk/lens_topk":
        return None
    names = [n for n in results["names"] if n in results["chosen"]]
    jobs = [r for r in results.get("jobs", []) if r["kind"] == "eval" and "test" in r]
    jobs = [r for r in jobs if r.get("group") == group and r["method"] in names]
    images = None
    for job in jobs:
        pairs = zip(job["test"]["indices"], job["test"]["per_image"][key], strict=True)
        mine = {i for i, v in pairs if v is not None and math.isfinite(v)}
        images = mine if images is None else images & mine
    means = []
    for job in jobs:
        stored = levels.get(job["id"], {})
        values = stored.get(f"fragility/{group}/random_lens", [])
        chance = dict(zip(stored.get("indices", [])[: len(values)], values, strict=True))
        if not images or any(chance.get(i) is None for i in images):
            return None
        means.append(statistics.mean(chance[i] for i in images))
    return cell(means, 3, len(means)) if means else None


def cell(values: list[float], digits: int, n_seeds: int) -> str:
    """Mean ± standard deviation over seeds; says how many seeds when fewer than planned."""
    v = [x for x in values if isinstance(x, (int, float)) and math.isfinite(x)]
    if not values:
        return "not run"
    if not v:
        return "n/a"
    text = f"{statistics.mean(v):.{digits}f}"
    if len(v) > 1:
        text += f" ± {statistics.stdev(v):.{digits}f}"
    return text + (f" ({len(v)} of {n_seeds})" if len(v) < n_seeds else "")


def _evals(results: dict[str, Any]) -> dict[tuple[str, int, str], dict[str, Any]]:
    return {
        (r["method"], r["seed"], r["group"]): r["test"]
        for r in results.get("jobs", [])
        if r["kind"] == "eval" and r.get("group") != "rar" and "test" in r
    }


OWN_IMAGES = ("accuracy", "blank_map")  # columns of each model's own images (see `shared`)


def shared(tests: list[dict[str, Any]], key: str) -> tuple[list[float], int] | None:
    """Each test result's mean of `key` over the test images EVERY one of them measured (in its
    `indices`, its `per_image` value finite), and how many those are: the models of a column
    compared on the same images. None when one of them holds no per-image values (a result
    stored before they were recorded): then each model's own mean is shown.

    Example:
        >>> a = {"indices": [3, 4, 5], "per_image": {"k": [0.5, None, 1.0]}}
        >>> b = {"indices": [4, 5, 6], "per_image": {"k": [0.0, 0.25, 1.0]}}
        >>> shared([a, b], "k")
        ([1.0, 0.25], 1)
    """
    measured = []
    for test in tests:
        values = (test.get("per_image") or {}).get(key)
        if values is None or test.get("indices") is None:
            return None
        pairs = zip(test["indices"], values, strict=True)
        measured.append({i: v for i, v in pairs if v is not None and math.isfinite(v)})
    if not measured:
        return None
    common = set.intersection(*(set(m) for m in measured))
    means = [statistics.mean(m[i] for i in common) if common else math.nan for m in measured]
    return means, len(common)


def column_cells(results: dict[str, Any]) -> dict[tuple[str, str], dict[tuple[str, int], float]]:
    """(group, key) -> (method, seed) -> the value of each column's cell before the mean over
    seeds: the mean over the images every chosen method and seed measured (`shared`), where
    the results hold per-image values, else each one's own mean; with the count of those
    images under (`"images"`, 0) (-1: each model's own images; -2: no result)."""
    evals = _evals(results)
    names = [n for n in results["names"] if n in results["chosen"]]
    out: dict[tuple[str, str], dict[tuple[str, int], float]] = {}
    for group, key, _, _ in columns(results):
        cells = {(m, s): t for (m, s, g), t in evals.items() if g == group and m in names}
        found = None if key.rsplit("/", 1)[-1] in OWN_IMAGES else shared(list(cells.values()), key)
        if found is None:
            column = {ms: t.get(key, math.nan) for ms, t in cells.items()}
            column[("images", 0)] = -1 if cells else -2
        else:
            column = dict(zip(cells, found[0], strict=True))
            column[("images", 0)] = found[1]
        out[(group, key)] = column
    return out


def table_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per method: its chosen setting, every column over the seeds, its cost."""
    seeds = results["plan"]["seeds"]
    fits = {
        (r["method"], r["seed"]): r
        for r in results["jobs"]
        if r["kind"] == "fit" and "failed" not in r
    }
    values = column_cells(results)
    rows = []
    for name in results["names"]:
        if name not in results["chosen"]:
            continue
        value, m = results["chosen"][name], METHODS[name]
        cells = []
        for group, key, _, digits in columns(results):
            column = values[(group, key)]
            vals = [column[(name, s)] for s in seeds if (name, s) in column]
            cells.append(cell(vals, digits, len(seeds)))
        fit_s = [fits[(name, s)]["seconds"] for s in seeds if (name, s) in fits]
        rows.append(
            {
                "method": name,
                "setting": f"{m.swept}={value:g}" if value is not None else "-",
                "cells": cells,
                "fits": len(fit_s),
                "fit_s": statistics.mean(fit_s) if fit_s else math.nan,
                "step_ms": (results.get("step_ms") or {}).get(name, math.nan),
                "cost": method_cost(results, name),
                "finite": all(
                    math.isfinite(fits[(name, s)]["final_loss"]) for s in seeds if (name, s) in fits
                ),
            }
        )
    return rows


def missing(results: dict[str, Any]) -> list[str]:
    """What the plan holds and the run did not finish (the PARTIAL banner lists it)."""
    done = {r["id"] for r in results["jobs"] if "failed" not in r}
    evals = {k for k, v in _evals(results).items()}
    out = [f"selection of {n}" for n in results["names"] if n not in results["chosen"]]
    groups = {g for (_, _, g) in evals} | {
        "saliency",
        "integrated_gradients",
        "grad_cam",
        "lrp",
        "deeplift",
        "fidelity",
        "faithfulness",
    }
    short = {g: SHORT_HEAD.get(g, g) for g in groups}
    for n in results["chosen"]:
        lost = []
        for s in results["plan"]["seeds"]:
            if f"fit_{n}_s{s}" not in done:
                lost.append(f"seed {s} not trained")
                continue
            gone = [short[g] for g in sorted(groups) if (n, s, g) not in evals]
            if gone:
                lost.append(f"seed {s}: {', '.join(gone)}")
        if lost:
            out.append(f"{n} ({'; '.join(lost)})")
    for n, r in rar_rows(results).items():
        if r["n_images"] < results["plan"]["rar_images"]:
            out.append(f"full RAR {n}: {r['n_images']} of {results['plan']['rar_images']} images")
    if results.get("best") is None:
        out.append("full RAR preset (best methods not known)")
    return out + [f"failed: {r['id']}" for r in results.get("failed", [])]


def rar_rows(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The full-preset chunks merged per model: image-weighted means of every measure."""
    chunks: dict[str, list[dict[str, Any]]] = {}
    for r in results["jobs"]:
        if r["kind"] == "eval" and r.get("group") == "rar" and "test" in r:
            chunks.setdefault(r["method"], []).append(r)
    out = {}
    for name, rs in chunks.items():
        n = sum(r["test"]["n_images"] for r in rs)
        keys = {k for r in rs for k in r["test"] if k.startswith("attack/")}
        merged = {
            k: sum(r["test"].get(k, 0.0) * r["test"]["n_images"] for r in rs) / max(n, 1)
            for k in keys
        }
        out[name] = {"n_images": n, "cpu_s": sum(r.get("cpu_s", 0.0) for r in rs), **merged}
        if all("per_image" in r["test"] and "indices" in r["test"] for r in rs):
            out[name]["indices"] = [i for r in rs for i in r["test"]["indices"]]
            out[name]["per_image"] = {
                k: [v for r in rs for v in r["test"]["per_image"].get(k, [])]
                for k in {k for r in rs for k in r["test"]["per_image"]}
            }
    return out


def write_report(
    results: dict[str, Any],
    folder: Path,
    images: Path | None = None,
    prose: dict[str, str] | None = None,
    ensemble: list[str] | None = None,
) -> Path:
    """LEADERBOARD.md in `folder` and the two trade-off plots in `images` (default: `folder`).

    `prose` holds the page's hand-written parts (`experiments.pages.read_prose`): "run" replaces
    the generated command line, "shipped" the shipped checkpoints' section, "notes" what follows
    the hand-written marker. Without it both sections are kept from the page already in `folder`.
    `ensemble`: the section of every row under the attack ensemble
    (`experiments.leaderboard_ensemble_report.page_lines`), placed first; the run's own table
    then follows under the heading of the cheap protocol.
    """
    folder.mkdir(parents=True, exist_ok=True)
    images = images or folder
    images.mkdir(parents=True, exist_ok=True)
    sal = tradeoff_plot(results, "saliency", images / "leaderboard_pareto.png")
    ig = tradeoff_plot(results, "integrated_gradients", images / "leaderboard_pareto_ig.png")
    path = folder / "LEADERBOARD.md"
    if prose is None:
        shipped = kept_section(path, "## Shipped checkpoints")
        kept = kept_notes(path, hand_written_marker(results))
    else:
        shipped = prose["shipped"].splitlines() if "shipped" in prose else []
        kept = prose.get("notes", "")
    banner = _banner_lines(results)
    if prose is not None and "run" in prose:
        banner = [*banner[:-2], prose["run"], ""]
    cheap = []
    if ensemble:
        cheap = [
            "## The cheap protocol: one top-k attack per map",
            "",
            "The leaderboard run's own columns: ONE top-k attack per map (attack k 200, 1 "
            "restart), weaker than the ensemble above; kept for the columns the ensemble does "
            "not measure (noise, fidelity, faithfulness, Lipschitz, cost).",
            "",
        ]
    lines = [
        *banner[:2],
        *(ensemble or []),
        *cheap,
        *banner[2:],
        *_table_lines(results),
        f"![trade-off, saliency]({os.path.relpath(sal, folder)})",
        "",
        f"![trade-off, IG]({os.path.relpath(ig, folder)})",
        "",
        *_unmeasured_lines(results),
        *_rar_lines(results),
        *_sweep_lines(results),
        *_settings_lines(results),
        *_cost_lines(results),
        *shipped,
    ]
    lines += ["", hand_written_marker(results), *([kept] if kept else [])]
    path.write_text("\n".join(lines).rstrip("\n") + "\n")
    return path


def _banner_lines(results: dict[str, Any]) -> list[str]:
    lines = ["# MNIST-5k attributional-robustness leaderboard", ""]
    if results.get("quick"):
        lines += ["**QUICK SMOKE RUN: sizes are tiny, the numbers mean nothing.**", ""]
    lost = missing(results)
    if lost or results.get("skipped"):
        lines += [
            "**PARTIAL: the run stopped (time budget) before these jobs; every number below was "
            "measured, cells marked `not run` or `(n of 3)` were not (all of them):** "
            + "; ".join(lost)
            + ".",
            "",
        ]
    return lines + [
        f"Command: `OMP_NUM_THREADS=1 .venv/bin/python -m experiments.leaderboard --workers 2 "
        f"--budget-min {results.get('budget_min', 60):g} --out {results.get('out')}` "
        f"(wall {results['wall_seconds'] / 60:.1f} min this invocation; jobs reused from an "
        f"earlier invocation of the same run: {results.get('reused', 0)}); 2 worker processes, "
        "1 thread each, on the 2-core CPU machine.",
        "",
    ]


def _reference_and_count_rows(results: dict[str, Any], cols: list[Any]) -> list[str]:
    """The "map = input" reference row, the random map's expectation and the row of each
    column's common-image count."""
    counts = column_cells(results)
    n_images = [counts[(g, k)][("images", 0)] for g, k, _, _ in cols]
    measured = [measured_random_cell(results, g, k) for g, k, _, _ in cols]
    return [
        "| map = input (reference) | - | " + " | ".join(reference_cells(results)) + " | | | | |",
        f"| {random_label(any(m is not None for m in measured))} | - | "
        + " | ".join(
            random_cell(k) if m is None else m
            for (_, k, _, _), m in zip(cols, measured, strict=True)
        )
        + " | | | | |",
        "| images (every model) | | "
        + " | ".join(
            "-" if n == -2 else "all" if k == "accuracy" else "own" if n < 0 else str(n)
            for (_, k, _, _), n in zip(cols, n_images, strict=True)
        )
        + " | | | | |",
    ]


def _random_lens_words(results: dict[str, Any]) -> str:
    """How the random map's LENS cells were found: measured (`results["chance"]`) or not."""
    if results.get("chance"):
        return (
            "(measured on the same models, images and map settings with 16 seeded random maps "
            "an image, `python -m experiments.leaderboard_chance`; mean ± sd over the models). "
        )
    return "(not kept: '-'; the ensemble section above measures it on its own models). "


def _table_lines(results: dict[str, Any]) -> list[str]:
    cols = columns(results)
    n = len(results["plan"]["seeds"])
    head = "| method | setting | " + " | ".join(h for _, _, h, _ in cols)
    lines = [
        head + " | step ms | cost × natural | fit s | finite loss |",
        "|" + "---|" * (len(cols) + 6),
    ]
    for r in table_rows(results):
        lines.append(
            f"| {r['method']} | {r['setting']} | "
            + " | ".join(r["cells"])
            + f" | {r['step_ms']:.0f} | {r['cost']:.2f} | {r['fit_s']:.0f} | "
            + ("yes" if r["finite"] else "NO")
            + " |"
        )
    lines += _reference_and_count_rows(results, cols)
    p = results["plan"]
    return lines + [
        "",
        f"Mean ± standard deviation over {n} seeds (the chosen setting trained on the 4,000 "
        "train+val images with each seed; fine-tunes start from the natural model of the same "
        "seed). Test acc: all 1,000 test images. Attack columns: the first "
        f"{p['test_images']} correctly classified test images of each model, the RAR top-k "
        f"attack (attack k 200, reported k 100, L_inf 0.3, {p['test_steps']} sign steps of "
        f"{0.75 / p['test_steps']:.3g}, 1 restart, every candidate direction, the worst kept per "
        "image: the model itself, its softplus surrogate, the exact map; the gradient family "
        f"takes the surrogate alone) aimed at that column's explainer; IG with {p['ig_steps']} "
        "points, zero baseline; noise: x + 0.3 * uniform random signs clipped to [0, 1], the "
        "worst of 10 label-keeping draws per image. LENS: the top-k intersection that counts an "
        "attacked top pixel within one pixel (3x3) of a clean top pixel as kept (Kamath et al. "
        "2024); the gap to top-k ∩ is the part of the fragility that is shifts of one pixel. "
        "map = input (reference): the same attacks on the explanation that is the input itself "
        "and knows nothing of the model (`input_reference`, natural model's images): a column's "
        "number is read against it. Random map: not a measurement but a uniformly random "
        f"map's expectation, k/N = {RANDOM_K}/{PIXELS} in the top-k ∩ and noise columns "
        "(exact where the clean map has at least k positive pixels, lower where it has fewer) "
        "and 0 in the Kendall columns; its LENS level is the share of the image within one "
        "pixel of each clean map's top-k set, which needs the maps of these models "
        + _random_lens_words(results)
        + "Every mean of a column is over the same "
        "images: those every model of the column (each method, each seed) measured, their "
        "count in the last row (`own`: results stored without per-image values, each model's "
        "own images). Blank: the share of each model's attacked images whose clean map is "
        "constant (an all-zero Grad-CAM map: no attack can measure it, so it is left out of "
        "the attack columns). Grad-CAM at its default layer, the last convolutional block's "
        f"rectified output (`{_grad_cam_layer()}`); Grad-CAM "
        f"fidelity: the fidelity of its clean maps ({p['fidelity_steps']} steps, mean fill), so "
        "its robustness is never read without what its maps explain (a random map scores about "
        "0). Fidelity: AUC_LIF - AUC_MIF (Brocki & Chung; higher is more faithful); faithf. "
        "corr: faithfulness correlation (Bhatt et al. 2020; higher is more faithful); both "
        "mean fill. Lipschitz: local Lipschitz estimate of the max-normalised "
        f"saliency map ({p['lipschitz_samples']} samples). step ms: one training step of batch "
        f"{BATCH}, one thread (`step_profile`, at the paper value; a short probe, read it as "
        "a guide); cost × natural: CPU seconds of the final fits over natural's, means over the "
        "seeds (fine-tunes: 1 + their own fit over natural's), the whole-fit measure of the "
        "sweeps and CHEAPER.md. fit s: wall time of one final fit, two jobs at a time.",
        "",
    ]


def _grad_cam_layer() -> str:
    from robust_train.explain.layers import default_layer
    from robust_train.models import MNISTConvNet

    return default_layer(MNISTConvNet(**MODEL))


def _unmeasured_lines(results: dict[str, Any]) -> list[str]:
    """Per method and explainer: images the top-k attack could not measure (NaN, left out of
    the means: a constant clean map, or a zero direction at every step), mean over seeds."""
    evals, seeds = _evals(results), results["plan"]["seeds"]
    lines = [
        "Images the top-k attack could not measure (left out of the attack means; mean over "
        "seeds, of the attacked images): a zero attack direction at every step or a constant "
        "clean map (`FragilityResult.measured`).",
        "",
        "| method | " + " | ".join(SHORT_HEAD[e] for e in EXPLAINERS) + " |",
        "|---|" + "---|" * len(EXPLAINERS),
    ]
    for name in results["names"]:
        cells = []
        for ex in EXPLAINERS:
            got = [evals[(name, s, ex)] for s in seeds if (name, s, ex) in evals]
            lost = [g.get(f"attack/{ex}/topk/n_unmeasured", math.nan) for g in got]
            n = [g.get("n_images", math.nan) for g in got]
            cells.append(
                f"{statistics.mean(lost):.0f} of {statistics.mean(n):.0f}" if got else "not run"
            )
        if any(c != "not run" for c in cells):
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines + [""]


def _rar_model_rows(
    rows: dict[str, Any], keys: list[tuple[str, str]], same: dict[str, Any]
) -> list[str]:
    """Per model: its row (means over the images every model measured) and the reference row
    of "map = input" on its images."""
    names, lines = list(rows), []

    def value(i: int, key: str) -> float:
        found = same[key]
        return found[0][i] if found is not None else rows[names[i]].get(key, math.nan)

    for i, name in enumerate(names):
        vals = [
            f"{value(i, f'attack/{e}/{a}/topk_intersection'):.3f} / "
            f"{value(i, f'attack/{e}/{a}/kendall'):.3f}"
            for e, a in keys
        ]
        r = rows[name]
        lines.append(f"| {name} | {r['n_images']} | " + " | ".join(vals) + f" | {r['cpu_s']:.0f} |")
        ref = [
            f"{r.get(f'attack/{REFERENCE}/{a}/topk_intersection', math.nan):.3f} / "
            f"{r.get(f'attack/{REFERENCE}/{a}/kendall', math.nan):.3f}"
            for _, a in keys
        ]
        lines.append(
            f"| map = input on {name}'s images (reference) | | " + " | ".join(ref) + " | |"
        )
    return lines


def _rar_lines(results: dict[str, Any]) -> list[str]:
    rows = rar_rows(results)
    lines = [
        "## The full RAR preset: natural and the three best methods (seed 0)",
        "",
        f"Best by CV saliency robustness among eligible chosen settings: {results.get('best')}. "
        "100 sign steps of 0.01 inside L_inf 0.3, 3 restarts (the worst kept), attack k 200, "
        "reported k 100, IG 10 points; correctly classified test images, first seed.",
        "",
    ]
    if not rows:
        return lines + ["Not run (the run stopped before it).", ""]
    keys = [
        ("saliency", "topk"),
        ("saliency", "random_sign"),
        ("integrated_gradients", "topk"),
        ("integrated_gradients", "random_sign"),
    ]
    lines += [
        "| model | images | "
        + " | ".join(f"{SHORT_HEAD[e]} {a} ∩ / Kendall" for e, a in keys)
        + " | CPU s |",
        "|" + "---|" * (len(keys) + 3),
    ]
    same = {
        f"attack/{e}/{a}/{m}": shared(list(rows.values()), f"attack/{e}/{a}/{m}")
        for e, a in keys
        for m in ("topk_intersection", "kendall")
    }
    lines += _rar_model_rows(rows, keys, same)
    lines.append(
        f"| {random_label()} | | "
        + " | ".join(
            f"{random_cell(f'attack/{e}/{a}/topk_intersection')} / "
            f"{random_cell(f'attack/{e}/{a}/kendall')}"
            for e, a in keys
        )
        + " | |"
    )
    counts = [same[f"attack/{e}/{a}/topk_intersection"] for e, a in keys]
    lines.append(
        "| images (every model) | | "
        + " | ".join("own" if c is None else str(c[1]) for c in counts)
        + " | |"
    )
    return lines + [
        "",
        "Each column compares the models on the images every one of them measured (last row; "
        "`own`: results stored without per-image values, each model's own images). Random "
        "map: a uniformly random map's expectation, not a measurement (top-k ∩ k/N, Kendall 0).",
        "",
    ]


def _sweep_lines(results: dict[str, Any]) -> list[str]:
    nat = results.get("natural_cv") or {}
    p = results["plan"]
    lines = [
        "## Selection: the same grid size and rule for every method (CV, no test data)",
        "",
        f"{p['cv_folds']}-fold cross-validation over the 4,000 train+val images (each held out "
        f"once); each fold model trained {p['cv_epochs']} epochs on the other fold's 2,000 "
        f"images (fine-tunes: {p['cv_finetune_epochs']} epoch(s) from that fold's natural model). "
        f"CV robustness: the top-k attack ({p['cv_steps']} steps of {0.75 / p['cv_steps']:.3g}, "
        f"IG {p['cv_ig_steps']} points) on the first {p['cv_attack_images']} correctly "
        "classified held-out images per fold. Rule: the most robust setting on the method's "
        "target explainer whose CV accuracy is at most 1 point below natural's; when none is, "
        "the most accurate. ± is the paired standard error of the accuracy difference over "
        f"the 4,000 images. Natural CV accuracy: {nat.get('accuracy', math.nan):.4f}.",
        "",
        "| method | setting | CV acc | Δ vs natural (points) | eligible | CV sal ∩ | CV IG ∩ | "
        "CV target ∩ | chosen |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, settings in results.get("summaries", {}).items():
        m = METHODS[name]
        for value, s in settings.items():
            ok = s["accuracy"] >= nat.get("accuracy", math.nan) - 0.01 - 1e-9
            chosen = (
                results["chosen"].get(name) is not None and float(value) == results["chosen"][name]
            )
            lines.append(
                f"| {name} | {m.swept}={value} | {s['accuracy']:.4f} | {100 * s['delta']:+.2f} ± "
                f"{100 * s['se']:.2f} | {'yes' if ok else 'no'} | {s['saliency']:.3f} | "
                f"{s['integrated_gradients']:.3f} | {m.target}: {s.get(m.target, math.nan):.3f} | "
                + ("**yes**" if chosen else "")
                + " |"
            )
    return lines + [""]


def _settings_lines(results: dict[str, Any]) -> list[str]:
    p = results["plan"]
    lines = [
        "## Settings here versus the papers",
        "",
        f"Model: MNISTConvNet(channels={MODEL['channels']}, hidden={MODEL['hidden']}) (RAR's "
        f"layout at reduced width); Adam lr {LR}, batch {BATCH}; final fits {p['epochs']} epochs "
        f"on the 4,000 train+val images (RAR: 100k steps of batch 50); fine-tunes "
        f"{p['finetune_epochs']} epoch(s) at lr {FINETUNE_LR} with a per-step cosine decay to 0. "
        "Every grid has the same size, fixed in `leaderboard_methods.METHODS` before the run.",
        "",
        "| method | fixed | grid | paper value | paper |",
        "|---|---|---|---|---|",
    ]
    for name, m in results["methods"].items():
        grid = f"{m['swept']} {m['values']}" if m["values"] else "-"
        lines.append(
            f"| {name} | {m['fixed'] or '-'} | {grid} | {m['paper_value']} | {m['paper']} |"
        )
    return lines + [""]


def _cost_lines(results: dict[str, Any]) -> list[str]:
    """CPU seconds per kind of job (and eval group): what each part of the run cost."""
    parts: dict[str, list[float]] = {}
    for r in results["jobs"]:
        key = r["kind"] if r["kind"] != "eval" else f"eval {r['group']}"
        parts.setdefault(key, []).append(float(r.get("cpu_s", math.nan)))
    lines = [
        "## What each part cost",
        "",
        "| part | jobs | CPU s total | CPU s per job |",
        "|---|---|---|---|",
    ]
    for key, v in parts.items():
        lines.append(f"| {key} | {len(v)} | {sum(v):.0f} | {sum(v) / len(v):.1f} |")
    return lines + [""]


def hand_written_marker(results: dict[str, Any]) -> str:
    """The line after which LEADERBOARD.md holds notes written by hand about this run."""
    return (
        f"<!-- written by hand below this line, about the run {results.get('out', 'RUN_DIR')}; "
        "kept when --report rewrites the table of the same run -->"
    )


def kept_notes(path: Path, marker: str) -> str:
    """What follows `marker` in an existing `path` (nothing for another run, or no file)."""
    if not path.is_file() or marker not in path.read_text():
        return ""
    return path.read_text().split(marker, 1)[1].strip("\n")


SHIPPED_NOTE = (
    "Kept as written by hand: a leaderboard run does not re-ship checkpoints; each row says "
    "where its model and its columns come from."
)


def kept_section(path: Path, heading: str) -> list[str]:
    """The section `heading` of an existing `path`, verbatim (up to the next heading or the
    hand-written marker): the shipped checkpoints' table, which this run does not re-ship."""
    if not path.is_file() or heading not in path.read_text():
        return []
    body = []
    for line in path.read_text().split(heading, 1)[1].splitlines():
        if line.startswith("## ") or line.startswith("<!-- written by hand"):
            break
        if line != SHIPPED_NOTE:
            body.append(line)
    text = "\n".join(body).strip("\n")
    return [heading, "", SHIPPED_NOTE, "", *text.splitlines()]
