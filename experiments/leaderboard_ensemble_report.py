"""The leaderboard page's section under the attack ensemble, from the jobs of
`experiments.leaderboard_ensemble` (a run folder's jobs/ or their exported file).

Every column compares the rows on the same images: those where every job of that map (every
row and seed measured) has a value (a blank clean map has none, for every row). Each row's cell
is the mean ± standard deviation over its seeds of the per-seed mean on those images; beside
them the chance levels on the same images (a random map, "map = input" under the same ensemble)
and the share of images where a row's map keeps more than "map = input" does for the same model.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from experiments.support import read_text

# The plan (`experiments.leaderboard_ensemble` runs it) and the keys its jobs record.
ROWS = ("natural", "finetune_every_map", "finetune_multi_map", "adversarial", "gaussian_noise")
SEEDS = (0, 1, 2)
MAPS = ("saliency", "grad_cam", "lrp", "deeplift", "integrated_gradients")
TOPK = "attack/{m}/topk/topk_intersection"
LENS = "attack/{m}/topk/lens_topk"
RANDOM = "fragility/{m}/random_topk"
RANDOM_LENS = "fragility/{m}/random_lens"
REFERENCE = "attack/input_reference/topk/topk_intersection"
REFERENCE_LENS = "attack/input_reference/topk/lens_topk"

LABELS = {"saliency": "saliency", "grad_cam": "Grad-CAM", "lrp": "LRP", "deeplift": "DeepLIFT",
          "integrated_gradients": "IG"}  # fmt: skip
SETTING = {"finetune_every_map": "weight", "finetune_multi_map": "weight", "adversarial": "epsilon",
           "gaussian_noise": "sigma"}  # fmt: skip


def load_jobs(source: Path) -> list[dict[str, Any]]:
    """The job results of a run folder (its jobs/*.json) or of an exported JSON-lines file."""
    if source.is_dir():
        return [json.loads(f.read_text()) for f in sorted((source / "jobs").glob("*.json"))]
    return [json.loads(line) for line in read_text(source).splitlines() if line.strip()]


def seed_cell(values: list[float], expected: int) -> str:
    """Mean ± standard deviation of the finite values; "(n of N)" when some of the `expected`
    were not measured, "not run" for none.

    Examples:
        >>> seed_cell([0.5, 0.7, 0.6], 3)
        '0.600 ± 0.100'
        >>> seed_cell([0.5, math.nan], 3)
        '0.500 (1 of 3)'
    """
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return "not run"
    text = f"{values[0]:.3f}"
    if len(values) > 1:
        text = f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"
    return text if len(values) == expected else f"{text} ({len(values)} of {expected})"


def common(jobs: list[dict[str, Any]], explainer: str) -> list[int]:
    """Positions (in the run's image list) where every job of `explainer` has a top-k value."""
    mine = [j for j in jobs if j["explainer"] == explainer]
    if not mine:
        return []
    key = TOPK.format(m=explainer)
    n = len(mine[0]["indices"])
    return [i for i in range(n) if all(j["per_image"][key][i] is not None for j in mine)]


def _mean(values: list[Any] | None, where: list[int]) -> float:
    if values is None:  # a measure the job did not record
        return math.nan
    picked = [values[i] for i in where if values[i] is not None]
    return statistics.mean(picked) if picked and len(picked) == len(where) else math.nan


def _by_model(jobs: list[dict[str, Any]]) -> dict[tuple[str, int, str], dict[str, Any]]:
    return {(j["method"], j["seed"], j["explainer"]): j for j in jobs}


def _references(jobs: list[dict[str, Any]], key: str) -> dict[tuple[str, int], list[Any]]:
    """Each model's "map = input" values per image (attacked in its saliency job)."""
    return {(j["method"], j["seed"]): j["per_image"][key] for j in jobs if key in j["per_image"]}


def tables(jobs: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """The section's tables: top-k ∩ and LENS per row and map with the chance rows, the share
    of images above "map = input", the cost and members, and the jobs the run is missing."""
    rows, seeds = meta.get("rows", list(ROWS)), meta.get("seeds", list(SEEDS))
    maps = [m for m in MAPS if any(j["explainer"] == m for j in jobs)]
    where = {m: common(jobs, m) for m in maps}
    done = _by_model(jobs)
    refs = {k: _references(jobs, k) for k in (REFERENCE, REFERENCE_LENS)}
    out: dict[str, Any] = {"maps": maps, "images": {m: len(where[m]) for m in maps}}
    for name, key, ref in (("topk", TOPK, REFERENCE), ("lens", LENS, REFERENCE_LENS)):
        table = []
        for row in rows:
            accs = [next((j["accuracy"] for j in jobs if (j["method"], j["seed"]) == (row, s)),
                         math.nan) for s in seeds]  # fmt: skip
            cells = [row, _setting(row, meta), seed_cell(accs, len(seeds))]
            for m in maps:
                per_seed = [_mean(done[(row, s, m)]["per_image"].get(key.format(m=m)), where[m])
                            if (row, s, m) in done else math.nan for s in seeds]  # fmt: skip
                cells.append(seed_cell(per_seed, len(seeds)))
            table.append(cells)
        table.append(_chance_row("map = input (same ensemble)", refs[ref], jobs, maps, where))
        table.append(_random_row(jobs, maps, where, RANDOM if name == "topk" else RANDOM_LENS))
        table.append(["images (every row)", "", "all 1,000", *(str(len(where[m])) for m in maps)])
        out[name] = table
    out["above"] = [[row, *(_above(done, refs[REFERENCE], row, seeds, m, where[m]) for m in maps)]
                    for row in rows]  # fmt: skip
    out["cost"] = cost_rows(jobs, maps)
    out["missing"] = missing(jobs, rows, seeds)
    return out


def _setting(row: str, meta: dict[str, Any]) -> str:
    value = meta.get("chosen", {}).get(row)
    return "-" if value is None else f"{SETTING.get(row, 'value')}={value:g}"


def _chance_row(label: str, refs: dict[tuple[str, int], list[Any]], jobs: list[dict[str, Any]],
                maps: list[str], where: dict[str, list[int]]) -> list[str]:  # fmt: skip
    """Mean ± sd over the models measured on a map of each model's "map = input" mean."""
    cells = [label, "-", ""]
    for m in maps:
        models = {(j["method"], j["seed"]) for j in jobs if j["explainer"] == m}
        values = [_mean(refs[model], where[m]) for model in sorted(models) if model in refs]
        cells.append(seed_cell(values, len(values)) if values else "not run")
    return cells


def _random_row(jobs: list[dict[str, Any]], maps: list[str], where: dict[str, list[int]],
                measure: str = RANDOM) -> list[str]:  # fmt: skip
    """Mean ± sd over the models of the top-k ∩ (or LENS, `measure`) of each clean map with a
    uniformly random map."""
    cells = ["random map", "-", ""]
    for m in maps:
        key = measure.format(m=m)
        values = [_mean(j["per_image"][key], where[m])
                  for j in jobs if j["explainer"] == m and key in j["per_image"]]  # fmt: skip
        cells.append(seed_cell(values, len(values)) if values else "not run")
    return cells


def _above(done: dict[tuple[str, int, str], dict[str, Any]], refs: dict[tuple[str, int], list[Any]],
           row: str, seeds: list[int], m: str, where: list[int]) -> str:  # fmt: skip
    """Share of (seed, image) pairs where the row's map keeps more of its top-k than "map =
    input" does on the same model and image, pooled over the seeds measured."""
    above = total = 0
    for s in seeds:
        job, ref = done.get((row, s, m)), refs.get((row, s))
        if job is None or ref is None:
            continue
        values = job["per_image"][TOPK.format(m=m)]
        pairs = [(values[i], ref[i]) for i in where if ref[i] is not None]
        above += sum(v > r for v, r in pairs)
        total += len(pairs)
    return f"{above / total:.2f} ({above}/{total})" if total else "not run"


def cost_rows(jobs: list[dict[str, Any]], maps: list[str]) -> list[list[str]]:
    """Per map: models measured, CPU s per image, the members and on how many images (summed
    over the models) each was the worst; jobs adopted from another run (no cost recorded) are
    left out."""
    rows = []
    for m in maps:
        mine = [j for j in jobs if j["explainer"] == m and j.get("attack_cost")]
        images = sum(len(j["indices"]) for j in mine)
        worst: dict[str, int] = {}
        for j in mine:
            for member in (j.get("attack_cost") or {}).get(f"{m}/topk", {}).get("members", []):
                worst[member["name"]] = worst.get(member["name"], 0) + member["worst_on"]
        text = ", ".join(f"{name} {n}" for name, n in worst.items())
        cpu = sum(j["cpu_s"] for j in mine) / max(1, images)
        rows.append([LABELS[m], str(len(mine)), f"{cpu:.1f}", str(len(worst)), text])
    return rows


def missing(jobs: list[dict[str, Any]], rows: list[str], seeds: list[int]) -> list[str]:
    """The planned (row, seed, map) cells without a job, grouped by row and seed; a map no
    row has is named once."""
    done = _by_model(jobs)
    none = [m for m in MAPS if not any(j["explainer"] == m for j in jobs)]
    lost = [f"{', '.join(LABELS[m] for m in none)}: no row"] if none else []
    for row in rows:
        parts = []
        for s in seeds:
            maps = [LABELS[m] for m in MAPS if (row, s, m) not in done and m not in none]
            parts += [f"seed {s}: {', '.join(maps)}"] if maps else []
        lost += [f"{row} ({'; '.join(parts)})"] if parts else []
    return lost


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(r) + " |" for r in rows),
        "",
    ]


def members_text(jobs: list[dict[str, Any]]) -> str:
    """The ensemble's members as a map job's attack cost names them (saliency's first)."""
    for j in sorted(
        (j for j in jobs if j["explainer"] in MAPS), key=lambda j: MAPS.index(j["explainer"])
    ):
        note = (j.get("attack_cost") or {}).get(f"{j['explainer']}/topk")
        if note:
            return "; ".join(
                f"`{m['name']}` ({m['detail']})" if m.get("detail") else f"`{m['name']}`"
                for m in note["members"]
            )
    return "not recorded"


def _adopted_text(jobs: list[dict[str, Any]]) -> str:
    maps = [j for j in jobs if j["explainer"] in MAPS]
    adopted = [j for j in maps if j.get("source")]
    if not adopted:
        return ""
    names = ", ".join(f"{j['method']} s{j['seed']} {LABELS[j['explainer']]}" for j in adopted)
    chance = sum(bool(j.get("chance")) for j in adopted)
    level = (
        "their random-map levels were measured apart (`--chance`: the same clean maps and "
        "seeded random maps, no attack)"
        if chance == len(adopted)
        else "they hold no random-map level"
    )
    return (
        f" {len(adopted)} of the {len(maps)} map jobs were measured by the baselines run "
        f"(`experiments.baselines`: the same checkpoints, protocol and images) and adopted "
        f"(`--adopt`): {names}; {level} and no cost note."
    )


def row_notes(rows: list[str], chosen: dict[str, Any]) -> str:
    """What the rows whose setting is not the leaderboard's CV choice are (the shipped recipe's
    row, at its config's weight), for the section's opening paragraph."""
    if "finetune_multi_map" not in rows:
        return ""
    from experiments.leaderboard_methods import METHODS, Plan

    m, weight = METHODS["finetune_multi_map"], chosen.get("finetune_multi_map")
    at = f"at the config's weight {weight:g}" if weight is not None else "at the config's weight"
    return (
        " `finetune_multi_map` is the every-map recipe as first shipped "
        "(configs/mnist5k_finetune_every_map.yaml before its ascent started at a vertex of a "
        f"larger ball: one multi-map penalty on the {', '.join(m.fixed['explainers'])} maps, "
        f"radius {m.fixed['radius']:g}, a uniform start, Adam lr "
        f"{m.lr:g}, {Plan().finetune_epochs} epochs) {at}, not a CV choice, fine-tuned from each "
        "seed's natural model of this table on the leaderboard's 4,000-image pool; "
        "`finetune_every_map` is the leaderboard's own every-map recipe (a composed penalty) at "
        "the weight its CV rule chose."
    )


def section_lines(jobs: list[dict[str, Any]], meta: dict[str, Any], source: str) -> list[str]:
    """The page's section: banner (PARTIAL when cells are missing), protocol, tables."""
    data = tables(jobs, meta)
    maps = [LABELS[m] for m in data["maps"]]
    protocol = jobs[0]["protocol"] if jobs else meta.get("protocol", "ensemble")
    lines = [f"## Every row under the attack ensemble (`{protocol}` protocol)", ""]
    if data["missing"]:
        lines += ["**PARTIAL: these cells were not measured (the run's CPU time ran out); every "
                  "number below was:** " + "; ".join(data["missing"]) + ".", ""]  # fmt: skip
    n = len(jobs[0]["indices"]) if jobs else 0
    lines += [
        f"Images: the first {n} MNIST-5k test images that every model of every row (3 seeds "
        "each) classifies correctly, the same for every row; each column keeps those where "
        "every model's clean map can be attacked (count in the last row). "
        f"Protocol `{protocol}` (`robust_train.evaluation.PROTOCOLS[{protocol!r}]`), members: "
        f"{members_text(jobs)}; each image keeps its worst member. Job results: `{source}`."
        + _adopted_text(jobs)
        + row_notes(list(meta.get("rows", ROWS)), meta.get("chosen", {})),
        "",
        "Top-100 intersection kept under the ensemble (higher is more robust; mean ± standard "
        "deviation over 3 seeds):",
        "",
        *_table(["row", "setting", "test acc", *maps], data["topk"]),
        "Share of (seed, image) pairs where the row's map keeps more of its top-100 than "
        '"map = input" does on the same model and image (the chance level a map must beat):',
        "",
        *_table(["row", *maps], data["above"]),
        "LENS (the top-k intersection that counts a top pixel moved by one pixel as kept) under "
        "the same ensemble:",
        "",
        *_table(["row", "setting", "test acc", *maps], data["lens"]),
        "Cost of the ensemble (CPU seconds per image on one thread, and on how many images of "
        "all models each member was the worst):",
        "",
        *_table(["map", "models", "CPU s per image", "members", "worst on"], data["cost"]),
    ]
    return lines


def page_lines(results: Path) -> list[str]:
    """The section from the job file that `results`/page.json names under "ensemble" (the
    leaderboard's results folder); no lines when it names none."""
    meta = json.loads((results / "page.json").read_text())
    if "ensemble" not in meta:
        return []
    jobs = load_jobs(results / meta["ensemble"])
    chosen = {j["method"]: j["value"] for j in jobs}
    source = f"experiments/results/leaderboard/{meta['ensemble']}"
    return section_lines(jobs, {"rows": list(ROWS), "seeds": list(SEEDS), "chosen": chosen}, source)
