"""Sanity checks of the shipped MNIST-5k pair, the "map = input" reference and LENS (SANITY.md).

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.sanity_checks [--images 64]

On the first `--images` test images of `MNIST5kDataModule` (the correctly classified ones for
the attacks) and each shipped checkpoint it prints:

1. the sanity part (`robust_train.evaluation.parts.sanity`, k 100): each map's top-100
   intersection and Spearman with the map of the same architecture with every layer
   re-initialised (cascading, seed 0) and with the input itself;
2. the reference "map = input" under the analytic corner of the L_inf 0.3 ball (its clean top-100
   lowered by 0.3, every other pixel raised by 0.3, clipped to [0, 1]; no label constraint, so
   the attack's figure is at least this) and under full-budget random signs (x + 0.3 s,
   clipped; the worst of 10 label-keeping draws and their mean), and the `fragility_attack`
   top-k attack on `input_reference` with the label kept (100 steps of 0.01, k 100, attack k
   200 as in RAR and 100 as the corner);
3. the top-k and LENS (3x3) intersections of the saliency and IG maps under the same top-k
   attack (1 restart, 100 steps), so the part of the drop that is one-pixel shifts shows.

`--sections OUT` stores these (and the RAR preset's attack and a random walk on "map = input",
and the random-map chance levels) as one JSON file per model and job in OUT and writes them
into SANITY.md's tables 1-3; `--randomisation OUT` writes sections 5 and 6 (the cascading and
independent curves over three seeds, the data-randomisation test), each seed's curves stored in
OUT; `--randomisation OUT --previous CKPT` adds the cascading curves of an earlier robust
checkpoint beside them. A stored job is read back instead of run again, so a stopped run started
again with the same command resumes where it stopped; the files are named by the checkpoint's
hash, so a re-shipped model is measured afresh.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

CHECKPOINTS = {
    "natural": "checkpoints/mnist5k_baseline.ckpt",
    "robust": "checkpoints/mnist5k_robust.ckpt",
}
EPS, K = 0.3, 100


def checkpoint_tag(path: str) -> str:
    """The first 12 hex digits of the sha256 of the checkpoint file at `path` (a shipped name
    that is not a file here resolves as `load_classifier` resolves it)."""
    import hashlib

    from robust_train.core.resources import resolve_file

    file = Path(resolve_file(path, "checkpoints", announce=None))
    return hashlib.sha256(file.read_bytes()).hexdigest()[:12]


def job_name(model: str, images: int, path: str | None = None) -> str:
    """`<model>_<checkpoint tag>_<images>i`: a stored job of the checkpoint at `path` (default
    `CHECKPOINTS[model]`) on the first `images` test images (another checkpoint under the same
    name gets other files)."""
    return f"{model}_{checkpoint_tag(path or CHECKPOINTS[model])}_{images}i"


def stored_job(path: Path, compute: Callable[[], Any]) -> Any:
    """`compute()`, kept as JSON at `path`; read from there instead when the file exists."""
    import json

    if path.is_file():
        return json.loads(path.read_text())
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps(value, indent=1) + "\n")
    partial.replace(path)
    print(f"stored {path}", flush=True)
    return value


def test_images(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    from robust_train.data import MNIST5kDataModule

    data = MNIST5kDataModule()
    data.setup("test")
    x, y = zip(*(data.test_dataloader().dataset[i] for i in range(n)), strict=True)
    return torch.stack(x), torch.as_tensor(y)


def sanity_rows(model: Any, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    from robust_train.evaluation import EvaluationSettings, evaluate_classifier

    settings = EvaluationSettings(
        parts=("sanity",), n_samples=len(x), measure_k=K, ig_steps=16, seed=0,
        explainers=("saliency", "input_x_gradient", "integrated_gradients", "lrp"),
    )  # fmt: skip
    return evaluate_classifier(model, x, y, settings, progress=False)["measures"]


def reference_rows(model: Any, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """ "map = input" under the analytic corner, full-budget signs and the top-k attack."""
    from robust_train.attacks import fragility_attack
    from robust_train.core.runtime import predict
    from robust_train.explain import importance_map
    from robust_train.explain.similarity import topk_intersection, topk_mask

    keep = predict(model, x, 256) == y
    x, y = x[keep], y[keep]
    clean = importance_map(x)
    top = topk_mask(clean, K)[:, None]
    corner = torch.where(top, x - EPS, x + EPS).clamp(0, 1)
    g = torch.Generator().manual_seed(0)
    draws = []
    for _ in range(10):
        signs = torch.randint(0, 2, x.shape, generator=g).float() * 2 - 1
        noisy = (x + EPS * signs).clamp(0, 1)
        kept = predict(model, noisy, 256) == y
        value = topk_intersection(clean, importance_map(noisy), K)
        draws.append(torch.where(kept, value, torch.nan))
    stacked = torch.stack(draws)
    attacks = {
        k: fragility_attack(
            model,
            x,
            y,
            explainer="input_reference",
            objective="topk",
            epsilon=EPS,
            n_steps=100,
            step_size=0.01,
            k=k,
            measure_k=K,
            seed=0,
        )  # fmt: skip
        for k in (200, 100)
    }
    return {
        "n": float(len(x)),
        "corner topk": float(topk_intersection(clean, importance_map(corner), K).mean()),
        "corner label kept": float((predict(model, corner, 256) == y).float().mean()),
        "signs worst of 10": float(_worst(stacked).nanmean()),
        "signs mean": float(stacked.nanmean()),
        **{
            f"attack (attack k {k}) {m}": float(getattr(a, f).nanmean())
            for k, a in attacks.items()
            for m, f in (("topk", "topk_intersection"), ("lens", "lens_topk"))
        },
    }


def _worst(draws: torch.Tensor) -> torch.Tensor:
    """Per image the lowest value over the label-keeping draws (NaN where none kept it)."""
    low = torch.where(draws.isnan(), torch.inf, draws).amin(0)
    return torch.where(low.isinf(), torch.nan, low)


def lens_rows(model: Any, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    from robust_train.attacks import fragility_attack
    from robust_train.core.runtime import predict
    from robust_train.explain import get_explainer

    keep = predict(model, x, 256) == y
    out = {}
    for name, explainer in (
        ("saliency", "saliency"),
        ("IG", get_explainer("integrated_gradients", n_steps=10, baseline=0.0)),
    ):
        result = fragility_attack(
            model, x[keep], y[keep], explainer=explainer, objective="topk", epsilon=EPS,
            n_steps=100, step_size=0.01, k=200, measure_k=K, seed=0,
        )  # fmt: skip
        out[f"{name} topk"] = float(result.topk_intersection.nanmean())
        out[f"{name} lens"] = float(result.lens_topk.nanmean())
    return out


# ------------------------------------------------- chance levels (sections 2 and 3)
CHANCE_LABEL = "random map (chance, no attack), against "
CHANCE_MAPS = ("saliency", "IG (zero baseline, 10 points)", "map = input")


def chance_rows(model: Any, x: torch.Tensor, y: torch.Tensor) -> dict[str, tuple[float, float]]:
    """Per map of sections 2 and 3 (saliency, IG as attacked there, the input itself): the mean
    top-100 and LENS (3x3) intersections of its clean map with a uniformly random map, on the
    images the model classifies correctly (`robust_train.evaluation.parts.fragility.
    random_map_level`, seed 0, the level the engine prints beside its attacks; a constant map
    is left out)."""
    from robust_train.core.runtime import predict
    from robust_train.evaluation.parts.fragility import random_map_level
    from robust_train.explain import get_explainer, importance_map, saliency

    keep = predict(model, x, 256) == y
    x, y = x[keep], y[keep]
    ig = get_explainer("integrated_gradients", n_steps=10, baseline=0.0)
    maps = dict(zip(CHANCE_MAPS, (saliency(model, x, y), ig(model, x, y), x), strict=True))
    out = {}
    for name, explanation in maps.items():
        clean = importance_map(explanation.detach())
        flat = clean.flatten(1)
        varied = flat.amax(1) > flat.amin(1)
        out[name] = tuple(
            float(random_map_level(clean[varied], K, m, 0).mean())
            for m in ("random_topk", "random_lens")
        )
    return out  # type: ignore[return-value]


def write_chance(images: int) -> None:
    """The chance rows of sections 2 and 3 (`chance_rows` of both shipped models on the first
    `images` test images) into results/sanity.json's tables, replacing earlier ones, and
    SANITY.md from its prose."""
    import json

    from experiments.pages import RESULTS, tables_page
    from robust_train.models import load_classifier

    x, y = test_images(images)
    levels = {name: chance_rows(load_classifier(p), x, y) for name, p in CHECKPOINTS.items()}
    path = RESULTS / "sanity.json"
    data = json.loads(path.read_text())
    lens = data["tables"]["3-lens-how-much-of-the-fragility"]
    lens["rows"] = [r for r in lens["rows"] if not r[0].startswith(CHANCE_LABEL)]
    for name in CHANCE_MAPS:
        for model in ("natural",) if name == "map = input" else tuple(levels):
            topk, lensk = levels[model][name]
            lens["rows"].append([f"{CHANCE_LABEL}{name}", model, f"{topk:.3f}", f"{lensk:.3f}",
                                 f"{lensk - topk:+.3f}"])  # fmt: skip
    ref = data["tables"]["2-the-reference-map-input-under"]
    ref["rows"] = [r for r in ref["rows"] if not r[0].startswith(CHANCE_LABEL)]
    ref["rows"].append([f"{CHANCE_LABEL}map = input (top-100 ∩)",
                        *(f"{levels[m]['map = input'][0]:.3f}" for m in CHECKPOINTS)])  # fmt: skip
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(tables_page("SANITY.md"))


# ------------------------------------------------- sections 1-3 as stored jobs (--sections)
SECTION_EXPLAINERS = ("saliency", "input_x_gradient", "integrated_gradients", "lrp")
SECTION_MEASURES = ("random_weights_topk", "random_weights_spearman", "input_topk",
                    "input_spearman")  # fmt: skip
SECTION_COLUMNS = ["explainer", "model", "top-100 ∩ random-weights map", "Spearman random",
                   "top-100 ∩ input", "Spearman input"]  # fmt: skip
# section 2's rows: label, job, key of the job's result
REFERENCE_ROWS = (
    ("analytic corner of the L_inf 0.3 ball (clean top-100 lowered by 0.3, the rest raised, "
     "clipped; no label check)", "reference", "corner topk"),
    ("share of images whose label the corner keeps", "reference", "corner label kept"),
    ("top-k attack, attack k 100, 100 x 0.01, label kept (`fragility_attack`)", "reference",
     "attack (attack k 100) topk"),
    ("top-k attack, attack k 200 (RAR), 100 x 0.01, 1 restart, label kept", "reference",
     "attack (attack k 200) topk"),
    ("RAR preset (`--protocol rar`'s settings through the evaluation engine: attack k 200, "
     "3 restarts)", "rar", "rar topk"),
    ("full-budget random signs x + 0.3 s, clipped: mean over 10 draws (label-keeping)",
     "reference", "signs mean"),
    ("full-budget random signs: worst of 10 label-keeping draws", "reference",
     "signs worst of 10"),
    ("a random walk at the RAR preset's steps (`random_walk`: 100 random sign steps of 0.01, "
     "3 restarts, worst label-keeping iterate)", "rar", "random walk"),
)  # fmt: skip


def rar_reference_rows(model: Any, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """ "map = input" under the RAR preset's top-k attack and a random walk of its steps, through
    the evaluation engine (`PROTOCOLS["rar"]` on these images, the input_reference part)."""
    import dataclasses

    from robust_train.evaluation import PROTOCOLS, evaluate_classifier

    settings = dataclasses.replace(
        PROTOCOLS["rar"], n_samples=len(x), parts=("input_reference",),
        attacks=("topk", "random_walk"),
    )  # fmt: skip
    measures = evaluate_classifier(model, x, y, settings, progress=False)["measures"]
    return {
        "rar topk": measures["attack/input_reference/topk/topk_intersection"],
        "random walk": measures["attack/input_reference/random_walk/topk_intersection"],
    }


def section_jobs(name: str, images: int, out: Path, lens: bool = True) -> dict[str, Any]:
    """Sections 1-3 for `CHECKPOINTS[name]` on the first `images` test images, one stored job
    each (`stored_job`, under `<out>/sections/`): the sanity part, "map = input" under the script's
    attacks and under the RAR preset, the random-map chance levels and (with `lens`) LENS."""
    from robust_train.models import load_classifier

    model = load_classifier(CHECKPOINTS[name])
    x, y = test_images(images)
    jobs: dict[str, Callable[..., Any]] = {
        "sanity": sanity_rows, "reference": reference_rows, "rar": rar_reference_rows,
        "chance": chance_rows,
    }  # fmt: skip
    if lens:
        jobs["lens"] = lens_rows
    base = out / "sections" / job_name(name, images)
    return {
        job: stored_job(Path(f"{base}_{job}.json"), partial(f, model, x, y))
        for job, f in jobs.items()
    }


def _table(columns: list[str], rows: list[list[str]]) -> dict[str, Any]:
    return {"columns": columns, "align": "|" + "---|" * len(columns), "rows": rows}


def section_tables(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Tables 1-3 of SANITY.md from `section_jobs`' results per model ("natural", "robust");
    table 3 only where every model has its LENS job."""
    first = results["natural"]
    sanity = [[NAMES[e], m, *(f"{r['sanity'][f'sanity/{e}/{v}']:.3f}" for v in SECTION_MEASURES)]
              for e in SECTION_EXPLAINERS for m, r in results.items()]  # fmt: skip
    counts = " / ".join(f"{m} {r['reference']['n']:.0f}" for m, r in results.items())
    reference = [[label, *(f"{r[job][key]:.3f}" for r in results.values())]
                 for label, job, key in REFERENCE_ROWS]  # fmt: skip
    chance = (f"{r['chance']['map = input'][0]:.3f}" for r in results.values())
    reference.append([f"{CHANCE_LABEL}map = input (top-100 ∩)", *chance])
    tables = {
        "1-does-the-map-depend-on-what": _table(SECTION_COLUMNS, sanity),
        "2-the-reference-map-input-under": _table(
            [f"measure (correctly classified images: {counts})", *results], reference
        ),
    }
    if not all("lens" in r for r in results.values()):
        return tables

    def row(label: str, model: str, topk: float, lensk: float) -> list[str]:
        return [label, model, f"{topk:.3f}", f"{lensk:.3f}", f"{lensk - topk:+.3f}"]

    lens = [row(label, m, r["lens"][f"{key} topk"], r["lens"][f"{key} lens"])
            for key, label in (("saliency", "saliency"), ("IG", CHANCE_MAPS[1]))
            for m, r in results.items()]  # fmt: skip
    for k in (200, 100):
        ref = [first["reference"][f"attack (attack k {k}) {m}"] for m in ("topk", "lens")]
        lens.append(row(f"map = input, attack k {k}", "natural", *ref))
    for name in CHANCE_MAPS:
        for m in ("natural",) if name == "map = input" else tuple(results):
            lens.append(row(f"{CHANCE_LABEL}{name}", m, *results[m]["chance"][name]))
    tables["3-lens-how-much-of-the-fragility"] = _table(
        ["map", "model", "top-100 ∩", "LENS 3x3", "gained by forgiving 1-pixel shifts"], lens
    )
    return tables


def write_sections(images: int, out: Path, lens: bool = True) -> None:
    """Sections 1-3 of both shipped models (`section_jobs`) into results/sanity.json's tables,
    replacing earlier ones, and SANITY.md from its prose."""
    import json

    from experiments.pages import RESULTS, tables_page

    torch.set_num_threads(1)
    results = {name: section_jobs(name, images, out, lens) for name in CHECKPOINTS}
    path = RESULTS / "sanity.json"
    data = json.loads(path.read_text())
    data["tables"].update(section_tables(results))
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(tables_page("SANITY.md"))


# ------------------------------------------- randomisation over seeds (sections 5 and 6)
SEEDS = (0, 1, 2)
RANDOM_EXPLAINERS = (
    "saliency", "input_x_gradient", "integrated_gradients", "grad_cam", "lrp", "deeplift",
)  # fmt: skip
NAMES = {"saliency": "saliency", "input_x_gradient": "input x gradient",
         "integrated_gradients": "IG (zero baseline, 16 points)", "grad_cam": "Grad-CAM",
         "lrp": "LRP (epsilon_plus)", "deeplift": "DeepLIFT (zero baseline)"}  # fmt: skip
LINES = (("topk", "top-100 ∩"), ("spearman", "Spearman (absolute)"),
         ("spearman_signed", "Spearman signed"), ("ssim", "SSIM"))  # fmt: skip


def random_label_model(
    seed: int, epochs: int, out: Path, lr: float = 1e-3
) -> tuple[Any, dict[str, float]]:
    """The data-randomisation model of Adebayo et al. (2018): the shipped architecture trained
    with Adam at `lr`, batch 64, on the 3,500 training images with their labels permuted
    (seeded); saved under `out` and loaded from there when present. Returns the model
    and its accuracy on the permuted training labels (how much it memorised) and on the test
    split (chance: about 0.1)."""
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader, TensorDataset

    from experiments.leaderboard_methods import MODEL
    from experiments.support import quiet_trainer
    from robust_train import RobustClassifier
    from robust_train.core.runtime import predict
    from robust_train.data import MNIST5kDataModule
    from robust_train.models import MNISTConvNet, load_classifier

    data = MNIST5kDataModule(seed=0)
    data.setup()
    x, y = data.train_set.tensors
    permuted = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))]
    ckpt = out / f"random_labels_s{seed}_e{epochs}_lr{lr:g}.ckpt"
    if not ckpt.is_file():
        pl.seed_everything(seed, workers=True, verbose=False)
        loader = DataLoader(TensorDataset(x, permuted), batch_size=64, shuffle=True)
        module = RobustClassifier(
            MNISTConvNet(**MODEL), [], optimizer=lambda p: torch.optim.Adam(p, lr=lr)
        )
        trainer = quiet_trainer(max_epochs=epochs)
        trainer.fit(module, train_dataloaders=loader)
        out.mkdir(parents=True, exist_ok=True)
        trainer.save_checkpoint(ckpt)
    model = load_classifier(str(ckpt))
    xt, yt = data.test_set.tensors
    return model, {
        "train acc (permuted labels)": float((predict(model, x, 256) == permuted).float().mean()),
        "test acc": float((predict(model, xt, 256) == yt).float().mean()),
    }


def data_randomisation(
    model: Any, random_models: list[Any], x: torch.Tensor, explainer: str
) -> dict[str, list[float]]:
    """Per line (`LINES`), one mean per random-label model: the maps of `model` for its predicted
    class against the random-label model's maps for the same class (`compare_maps`, k 100; NaN
    where a map is constant, left out of the mean)."""
    from robust_train.core.runtime import predict
    from robust_train.evaluation.parts.sanity import compare_maps
    from robust_train.explain import get_explainer

    kwargs = {"n_steps": 16, "baseline": 0.0} if explainer == "integrated_gradients" else {}
    explain = get_explainer(explainer, **kwargs)
    target = predict(model, x, 256)
    clean = explain(model, x, target).detach()
    out: dict[str, list[float]] = {line: [] for line, _ in (*LINES, ("blank", ""))}
    for other in random_models:
        values = compare_maps(clean, explain(other, x, target).detach(), K)
        for line, _ in LINES:
            out[line].append(float(values[line].nanmean()))
        out["blank"].append(float(values["topk"].isnan().float().mean()))
    return out


def seeded_sanity(
    model: Any,
    x: torch.Tensor,
    y: torch.Tensor,
    explainers: tuple[str, ...] = RANDOM_EXPLAINERS,
    ig_steps: int = 16,
    store: Path | None = None,
) -> list[dict[str, Any]]:
    """The sanity part (cascading and independent curves) once per seed of `SEEDS`; with
    `store`, each seed's result is kept as `<store>_s<seed>.json` and read from there when
    present (a stopped run resumes at the seed it had not finished)."""
    from robust_train.evaluation import EvaluationSettings, evaluate_classifier

    def one(seed: int) -> dict[str, Any]:
        settings = EvaluationSettings(
            parts=("sanity",), n_samples=len(x), measure_k=K, ig_steps=ig_steps, seed=seed,
            explainers=explainers, ensemble=False,
        )  # fmt: skip
        r = evaluate_classifier(model, x, y, settings, progress=False)
        return {"measures": r["measures"], "curves": r["curves"]}

    if store is None:
        return [one(seed) for seed in SEEDS]
    return [stored_job(Path(f"{store}_s{seed}.json"), partial(one, seed)) for seed in SEEDS]


def _spread(values: list[float]) -> str:
    import statistics

    values = [v for v in values if v == v]
    if len(values) < 2:
        return f"{values[0]:.3f}" if values else "n/a"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def curve_table(
    runs: dict[str, list[dict[str, Any]]],
    kind: str,
    explainers: tuple[str, ...] = RANDOM_EXPLAINERS,
) -> dict[str, Any]:
    """One row per (explainer, model, line): the curve `kind` ("cascade" or "independent")
    point by point, mean ± standard deviation over the seeds."""
    rows, xs = [], []
    for ex in explainers:
        for name, seeds in runs.items():
            curves = [r["curves"][f"sanity/{ex}/{kind}"] for r in seeds]
            xs = curves[0]["xs"]
            for line, label in LINES:
                cells = [_spread([c[line][i] for c in curves]) for i in range(len(xs))]
                rows.append([NAMES[ex], name, label, *cells])
    head = "layers randomised from the top:" if kind == "cascade" else "layer randomised alone:"
    columns = ["explainer", "model", "measure", *[f"{head} {x:g}" for x in xs]]
    return {"columns": columns, "align": "|" + "---|" * len(columns), "rows": rows}


def data_table(models: dict[str, Any], random_models: list[Any], x: torch.Tensor) -> dict[str, Any]:
    rows = []
    for ex in RANDOM_EXPLAINERS:
        for name, model in models.items():
            values = data_randomisation(model, random_models, x, ex)
            cells = [_spread(values[line]) for line, _ in LINES]
            rows.append([NAMES[ex], name, *cells, _spread(values["blank"])])
    columns = ["explainer", "model", *(label for _, label in LINES), "constant maps (share)"]
    return {"columns": columns, "align": "|" + "---|" * len(columns), "rows": rows}


def randomisation_tables(
    images: int, epochs: int, out: Path, lr: float = 1e-3, data_only: bool = False
) -> dict[str, dict[str, Any]]:
    """Sections 5 and 6 of SANITY.md: the cascading and independent curves over `SEEDS`, and the
    data-randomisation test against one random-label model per seed (`data_only`: that test
    alone)."""
    from robust_train.models import load_classifier

    torch.set_num_threads(1)
    x, y = test_images(images)
    models = {name: load_classifier(path) for name, path in CHECKPOINTS.items()}
    trained = [random_label_model(seed, epochs, out, lr) for seed in SEEDS]
    random_models = [m for m, _ in trained]
    fits = {
        "columns": ["random-label model", "epochs", "Adam lr", *trained[0][1]],
        "align": "|---|---|---|---|---|",
        "rows": [[f"seed {s}", str(epochs), f"{lr:g}", *(f"{v:.3f}" for v in acc.values())]
                 for s, (_, acc) in zip(SEEDS, trained, strict=True)],
    }  # fmt: skip
    tables = {
        "6-random-label-models": fits,
        "6-data-randomisation": data_table(models, random_models, x),
    }
    if data_only:
        return tables
    runs = {
        name: seeded_sanity(model, x, y, store=out / "curves" / job_name(name, images))
        for name, model in models.items()
    }
    tables["5-cascade-curves"] = curve_table(runs, "cascade")
    tables["5-independent-curves"] = curve_table(runs, "independent")
    return tables


PREVIOUS = "robust, shipped before"
FLATNESS = "5-cascade-flatness"


def _mean_sd(cell: str) -> tuple[float, float]:
    """A cell of `_spread` as (mean, standard deviation); NaN where it holds no number."""
    mean, _, sd = cell.partition(" ± ")
    try:
        return float(mean), float(sd or 0.0)
    except ValueError:
        return float("nan"), float("nan")


def _verdict(natural: tuple[float, float], robust: tuple[float, float]) -> str:
    if robust[0] - robust[1] > natural[0] + natural[1]:
        return "flatter than natural"
    if robust[0] + robust[1] < natural[0] - natural[1]:
        return "steeper than natural"
    if natural[0] != natural[0] or robust[0] != robust[0]:
        return "n/a"
    return "as natural (spreads overlap)"


def flatness_table(tables: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Section 5's cascade, top-100 line, per explainer and number of layers randomised from the
    top: natural, the robust model shipped before (table "5-cascade-previous", where present)
    and the robust model shipped now, mean ± standard deviation over the seeds; robust now minus
    natural; robust now's change from one layer fewer; and whether the robust curve is flatter
    than natural's there (its mean minus its deviation above natural's mean plus natural's
    deviation), steeper (the mirror), or within the seeds' spread."""
    label = LINES[0][1]
    lines = {(r[0], r[1]): r[3:] for r in tables["5-cascade-curves"]["rows"] if r[2] == label}
    previous = {r[0]: r[3:] for r in tables.get("5-cascade-previous", {"rows": []})["rows"]
                if r[2] == label}  # fmt: skip
    rows = []
    for ex in dict.fromkeys(e for e, _ in lines):
        natural, robust = lines[(ex, "natural")], lines[(ex, "robust")]
        before = previous.get(ex, ["-"] * len(natural))
        for i in range(1, len(natural)):
            n, r = _mean_sd(natural[i]), _mean_sd(robust[i])
            step = r[0] - _mean_sd(robust[i - 1])[0]
            rows.append([ex, str(i), natural[i], before[i], robust[i], f"{r[0] - n[0]:+.3f}",
                         f"{step:+.3f}", _verdict(n, r)])  # fmt: skip
    columns = ["explainer", "layers randomised from the top", "natural", "robust, shipped before",
               "robust (shipped now)", "now - natural", "now: change from one layer fewer",
               "robust now against natural"]  # fmt: skip
    return _table(columns, rows)


def write_previous(images: int, out: Path, checkpoint: str) -> None:
    """The cascading curves of `checkpoint` (the robust model shipped before the current one), as
    section 5 measures the shipped pair (`seeded_sanity`, stored under `<out>/curves/`), into
    results/sanity.json's table "5-cascade-previous" (model `PREVIOUS`) and SANITY.md."""
    import json

    from experiments.pages import RESULTS, tables_page
    from robust_train.models import load_classifier

    torch.set_num_threads(1)
    x, y = test_images(images)
    store = out / "curves" / job_name("previous", images, checkpoint)
    runs = {PREVIOUS: seeded_sanity(load_classifier(checkpoint), x, y, store=store)}
    path = RESULTS / "sanity.json"
    data = json.loads(path.read_text())
    data["tables"]["5-cascade-previous"] = curve_table(runs, "cascade")
    data["tables"][FLATNESS] = flatness_table(data["tables"])
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(tables_page("SANITY.md"))


def write_randomisation(
    images: int, epochs: int, out: Path, lr: float = 1e-3, data_only: bool = False
) -> None:
    """Merge sections 5 and 6 into results/sanity.json and write SANITY.md from its prose."""
    import json

    from experiments.pages import RESULTS, tables_page

    path = RESULTS / "sanity.json"
    data = json.loads(path.read_text())
    data["tables"].update(randomisation_tables(images, epochs, out, lr, data_only))
    data["tables"][FLATNESS] = flatness_table(data["tables"])
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(tables_page("SANITY.md"))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--skip-lens", action="store_true", help="leave out section 3 (slow)")
    parser.add_argument(
        "--randomisation", default=None, metavar="OUT",
        help="only sections 5-6 (curves over 3 seeds, data randomisation; random-label models "
        "kept in OUT), written into results/sanity.json and SANITY.md",
    )  # fmt: skip
    parser.add_argument(
        "--chance", action="store_true",
        help="only the random-map rows of sections 2 and 3, written into results/sanity.json "
        "and SANITY.md (no attack)",
    )  # fmt: skip
    parser.add_argument(
        "--sections", default=None, metavar="OUT",
        help="sections 1-3 of both shipped models as stored jobs in OUT (a stopped run resumes), "
        "written into results/sanity.json and SANITY.md",
    )  # fmt: skip
    parser.add_argument(
        "--previous", default=None, metavar="CKPT",
        help="with --randomisation: only the cascading curves of CKPT, the robust model shipped "
        "before, into section 5's comparison table",
    )  # fmt: skip
    parser.add_argument("--epochs", type=int, default=10, help="of the random-label models")
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam's, random-label models")
    parser.add_argument(
        "--data-only", action="store_true",
        help="with --randomisation: section 6 only, section 5's tables kept",
    )  # fmt: skip
    return parser


def print_sections(images: int, lens: bool = True) -> None:
    """Sections 1-3 of each shipped model on the first `images` test images, printed."""
    from robust_train.models import load_classifier

    torch.set_num_threads(1)
    x, y = test_images(images)
    for name, path in CHECKPOINTS.items():
        model = load_classifier(path)
        start = time.perf_counter()
        print(f"## {name} ({path}), {len(x)} test images")
        for key, value in sanity_rows(model, x, y).items():
            if key.startswith("sanity/"):
                print(f"{key}: {value:.3f}")
        for key, value in reference_rows(model, x, y).items():
            print(f"map = input, {key}: {value:.3f}")
        if lens:
            for key, value in lens_rows(model, x, y).items():
                print(f"top-k attack, {key}: {value:.3f}")
        print(f"({time.perf_counter() - start:.0f} s)")


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.images < 1 or args.epochs < 1:
        raise SystemExit(f"--images and --epochs must be >= 1, got {args.images}, {args.epochs}")
    if args.previous and not args.randomisation:
        parser.error(f"--previous {args.previous!r} needs --randomisation OUT (its run folder)")
    if args.previous and not Path(args.previous).is_file():
        parser.error(f"--previous {args.previous!r}: no such checkpoint file")
    if args.chance:
        write_chance(args.images)
        return
    if args.sections:
        write_sections(args.images, Path(args.sections), not args.skip_lens)
        return
    if args.randomisation and args.previous:
        write_previous(args.images, Path(args.randomisation), args.previous)
        return
    if args.randomisation:
        write_randomisation(
            args.images, args.epochs, Path(args.randomisation), args.lr, args.data_only
        )
        return
    print_sections(args.images, not args.skip_lens)


if __name__ == "__main__":
    main()
