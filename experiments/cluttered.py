"""The cluttered RGB benchmark (CLUTTERED.md): natural vs every-map models on cluttered MNIST-5k.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python -m experiments run cluttered eval \\
        --model cnn/natural=PATH.ckpt --model cnn/every_map=PATH.ckpt --out runs/cluttered
    .venv/bin/python -m experiments run cluttered table --out runs/cluttered   # results JSON
    .venv/bin/python -m experiments run cluttered figures --model cnn/natural=PATH ...
    .venv/bin/python -m experiments page cluttered

`eval` measures each checkpoint (`ARCH/KIND=PATH`; KIND "natural", "every_map" or a re-tuned
variant's name) on `ClutteredMNIST5kDataModule(image_size=64)`'s test split: the accuracy on all
1,000 test images, and, on the correctly classified ones among the first `--images`, through the
evaluation engine with the test masks: each explainer's top-k intersection under the top-k
attack and under random signs ("noise") at L_inf `--epsilon` (8/255), the fidelity estimate
(AUC_LIF - AUC_MIF) of its clean maps, and the relevance mass accuracy, relevance rank accuracy
and pointing game of its clean and attacked maps; "map = input" (`input_reference`) is attacked
and scored beside. The protocol is "fast" (one attack per objective, the engine's defaults for
the image size, `robust_train.evaluation.PROTOCOLS`) or "ensemble" (`--protocol`), both with
the image size's k (an eighth of the pixels) and sign steps scaled to the budget; the random
map's top-k intersection (chance) is reported beside each map. A job writes
`--out`/jobs/<arch>_<kind>.json (with `__<explainers>` where they are not the default pair and
`__eps<N>` at a budget of N/255 other than 8/255) and is skipped when that file exists with the
same settings, so a stopped run resumes. The fit cost of each checkpoint is read from
`--fit-times` (a JSON of label -> CPU seconds), when given.

`table` writes experiments/results/cluttered.json (the page's tables) from `--out`/jobs, with the
fit costs of `--fit-times` and each fine-tune's cost x natural, (natural + fine-tune) / natural (the
natural fit of its seed; beside it the same against the mean of its natural recipe's fits over the
seeds, `mean_natural_ratio`; the targets judge the per-seed ratio), the results at another budget
than 8/255 in a table of their own ("budget"; each budget's fine-tunes against the natural model
measured at it), the targets of the other maps (LRP, DeepLIFT, IG) in theirs ("targets_maps"), the
rows of each `--ensemble-out` folder's jobs (other `eval` runs: the attack ensemble's, the fast
protocol on its images; in the targets table each protocol's fine-tunes against the natural model
measured the same way) and those of `--out`/diagnosis (`experiments.cluttered_diagnosis`),
`--out`/head (`experiments.cluttered_head`), `--out`/mass (`experiments.cluttered_mass`) and
`--out`/batchnorm (`experiments.cluttered_batchnorm`), and per
architecture and seed the fine-tune that meets the most targets ("verdict", `verdict_table`;
`experiments.cluttered_front` draws the trade-off front from the same rows);
`figures` writes docs/images/cluttered_attacked_maps.png (clean and attacked maps of the first
correctly classified test images, the ground-truth outline drawn on each).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from experiments.cluttered_head import head_table
from experiments.pages import IMAGES, RESULTS
from robust_train.app.settings_flags import fraction

EPSILON = 8 / 255
EXPLAINERS = ("saliency", "grad_cam")
MEASURES = ("relevance_mass", "relevance_rank", "pointing_game")
# Grad-CAM's layer where the default is too coarse: torchvision's ResNet-18 stem leaves 2 x 2
# at `layer4` on 64 x 64 images; `layer2` is 8 x 8, the side of the VGG-BN's last stage.
GRAD_CAM_LAYERS = {"resnet18": "backbone.layer2"}
VERSION = 1  # of the measurements: a job made with another version runs again


def parse_models(items: list[str]) -> dict[str, str]:
    """`ARCH/KIND=PATH` items as {"ARCH/KIND": PATH}; a ValueError names a malformed item."""
    out = {}
    for item in items:
        label, sep, path = item.partition("=")
        if not sep or "/" not in label or not path:
            raise ValueError(f"`--model` must be ARCH/KIND=PATH, got {item!r}")
        out[label] = path
    return out


def test_data(n: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The test images, labels and masks of `ClutteredMNIST5kDataModule(image_size=64)`."""
    from robust_train.data import ClutteredMNIST5kDataModule

    data = ClutteredMNIST5kDataModule(image_size=64)
    data.setup("test")
    x = torch.stack([data.test_set[i][0] for i in range(len(data.test_set))])
    y, m = data.test_set.targets, data.masks("test")
    return (x, y, m) if n is None else (x[:n], y[:n], m[:n])


def explainers_for(arch: str, names: tuple[str, ...]) -> tuple[Any, ...]:
    from robust_train.explain import get_explainer

    layer = GRAD_CAM_LAYERS.get(arch)
    return tuple(
        get_explainer("grad_cam", layer=layer) if n == "grad_cam" and layer else n for n in names
    )


def settings_for(args: argparse.Namespace, arch: str) -> Any:
    from robust_train.evaluation import PROTOCOLS

    base = PROTOCOLS[args.protocol]
    # the image size's k (512 of 64 x 64 pixels) and a step scaled to the budget, whatever
    # the protocol: the ensemble's own k 100 and step 0.015 are MNIST's, at a budget of 0.3
    attack = dataclasses.replace(
        base.attack, epsilon=args.epsilon, k=None, measure_k=None, step_size=None
    )
    return dataclasses.replace(
        base,
        attack=attack,
        parts=("fragility", "input_reference", "fidelity"),
        explainers=explainers_for(arch, tuple(args.explainers)),
        attacks=("topk", "random_sign"),
        correct_only=True,
        input_reference=True,
        n_samples=args.images,
        seed=0,
        extra={**base.extra, "protocol": args.protocol},
    )


def measure(label: str, path: str, args: argparse.Namespace) -> dict[str, Any]:
    """One checkpoint's accuracy and per-explainer means (module docstring)."""
    from robust_train.core.runtime import predict
    from robust_train.evaluation import run_parts
    from robust_train.models import load_classifier

    arch = label.split("/")[0]
    model = load_classifier(path)
    x, y, m = test_data()
    with torch.no_grad():
        accuracy = float((predict(model, x, 256) == y).float().mean())
    start = time.perf_counter()
    n = args.images
    evaluation = run_parts(model, x[:n], y[:n], settings_for(args, arch), masks=m[:n])
    out: dict[str, Any] = {"accuracy": accuracy, "seconds": time.perf_counter() - start}
    reference = dataclasses.replace(
        settings_for(args, arch), parts=("fidelity",), explainers=("input_reference",)
    )
    evaluation.values.update(run_parts(model, x[:n], y[:n], reference).values)
    out["n_attacked"] = int(torch.nan_to_num(evaluation.values["n_attacked"]).sum())
    for key, values in evaluation.values.items():
        if key in ("accuracy", "n_attacked"):
            continue
        if values.dim() == 1 and values.is_floating_point():
            finite = values[~torch.isnan(values)]
            if len(finite):
                out[key] = float(finite.mean())
    out["mask_area"] = float(m[:n].flatten(1).float().mean())
    return out


def run_eval(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    jobs = Path(args.out) / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    fit_times = json.loads(Path(args.fit_times).read_text()) if args.fit_times else {}
    stamp = {"version": VERSION, "protocol": args.protocol, "images": args.images,
             "epsilon": args.epsilon, "explainers": list(args.explainers)}  # fmt: skip
    for label, path in parse_models(args.model).items():
        tag = "" if tuple(args.explainers) == EXPLAINERS else "__" + "-".join(args.explainers)
        tag += "" if at_default_budget(stamp) else f"__eps{args.epsilon * 255:g}"
        target = jobs / (label.replace("/", "_") + tag + ".json")
        if target.exists() and json.loads(target.read_text()).get("stamp") == stamp:
            print(f"{label}: done ({target})")
            continue
        print(f"{label}: measuring {path}", flush=True)
        result = {"stamp": stamp, "label": label, "checkpoint": path, **measure(label, path, args)}
        if label in fit_times:
            result["fit_cpu_seconds"] = fit_times[label]
        target.write_text(json.dumps(result, indent=1))
        print(f"{label}: {result['seconds']:.0f} s, accuracy {result['accuracy']:.3f}", flush=True)


def natural_key(label: str) -> tuple[str, int]:
    """The architecture and seed of `ARCH/KIND` (KIND ending in `_s<seed>`, or seed 0): a model
    is compared with the natural model of the same key.

    Examples:
        >>> natural_key("cnn/em_w3_r8_e16"), natural_key("resnet18/natural_s1")
        (('cnn', 0), ('resnet18', 1))
    """
    arch, kind = label.split("/", 1)
    seed = re.search(r"_s(\d+)$", kind)
    return arch, int(seed.group(1)) if seed else 0


def natural_of(label: str, naturals: Iterable[str]) -> str | None:
    """The natural model `label` is compared with, among the labels `naturals`
    (`ARCH/PREFIXnatural[_s<seed>]`): one of the same architecture and seed (`natural_key`) whose
    PREFIX begins `label`'s kind, the longest such PREFIX; None if there is none. So a variant of
    an architecture's natural model (`vgg_bn/gp_natural_s0`) serves its own fine-tunes
    (`vgg_bn/gp_every_map_s0`) and the plain one (`vgg_bn/natural_s0`) the others.

    Examples:
        >>> naturals = ["vgg_bn/natural_s0", "vgg_bn/gp_natural_s0", "vgg_bn/natural_s1"]
        >>> natural_of("vgg_bn/gp_every_map_s0", naturals), natural_of("vgg_bn/em_s0", naturals)
        ('vgg_bn/gp_natural_s0', 'vgg_bn/natural_s0')
        >>> natural_of("cnn/em", naturals) is None
        True
    """
    kind = label.split("/", 1)[1]
    best: tuple[int, str] | None = None
    for natural in naturals:
        prefix = natural.split("/", 1)[1].split("natural", 1)[0]
        if natural_key(natural) != natural_key(label) or not kind.startswith(prefix):
            continue
        if best is None or len(prefix) > best[0]:
            best = (len(prefix), natural)
    return None if best is None else best[1]


def mean_natural_ratio(label: str, fits: dict[str, float | None]) -> tuple[float, int] | None:
    """The whole-fit cost of the fine-tune `label` against the mean fit CPU seconds of its natural
    model's recipe over the seeds with a fit time (`fits`: label -> CPU seconds or None):
    (mean + fine-tune) / mean, and the number of natural fits averaged. The per-seed ratio divides
    by one natural fit, whose CPU time moves with what else ran beside it; the mean is the steadier
    base. None for a natural model, an unknown fine-tune time, or fewer than two natural fits.

    Examples:
        >>> fits = {"cnn/natural": 400.0, "cnn/natural_s1": 600.0, "cnn/tuned_s1": 500.0}
        >>> mean_natural_ratio("cnn/tuned_s1", fits)
        (2.0, 2)
        >>> mean_natural_ratio("cnn/natural_s1", fits) is None
        True
    """
    naturals = [other for other in fits if "natural" in other]
    natural, own = natural_of(label, naturals), fits.get(label)
    if natural is None or own is None or "natural" in label.split("/", 1)[1]:
        return None
    recipe = re.sub(r"_s\d+$", "", natural)
    times = [t for n in naturals if re.sub(r"_s\d+$", "", n) == recipe and (t := fits[n])]
    if len(times) < 2:
        return None
    mean = sum(times) / len(times)
    return (mean + own) / mean, len(times)


def _cell(value: float | None, digits: int = 3) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.1e}" if abs(value) >= 1e4 else f"{value:.{digits}f}"


def table_rows(
    results: list[dict[str, Any]], with_protocol: bool = False
) -> dict[str, dict[str, Any]]:
    """The page's tables from the jobs' results: one row per model and map (and protocol, in a
    column after the model's when `with_protocol`)."""
    columns = ["model", "map", "accuracy", "top-k under attack", "top-k under noise",
               "top-k of a random map", "fidelity", "rel. mass clean", "rel. mass attacked",
               "rank clean", "rank attacked", "pointing clean", "pointing attacked"]  # fmt: skip
    columns[1:1] = ["protocol"] if with_protocol else []
    rows = []
    for r in sorted(results, key=_row_order):
        names = list(r["stamp"]["explainers"])
        names += ["input_reference"] if names == list(EXPLAINERS) else []  # once per model
        for e in names:
            shown = "map = input" if e == "input_reference" else e
            rows.append([
                r["label"], *([protocol_of(r)] if with_protocol else []), shown,
                _cell(r["accuracy"]),
                _cell(r.get(f"attack/{e}/topk/topk_intersection")),
                _cell(r.get(f"attack/{e}/random_sign/topk_intersection")),
                _cell(r.get(f"fragility/{e}/random_topk")),
                _cell(r.get(f"fidelity/{e}/fidelity")),
                _cell(r.get(f"localisation/{e}/relevance_mass")),
                _cell(r.get(f"attack/{e}/topk/relevance_mass")),
                _cell(r.get(f"localisation/{e}/relevance_rank")),
                _cell(r.get(f"attack/{e}/topk/relevance_rank")),
                _cell(r.get(f"localisation/{e}/pointing_game")),
                _cell(r.get(f"attack/{e}/topk/pointing_game")),
            ])  # fmt: skip
    cost_rows = []
    fits = {r["label"]: r.get("fit_cpu_seconds") for r in results}
    for r in sorted(results, key=lambda r: r["label"]):
        if r["stamp"]["explainers"] != list(EXPLAINERS):
            continue
        arch, kind = r["label"].split("/", 1)
        natural = natural_of(r["label"], [label for label in fits if "natural" in label])
        own, base = r.get("fit_cpu_seconds"), None if natural is None else fits[natural]
        ratio = None
        if own is not None and base and "natural" not in kind:
            ratio = (base + own) / base
        mean = mean_natural_ratio(r["label"], fits)
        cost_rows.append([r["label"], str(r["n_attacked"]), _cell(r.get("seconds"), 0),
                          _cell(own, 0), _cell(ratio, 2),
                          "-" if mean is None else f"{mean[0]:.2f} ({mean[1]})",
                          _cell(r["mask_area"])])  # fmt: skip
    return {
        "measures": {"columns": columns, "align": "|---" * len(columns) + "|", "rows": rows},
        "cost": {
            "columns": [
                "model",
                "images attacked",
                "evaluation s",
                "fit CPU s",
                "cost x natural",
                "cost x mean natural (fits)",
                "mask area (a uniform map's relevance mass)",
            ],  # fmt: skip
            "align": "|---|---|---|---|---|---|---|",
            "rows": cost_rows,
        },
    }


# The targets for a fine-tune against its architecture's natural model: (column, test).
# A test takes the fine-tune's and the natural model's results and returns True, False or None
# (a value missing). "top-k" is the top-k intersection under the top-k attack.
TARGET_GAIN = 0.25  # each map's top-k under attack at least natural's + this
MAP_NAMES = {"saliency": "saliency", "grad_cam": "Grad-CAM", "lrp": "LRP",
             "deeplift": "DeepLIFT", "integrated_gradients": "IG"}  # fmt: skip


def _get(r: dict[str, Any], key: str) -> float | None:
    value = r.get(key)
    return None if value is None or math.isnan(value) else float(value)


def _at_least(a: float | None, b: float | None, margin: float = 0.0) -> bool | None:
    return None if a is None or b is None else a >= b + margin


def _map_tests(e: str, shown: str) -> list[tuple[str, Any]]:
    """The targets every map shares: its top-k under attack at least natural's + TARGET_GAIN
    and above "map = input" (attacked on the same model and images), its attacked relevance mass
    not below the natural map's clean one."""
    topk = f"attack/{e}/topk/topk_intersection"
    return [
        (f"{shown} top-k >= natural + {TARGET_GAIN}",
         lambda r, n: _at_least(_get(r, topk), _get(n, topk), TARGET_GAIN)),
        (f"{shown} top-k > map = input",
         lambda r, n: _at_least(
             _get(r, topk), _get(r, "attack/input_reference/topk/topk_intersection"), 1e-9)),
        (f"{shown} attacked rel. mass >= natural clean",
         lambda r, n: _at_least(_get(r, f"attack/{e}/topk/relevance_mass"),
                                _get(n, f"localisation/{e}/relevance_mass"))),
    ]  # fmt: skip


def _target_tests() -> list[tuple[str, Any]]:
    tests: list[tuple[str, Any]] = [
        (
            "accuracy within 1 point",
            lambda r, n: _at_least(r["accuracy"], n["accuracy"], -0.01 - 1e-9),
        ),
        ("cost <= 2x", lambda r, n: None if r.get("cost") is None else r["cost"] <= 2.0),
    ]
    for e in EXPLAINERS:
        tests += _map_tests(e, MAP_NAMES[e])
    tests += [
        ("Grad-CAM fidelity >= natural",
         lambda r, n: _at_least(_get(r, "fidelity/grad_cam/fidelity"),
                                _get(n, "fidelity/grad_cam/fidelity"))),
        ("Grad-CAM rel. mass >= natural",
         lambda r, n: _at_least(_get(r, "localisation/grad_cam/relevance_mass"),
                                _get(n, "localisation/grad_cam/relevance_mass"))),
    ]  # fmt: skip
    return tests


def at_default_budget(stamp: dict[str, Any]) -> bool:
    """Whether a result (its stamp) was measured at the page's L_inf budget, EPSILON (8/255); a
    stamp without a budget was."""
    epsilon = stamp.get("epsilon")
    return epsilon is None or abs(float(epsilon) - EPSILON) < 1e-9


def protocol_of(r: dict[str, Any]) -> str:
    """How a result was measured: its protocol, the test images it started from and its L_inf
    budget where that is not the page's (EPSILON).

    Examples:
        >>> protocol_of({"stamp": {"protocol": "ensemble", "images": 10}})
        'ensemble, first 10 images'
        >>> protocol_of({"stamp": {"protocol": "fast", "images": 40, "epsilon": 16 / 255}})
        'fast, first 40 images, L_inf 16/255'
    """
    images = r["stamp"].get("images")
    protocol = str(r["stamp"].get("protocol", "fast"))
    protocol = protocol if images is None else f"{protocol}, first {images} images"
    if not at_default_budget(r["stamp"]):
        protocol += f", L_inf {round(float(r['stamp']['epsilon']) * 255, 2):g}/255"
    return protocol


def _row_order(r: dict[str, Any]) -> tuple[str, bool, int, float]:
    """A model's rows together: the fast protocol's first, on the most images first, the
    smallest budget first."""
    stamp = r["stamp"]
    fast, images = stamp.get("protocol", "fast") != "fast", -int(stamp.get("images") or 0)
    return r["label"], fast, images, float(stamp.get("epsilon") or EPSILON)


def natural_pairs(
    results: list[dict[str, Any]],
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Each fine-tune's result of the default explainer pair with the natural model of its
    architecture and seed (`natural_of`) measured by the same protocol on the same images
    (`protocol_of`), as (fine-tune, natural), in the targets table's row order; a result without
    such a natural model is left out."""
    pairs = [r for r in results if r["stamp"]["explainers"] == list(EXPLAINERS)]
    naturals = {(r["label"], protocol_of(r)): r for r in pairs if "natural" in r["label"]}
    for r in sorted(pairs, key=_row_order):
        measured = [label for label, protocol in naturals if protocol == protocol_of(r)]
        natural = naturals.get((natural_of(r["label"], measured) or "", protocol_of(r)))
        if "natural" not in r["label"] and natural is not None:
            yield r, natural


def targets_table(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Which targets each fine-tune meets against the natural model of its architecture and seed
    (`natural_of`) measured by the same protocol on the same images (`protocol_of`): "yes", "no"
    or "-" (a value missing), and the count met. Results of the default explainer pair only, one
    row per fine-tune and protocol (the fast protocol's first, on the most images first); a
    result may carry "cost" ((natural + fine-tune) / natural fit CPU seconds)."""
    tests = _target_tests()
    rows = []
    for r, natural in natural_pairs(results):
        verdicts = [test(r, natural) for _, test in tests]
        cells = ["-" if v is None else ("yes" if v else "no") for v in verdicts]
        met = f"{sum(v is True for v in verdicts)}/{len(verdicts)}"
        rows.append([r["label"], natural["label"], protocol_of(r), *cells, met])
    columns = ["model", "against", "protocol", *(name for name, _ in tests), "met"]
    return {"columns": columns, "align": "|---" * len(columns) + "|", "rows": rows}


# The architectures of the seed verdicts and the front figure: label prefix -> name. The first
# VGG-BN (average head) and ResNet-18 (8 natural epochs) runs are left out, replaced since.
# `resnet18/re12_` and `vgg_bn/re_max_`: the 12-epoch ResNet-18 and the max-head VGG-BN
# recipes fitted again on another machine (their own natural models: a fit does not repeat
# exactly across machines), with the distilled fine-tunes.
FAMILIES = {"cnn/": "small CNN", "vgg_bn/max_": "VGG-BN, max head",
            "vgg_bn/re_max_": "VGG-BN, max head, refitted",
            "resnet18/e12_": "ResNet-18, 12 natural epochs",
            "resnet18/re12_": "ResNet-18, 12 natural epochs, refitted"}  # fmt: skip


def family_of(label: str) -> str | None:
    """The architecture of `FAMILIES` a label belongs to, None for another one.

    Examples:
        >>> family_of("vgg_bn/max_em_r8_s1"), family_of("vgg_bn/gp_every_map_s0")
        ('VGG-BN, max head', None)
    """
    return next((name for prefix, name in FAMILIES.items() if label.startswith(prefix)), None)


def main_pairs(results: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """One (fine-tune, natural) pair of `natural_pairs` per fine-tune of `FAMILIES` at the
    page's budget (EPSILON): its first row in the targets table (the fast protocol's, on the
    most images), the row its verdicts and front point come from."""
    found: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for r, natural in natural_pairs(results):
        if at_default_budget(r["stamp"]) and family_of(r["label"]) is not None:
            found.setdefault(r["label"], (r, natural))
    return list(found.values())


def verdict_table(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per architecture of `FAMILIES` and seed, the fine-tune that meets the most targets
    (`targets_table`'s, from the row of `main_pairs`; ties: the smaller accuracy loss, then the
    label), its count met, its accuracy lost against its natural model (percentage points) and
    the targets it misses ("not measured" where a value is missing)."""
    best: dict[tuple[str, int], tuple[tuple[int, float, str], list[str]]] = {}
    counts: dict[tuple[str, int], int] = {}
    tests = _target_tests()
    for r, natural in main_pairs(results):
        key = (str(family_of(r["label"])), natural_key(r["label"])[1])
        verdicts = [(name, test(r, natural)) for name, test in tests]
        met = sum(v is True for _, v in verdicts)
        lost = 100 * (natural["accuracy"] - r["accuracy"])
        missed = [name for name, v in verdicts if v is False]
        missed += [f"not measured: {name}" for name, v in verdicts if v is None]
        cells = [r["label"], natural["label"], protocol_of(r), f"{met}/{len(tests)}",
                 f"{lost:.1f}", "; ".join(missed) or "none"]  # fmt: skip
        counts[key] = counts.get(key, 0) + 1
        if key not in best or (-met, lost, r["label"]) < best[key][0]:
            best[key] = ((-met, lost, r["label"]), cells)
    order = list(FAMILIES.values())
    rows = [[family, str(seed), str(counts[family, seed]), *best[family, seed][1]]
            for family, seed in sorted(best, key=lambda k: (order.index(k[0]), k[1]))]  # fmt: skip
    columns = ["architecture", "seed", "fine-tunes", "best fine-tune", "against", "protocol",
               "met", "accuracy lost (points)", "targets missed"]  # fmt: skip
    return {"columns": columns, "align": "|---" * len(columns) + "|", "rows": rows}


def maps_targets_table(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The targets every map shares (`_map_tests`) for the results of other explainers than the
    default pair (LRP, DeepLIFT, integrated gradients): each fine-tune's job against the natural
    model of its architecture and seed measured with the same explainers by the same protocol on
    the same images, the jobs of one model and protocol in one row. "images attacked" (fine-tune
    / natural) and the protocol say on how many images the verdicts stand, apart from the default
    pair's. One column per test and map of any result, "-" where a row's maps leave it
    unmeasured; "met" counts the verdicts over the measured ones.
    """
    others = [r for r in results if r["stamp"]["explainers"] != list(EXPLAINERS)]
    maps = list(dict.fromkeys(e for r in others for e in r["stamp"]["explainers"]))
    columns = [name for e in maps for name, _ in _map_tests(e, MAP_NAMES.get(e, e))]
    naturals = {
        (r["label"], protocol_of(r), tuple(r["stamp"]["explainers"])): r
        for r in others
        if "natural" in r["label"]
    }
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for r in sorted(others, key=_row_order):
        how = (protocol_of(r), tuple(r["stamp"]["explainers"]))
        measured = [label for label, *rest in naturals if tuple(rest) == how]
        natural = naturals.get((natural_of(r["label"], measured) or "", *how))
        if "natural" in r["label"] or natural is None:
            continue
        row = found.setdefault((r["label"], how[0]), {"against": natural["label"], "images": []})
        row["images"].append(f"{r['n_attacked']} / {natural['n_attacked']}")
        for e in how[1]:
            for name, test in _map_tests(e, MAP_NAMES.get(e, e)):
                row[name] = test(r, natural)
    rows = []
    for (label, protocol), row in found.items():
        verdicts = [row.get(name) for name in columns]
        cells = ["-" if v is None else ("yes" if v else "no") for v in verdicts]
        met = f"{sum(v is True for v in verdicts)}/{sum(v is not None for v in verdicts)}"
        images = ", ".join(dict.fromkeys(row["images"]))
        rows.append([label, row["against"], protocol, images, *cells, met])
    columns = ["model", "against", "protocol", "images attacked", *columns, "met"]
    return {"columns": columns, "align": "|---" * len(columns) + "|", "rows": rows}


DIAGNOSIS_COLUMNS = {
    "accuracy": "accuracy",
    "accuracy_recomputed_bn": "accuracy, BN statistics recomputed",
    "bn_log_var_gap": "BN variance gap",
    "cosine_eval_vs_batch/grad_cam": "Grad-CAM cosine eval vs batch statistics",
    "fidelity/saliency": "saliency fidelity",
    "fidelity/grad_cam@layer2": "Grad-CAM fidelity layer2",
    "fidelity/grad_cam@layer3": "layer3",
    "fidelity/grad_cam@layer4": "layer4",
    "fidelity/grad_cam": "Grad-CAM fidelity default layer",
    "relevance_mass/grad_cam": "Grad-CAM rel. mass",
    "peak_to_mean/grad_cam": "Grad-CAM peak / mean",
}


def per_model_table(
    folder: Path, columns: dict[str, str], counts: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One row per model of the per-model results under `folder` (see `pending_models`): its
    label, then `columns`' keys, the `counts` among them printed as they are, the rest as
    numbers to 3 decimals."""
    results = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    rows = [
        [r["label"], *(str(r[k]) if k in counts else _cell(r.get(k)) for k in columns)]
        for r in sorted(results, key=lambda r: r["label"])
    ]
    header = ["model", *columns.values()]
    return {"columns": header, "align": "|---" * len(header) + "|", "rows": rows}


def pending_models(items: list[str], folder: Path) -> Iterator[tuple[str, str, Path]]:
    """The `ARCH/KIND=PATH` items whose result file under `folder` does not exist yet, as
    (label, path, result file); those done are named and skipped, so a run resumes."""
    for label, path in parse_models(items).items():
        target = folder / (label.replace("/", "_") + ".json")
        if target.exists():
            print(f"{label}: done ({target})")
            continue
        yield label, path, target


def per_model_arguments(
    argv: list[str] | None, description: str, images: int
) -> argparse.Namespace:
    """The command line of a per-model study (`--model ARCH/KIND=PATH` repeated, `--out`,
    `--images`, default `images`); a missing model or fewer than one image exits with code 2."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", action="append", default=[], help="ARCH/KIND=PATH")
    parser.add_argument("--out", default="runs/cluttered")
    parser.add_argument("--images", type=int, default=images)
    args = parser.parse_args(argv)
    if not args.model:
        parser.error("`--model` is required")
    if args.images < 1:
        parser.error(f"`--images` must be at least 1, got {args.images}")
    return args


def diagnosis_table(folder: Path) -> dict[str, Any]:
    """The table of `experiments.cluttered_diagnosis`'s results under `folder` (one row each)."""
    return per_model_table(folder, DIAGNOSIS_COLUMNS)


MASS_COLUMNS = {
    "images": "images",
    "mask": "on the digit (rel. mass)",
    "ring": "ring of 4 pixels",
    "far": "further away",
    "top_k": "in the top 512 pixels",
    "floor": "below a tenth of the maximum",
    "squared": "squared map on the digit",
}


def mass_table(folder: Path) -> dict[str, Any]:
    """The table of `experiments.cluttered_mass`'s results under `folder` (one row each)."""
    return per_model_table(folder, MASS_COLUMNS, counts=("images",))


BATCHNORM_COLUMNS = {
    "natural": "natural model",
    "natural_accuracy": "natural's test accuracy",
    "accuracy": "test accuracy",
    "accuracy_recomputed_bn": "statistics recomputed",
    "bn_log_var_gap": "mean |log| variance ratio",
}


def batchnorm_table(folder: Path) -> dict[str, Any]:
    """The table of `experiments.cluttered_batchnorm`'s results under `folder` (one row each)."""
    return per_model_table(folder, BATCHNORM_COLUMNS, counts=("natural",))


def read_jobs(folder: Path, fit_times: dict[str, float]) -> list[dict[str, Any]]:
    results = [json.loads(p.read_text()) for p in sorted((folder / "jobs").glob("*.json"))]
    for result in results:
        if result["label"] in fit_times:
            result["fit_cpu_seconds"] = fit_times[result["label"]]
    return results


def run_table(args: argparse.Namespace) -> None:
    fit_times = json.loads(Path(args.fit_times).read_text()) if args.fit_times else {}
    everything = read_jobs(Path(args.out), fit_times)
    if not everything:
        raise SystemExit(f"no results under {args.out}/jobs: run `eval` first")
    # the main tables at the page's budget; the other budgets in their own table
    results = [r for r in everything if at_default_budget(r["stamp"])]
    budgets = [r for r in everything if not at_default_budget(r["stamp"])]
    tables = table_rows(results)
    costs = {row[0]: row[4] for row in tables["cost"]["rows"]}
    for result in results:
        cost = costs.get(result["label"], "-")
        result["cost"] = None if cost == "-" else float(cost)
    # measurements of other `eval` runs (the attack ensemble's, the fast protocol on its images)
    ensemble = [r for folder in args.ensemble_out or [] for r in read_jobs(Path(folder), {})]
    for result in ensemble + budgets:  # the same checkpoint's fit cost
        result["cost"] = next((r["cost"] for r in results if r["label"] == result["label"]), None)
    tables["targets"] = targets_table(results + budgets + ensemble)
    tables["targets_maps"] = maps_targets_table(results + budgets + ensemble)
    tables["verdict"] = verdict_table(results + budgets + ensemble)
    tables["budget"] = table_rows(budgets, with_protocol=True)["measures"]
    if ensemble:
        tables["ensemble"] = table_rows(ensemble, with_protocol=True)["measures"]
    tables["diagnosis"] = diagnosis_table(Path(args.out) / "diagnosis")
    tables["head"] = head_table(Path(args.out) / "head")
    tables["mass"] = mass_table(Path(args.out) / "mass")
    tables["batchnorm"] = batchnorm_table(Path(args.out) / "batchnorm")
    data = {"tables": tables, "results": results + budgets + ensemble}
    path = RESULTS / "cluttered.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {path}")


def run_figures(args: argparse.Namespace) -> None:
    """Clean and attacked saliency / Grad-CAM maps with the mask's outline, one row per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from robust_train.attacks import fragility_attack
    from robust_train.core.runtime import predict
    from robust_train.models import load_classifier

    torch.set_num_threads(1)
    models = parse_models(args.model)
    x, y, m = test_data(64)
    fig, axes = plt.subplots(len(models), 1 + 2 * len(EXPLAINERS), figsize=(11, 2.3 * len(models)))
    axes = axes.reshape(len(models), -1)
    for row, (label, path) in enumerate(models.items()):
        model = load_classifier(path)
        with torch.no_grad():
            i = int((predict(model, x, 64) == y).nonzero()[args.example])
        axes[row, 0].imshow(x[i].permute(1, 2, 0).numpy())
        axes[row, 0].set_ylabel(label, fontsize=8)
        for j, name in enumerate(explainers_for(label.split("/")[0], EXPLAINERS)):
            result = fragility_attack(
                model, x[i : i + 1], y[i : i + 1], explainer=name, objective="topk",
                epsilon=EPSILON, step_size=EPSILON / 10, n_steps=50, k=512,
            )  # fmt: skip
            for c, (title, maps) in enumerate(
                (("clean", result.clean_map), ("attacked", result.attacked_map))
            ):
                ax = axes[row, 1 + 2 * j + c]
                ax.imshow(maps[0].detach().numpy(), cmap="magma")
                ax.contour(m[i].float().numpy(), levels=[0.5], colors="cyan", linewidths=0.8)
                ax.set_title(f"{EXPLAINERS[j]} {title}", fontsize=8)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    IMAGES.mkdir(parents=True, exist_ok=True)
    out = IMAGES / "cluttered_attacked_maps.png"
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("eval", "table", "figures"))
    parser.add_argument("--model", action="append", default=[], help="ARCH/KIND=PATH")
    parser.add_argument("--out", default="runs/cluttered")
    parser.add_argument("--images", type=int, default=50)
    parser.add_argument(
        "--epsilon", type=fraction, default=EPSILON, help="L_inf budget: a number or A/B (16/255)"
    )
    parser.add_argument("--protocol", choices=("fast", "ensemble"), default="fast")
    parser.add_argument("--explainers", nargs="+", default=list(EXPLAINERS))
    parser.add_argument("--fit-times", default=None, help="JSON: label -> fit CPU seconds")
    parser.add_argument(
        "--ensemble-out", nargs="+", default=None, help="table: other eval runs' --out folders"
    )
    parser.add_argument("--example", type=int, default=0, help="figures: which correct image")
    args = parser.parse_args(argv)
    if args.epsilon <= 0:
        parser.error(f"`--epsilon` must be > 0, got {args.epsilon!r}")
    if args.command in ("eval", "figures") and not args.model:
        parser.error("`--model` is required for eval and figures")
    {"eval": run_eval, "table": run_table, "figures": run_figures}[args.command](args)


if __name__ == "__main__":
    main()
