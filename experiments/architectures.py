"""One robustness recipe on several architectures: natural vs robust on MNIST-5k, every map.

The driver of experiments/ARCHITECTURES.md. A recipe is a fine-tune config (`--recipe`, a file or
a shipped config name): its penalties, epochs, optimizer, learning-rate schedule, batch size and
Softplus beta are kept as they are, and only `model.model` changes (`ARCHS`): the project's
MNISTConvNet (the architecture the recipe was chosen on), a torchvision ResNet-18 with a
small-image stem (`robust_train.models.SmallInputResNet`) and a VGG-style network with BatchNorm
(`robust_train.models.VGGBN`). A penalty option that names a layer the architecture does not
have (Grad-CAM's `layer`) is dropped, so that penalty takes the explainer's default layer on the
new architecture, the layer the evaluation measures.

For each architecture and seed: a natural fit from scratch (`--natural-config`, by default the
shipped baseline config: 6 epochs, Adam 3e-3, batch 64, on the 3,500 train images; `--natural
-epochs` overrides the epochs) and the recipe's fine-tune from it. Both record their CPU time
(`time.process_time` of the fit, one thread); cost x natural is (natural + fine-tune) / natural,
the whole recipe over the natural fit it starts from. Each model is then evaluated on the test
split by the leaderboard's protocol, through the evaluation engine
(`experiments.leaderboard.attack_settings`, `robust_train.evaluation`): accuracy on all 1,000
images; on the first `--images` correctly classified ones, for each reported explainer
(saliency, IG with 10 points and a zero baseline, Grad-CAM at its default layer, LRP with the
default composite, DeepLIFT), the top-k attack (attack k 200, reported k 100, L_inf 0.3, 50 sign
steps of 0.015), noise of the same budget and the fidelity estimate (AUC_LIF - AUC_MIF) of the
clean maps.

Every job writes `--out`/jobs/<id>.json; a second run skips the jobs that have one made with the
same settings (recipe, epochs, measure version, images) and runs the others again, so a stopped
run resumes. `report` writes experiments/ARCHITECTURES.md from `--out` (the text below the
hand-written marker is kept).

A recipe variant changes options of the recipe's penalties (`--penalty-option KEY=VALUE`, e.g.
`model_mode=eval`, or `teacher=natural`: each job's natural model); its own `--out` folder keeps
it apart. A robust fit stores the options and its recipe file's text (and SHA-256), so a variant
keeps its label when the file changes later. `variants` puts the Grad-CAM columns of several run
folders side by side in one table of the page, with "map = input" and a random map under the
same attack; `modes` measures, on given checkpoints, Grad-CAM's concentration and the maps'
stability under noise with BatchNorm in train and in eval mode.

Two options of `run` that leave a fit's weights as they are: `--curve-every N` keeps each robust
fit's clean loss and penalty at every step and its validation accuracy in eval mode every N
steps (`curves` puts them in a table of the page), and `--recompute-bn` replaces each robust
fit's BatchNorm running statistics after the fit by those of the training images; a fit made
with it is stored apart (its settings say so) and named in the `variants` table.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python -m experiments.architectures run \\
        --recipe configs/mnist5k_finetune_ixg_softplus.yaml --out runs/architectures
    .venv/bin/python -m experiments.architectures report --out runs/architectures
    .venv/bin/python -m experiments.architectures run --quick --out /tmp/arch   # smoke, minutes
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ARCHS: dict[str, dict[str, Any]] = {
    "mnist_cnn": {
        "class_path": "robust_train.models.MNISTConvNet",
        "init_args": {"channels": [16, 32], "hidden": 128},
    },
    "resnet18": {
        "class_path": "robust_train.models.SmallInputResNet",
        "init_args": {"name": "resnet18", "num_classes": 10, "in_channels": 1, "stem": "3x3_pool"},
    },
    "vgg_bn": {"class_path": "robust_train.models.VGGBN", "init_args": {}},
}
# Grad-CAM's layer where its default says nothing: the small-input ResNet-18's last block
# (`backbone.layer4`) is 2 x 2 on 28 x 28 images (a top-100 set of the upsampled map is a choice
# among four cells); `backbone.layer2` is 7 x 7, the side of the other two architectures' default
# layers. The recipe's Grad-CAM term and the evaluation both take it.
GRAD_CAM_LAYERS: dict[str, str] = {"resnet18": "backbone.layer2"}
MAPS = ("saliency", "grad_cam", "deeplift", "lrp", "integrated_gradients")  # cheapest first
NATURAL_CONFIG = "mnist5k_baseline.yaml"
MARKER = "<!-- written by hand below this line; kept when `report` rewrites the tables -->"


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What a fit config trains with, less the model: penalties (class_path / init_args),
    epochs, Adam's learning rate, a per-step cosine (or none), batch size, Softplus beta, and
    whether it fine-tunes (`model.init_checkpoint` given) or trains from scratch."""

    source: str
    penalties: tuple[dict[str, Any], ...]
    epochs: int
    lr: float
    cosine: bool
    batch_size: int
    softplus_beta: float | None
    finetune: bool

    def record(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self)))


def recipe_file(path: str) -> Path:
    """The fit config `path` names (a path or a shipped config name).

    Raises:
        SystemExit: no such file or shipped config (named in the message).
    """
    from robust_train.core.resources import resolve_file

    file = Path(resolve_file(path, "configs", what="`--recipe`", announce=None))
    if not file.is_file():
        raise SystemExit(f"`--recipe`/`--natural-config` {path!r}: no such file or shipped config")
    return file


def read_recipe(path: str, epochs: int | None = None) -> Recipe:
    """The `Recipe` of a fit config (a path or a shipped config name); `epochs` overrides
    `trainer.max_epochs`. Refuses an optimizer other than Adam and a scheduler other than a
    cosine (the benchmark rebuilds those two)."""
    file = recipe_file(path)
    return parse_recipe(file.read_text(), file.name, epochs)


def parse_recipe(text: str, source: str, epochs: int | None = None) -> Recipe:
    """The `Recipe` of a fit config's YAML `text` (`source`: its file name, for messages and
    the record); `epochs` overrides `trainer.max_epochs`.

    Raises:
        SystemExit: an optimizer other than Adam or a scheduler other than a cosine.
    """
    import yaml

    cfg = yaml.safe_load(text)
    model, trainer = cfg.get("model", {}), cfg.get("trainer", {})
    opt = model.get("optimizer", {"class_path": "torch.optim.Adam", "init_args": {"lr": 1e-3}})
    sched = model.get("lr_scheduler")
    if not str(opt.get("class_path", "")).endswith("Adam"):
        raise SystemExit(f"{source}: the benchmark rebuilds Adam only, got {opt.get('class_path')}")
    if sched and not str(sched.get("class_path", "")).endswith("CosineAnnealingLR"):
        raise SystemExit(f"{source}: the benchmark rebuilds a cosine only, got {sched}")
    return Recipe(
        source=source,
        penalties=tuple(model.get("penalties") or ()),
        epochs=int(epochs or trainer.get("max_epochs", 1)),
        lr=float(opt.get("init_args", {}).get("lr", 1e-3)),
        cosine=bool(sched),
        batch_size=int(cfg.get("data", {}).get("init_args", {}).get("batch_size", 64)),
        softplus_beta=model.get("softplus_beta"),
        finetune=model.get("init_checkpoint") is not None,
    )


def recipe_record(file: Path) -> dict[str, str]:
    """What a robust fit stores of its recipe file: its name, text and SHA-256, so that its
    penalty options can be told apart from the recipe's own after the file changes."""
    import hashlib

    text = file.read_text()
    return {"name": file.name, "sha256": hashlib.sha256(text.encode()).hexdigest(), "text": text}


NATURAL_TEACHER = "natural"  # `--penalty-option teacher=natural`: the job's natural model


def parse_options(pairs: list[str] | None) -> dict[str, Any]:
    """`--penalty-option` pairs "KEY=VALUE" as a dict, each VALUE read as YAML ("eval" a
    string, "2" an int, "[1, 1, 2]" a list).

    Raises:
        ValueError: a pair without "=" or with an empty key (named in the message).

    Example:
        >>> parse_options(["model_mode=eval", "map_powers=[1, 1, 2]"])
        {'model_mode': 'eval', 'map_powers': [1, 1, 2]}
    """
    import yaml

    out: dict[str, Any] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().isidentifier():
            raise ValueError(f"`--penalty-option` takes KEY=VALUE, got {pair!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def with_options(recipe: Recipe, options: Mapping[str, Any]) -> Recipe:
    """`recipe` with `options` set in the init_args of every one of its penalties (the recipe
    variants of the Grad-CAM diagnosis); unchanged when `options` is empty."""
    if not options:
        return recipe
    penalties = tuple(
        {**spec, "init_args": {**spec.get("init_args", {}), **options}} for spec in recipe.penalties
    )
    return dataclasses.replace(recipe, penalties=penalties)


def adapt_layers(spec: Any, modules: set[str], dropped: list[str], layer: str | None = None) -> Any:
    """`spec` (a penalty's init_args, nested) with every `layer` option that names no module of
    the architecture (`modules`) replaced by `layer` (the architecture's Grad-CAM layer,
    `GRAD_CAM_LAYERS`) or, without one, removed, so the explainer takes its default layer there;
    the replaced or removed names go to `dropped`. A multi-map term (`explainers`) with
    Grad-CAM and no `layer` gets `layer`, as its Grad-CAM would otherwise take the default."""
    if isinstance(spec, Mapping):
        out = {}
        if layer is not None and "grad_cam" in spec.get("explainers", ()) and "layer" not in spec:
            out["layer"] = layer
        for key, value in spec.items():
            if key == "layer" and isinstance(value, str) and value not in modules:
                dropped.append(value)
                if layer is not None:
                    out[key] = layer
                continue
            out[key] = adapt_layers(value, modules, dropped, layer)
        return out
    if isinstance(spec, list):
        return [adapt_layers(v, modules, dropped, layer) for v in spec]
    return spec


def build_penalties(
    recipe: Recipe,
    model: Any,
    seed: int,
    layer: str | None = None,
    teacher: str | None = None,
) -> tuple[list[Any], list[str]]:
    """The recipe's penalty terms for `model` (its seed replaced by the job's; a `teacher` of
    "natural" replaced by `teacher`, the natural model of the job), and the layer names that
    had to be replaced by `layer` or dropped (`adapt_layers`)."""
    from robust_train.core.trust import resolve_class
    from robust_train.regularizers import PenaltyTerm

    modules = {name for name, _ in model.named_modules() if name}
    terms, dropped = [], []
    for spec in recipe.penalties:
        cls = resolve_class(spec["class_path"], PenaltyTerm, f"a penalty of {recipe.source}")
        args = adapt_layers(copy.deepcopy(spec.get("init_args", {})), modules, dropped, layer)
        if "seed" in args:
            args["seed"] = seed
        if args.get("teacher") == NATURAL_TEACHER:
            args["teacher"] = teacher
        terms.append(cls(**args))
    return terms, dropped


def build_arch(arch: str) -> Any:
    from robust_train.models import build_model

    return build_model(copy.deepcopy(ARCHS[arch]))


def curve_callback(every: int) -> Any:
    """A Lightning callback that keeps a fit's training curve in its `curve` dict: every
    step's logged training parts (`train/ce`, `train/penalty/NAME`, `train/loss`) and the
    learning rate after it, and the accuracy on MNIST-5k's 500 validation images in eval mode
    (running statistics; the model's mode restored after) before the first step, every `every`
    steps and after the last. The evaluations draw no random numbers, so the fit's weights are
    those of a fit without it."""
    import pytorch_lightning as pl
    import torch

    class Curve(pl.Callback):
        def __init__(self) -> None:
            self.curve: dict[str, list[float]] = {"step": [], "lr": [], "val_step": [],
                                                  "val_acc": []}  # fmt: skip

        def val_acc(self, trainer: Any, module: Any) -> None:
            x, y = trainer.datamodule.val_set.tensors
            training = module.model.training
            module.model.eval()
            with torch.no_grad():
                pred = torch.cat(
                    [module.model(x[i : i + 250]).argmax(1) for i in range(0, len(x), 250)]
                )
            module.model.train(training)
            self.curve["val_step"].append(trainer.global_step)
            self.curve["val_acc"].append(float(pred.eq(y).float().mean()))

        def on_train_start(self, trainer: Any, module: Any) -> None:
            self.val_acc(trainer, module)

        def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
            self.curve["step"].append(trainer.global_step)
            self.curve["lr"].append(trainer.optimizers[0].param_groups[0]["lr"])
            for key, value in trainer.callback_metrics.items():
                if key.startswith("train/") and key.endswith("_step"):
                    self.curve.setdefault(key[: -len("_step")], []).append(float(value))
            if trainer.global_step % every == 0:
                self.val_acc(trainer, module)

        def on_train_end(self, trainer: Any, module: Any) -> None:
            if not self.curve["val_step"] or self.curve["val_step"][-1] != trainer.global_step:
                self.val_acc(trainer, module)

    return Curve()


def fit(
    arch: str,
    recipe: Recipe,
    seed: int,
    init: str | None,
    ckpt: Path,
    limit: int | None,
    curve_every: int = 0,
    recompute_bn: bool = False,
    bn_every: int = 0,
) -> dict[str, Any]:
    """Train `arch` with `recipe` (from `init` when given, which is also the teacher of a
    penalty with `teacher: natural`) on MNIST-5k's train split; save `ckpt`; the fit's CPU and
    wall seconds, its epochs' CPU seconds and accuracies; with `curve_every` > 0 also its
    training curve (`curve_callback`; its validation passes count in the CPU seconds); with
    `recompute_bn`, every BatchNorm's running statistics recomputed after the fit on the
    3,500 training images (`recompute_statistics`), their CPU seconds stored apart; with
    `bn_every` > 0, `BatchNormRecalibration` (16 training batches) in the fit, every `bn_every`
    steps and before each validation (its CPU seconds count in the fit's)."""
    import pytorch_lightning as pl
    import torch

    from experiments.cheaper_robustness import EpochClock
    from experiments.support import quiet_trainer
    from robust_train import RobustClassifier
    from robust_train.data import MNIST5kDataModule

    torch.set_num_threads(1)
    pl.seed_everything(seed, workers=True, verbose=False)
    model = build_arch(arch)
    terms, dropped = build_penalties(recipe, model, seed, GRAD_CAM_LAYERS.get(arch), init)
    batches = limit or math.ceil(3500 / recipe.batch_size)
    steps = recipe.epochs * batches
    scheduler = None
    if recipe.cosine:
        scheduler = lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=steps)  # noqa: E731
    module = RobustClassifier(
        model,
        terms,
        optimizer=lambda p: torch.optim.Adam(p, lr=recipe.lr),
        lr_scheduler=scheduler,
        lr_scheduler_interval="step",
        init_checkpoint=init,
        softplus_beta=recipe.softplus_beta,
    )
    clock = EpochClock()
    curve = curve_callback(curve_every) if curve_every > 0 else None
    callbacks = [clock, *extra_callbacks(bn_every), *([curve] if curve is not None else [])]
    trainer = quiet_trainer(
        max_epochs=recipe.epochs, limit_train_batches=limit, callbacks=callbacks
    )
    cpu, wall = time.process_time(), time.perf_counter()
    data = MNIST5kDataModule(batch_size=recipe.batch_size, seed=0)
    trainer.fit(module, datamodule=data)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    recomputed = time.process_time()
    if recompute_bn:
        recompute_statistics(module.model, data.train_set.tensors[0])
    recomputed = time.process_time() - recomputed
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    trainer.save_checkpoint(ckpt)
    out = {
        "cpu_s": cpu,
        "wall_s": wall,
        "epoch_cpu_s": list(clock.seconds),
        "dropped_layers": sorted(set(dropped)),
        "terms": [repr(t) for t in terms],
        "ckpt": str(ckpt),
    }
    if curve is not None:
        out["curve"] = curve.curve
    if recompute_bn:
        out["bn_recomputed_cpu_s"] = recomputed
    if bn_every > 0:
        out["bn_every"] = bn_every
    return out


def extra_callbacks(bn_every: int) -> list[Any]:
    """`BatchNormRecalibration` (16 training batches, every `bn_every` steps) when `bn_every`
    > 0; placed before the curve's callback, so that its accuracies see the step's statistics."""
    if bn_every <= 0:
        return []
    from robust_train.callbacks import BatchNormRecalibration

    return [BatchNormRecalibration(n_batches=16, every_n_steps=bn_every)]


def recompute_statistics(model: Any, images: Any) -> None:
    """Replace the running statistics of every BatchNorm of `model` with those of `images`
    (cumulative, batches of 64, the network in training mode without gradients; weights
    unchanged); `model` is left in the mode it was in."""
    from experiments.cluttered_diagnosis import recomputed_statistics

    training = model.training
    model.load_state_dict(recomputed_statistics(model, images).state_dict())
    model.train(training)


def layer_info(model: Any, layer: str | None = None) -> dict[str, Any]:
    """Grad-CAM's layer on `model` (`layer`, or its default) and the side of its output for a
    28x28 image."""
    import torch

    from robust_train.explain.layers import capture_output, find_layer

    name, module = find_layer(model, layer, caller="grad_cam")
    with torch.no_grad(), capture_output(module, name, caller="grad_cam") as seen:
        model(torch.zeros(1, 1, 28, 28))
    return {"grad_cam_layer": name, "grad_cam_side": list(seen.outputs[0].shape[-2:])}


def evaluate(
    ckpt: str, explainer: str, n_images: int, plan: Any, layer: str | None = None
) -> dict[str, Any]:
    """Accuracy on the test split and, on its first `n_images` correctly classified images, the
    leaderboard's test attacks and noise on `explainer`'s maps, with their fidelity and the same
    attacks on "map = input"; Grad-CAM at `layer` (None: its default layer)."""
    from experiments.leaderboard import _measures, attack_settings, test_split
    from robust_train.core.runtime import predict
    from robust_train.explain import get_explainer
    from robust_train.models import load_classifier

    model = load_classifier(ckpt)
    x, y = test_split()
    correct = (predict(model, x, 256) == y).nonzero().squeeze(1)
    keep = correct[:n_images]
    chosen: Any = explainer
    if explainer == "grad_cam" and layer is not None:
        chosen = get_explainer("grad_cam", layer=layer)
    settings = attack_settings(plan, (chosen,), "test", len(keep))
    settings = dataclasses.replace(
        settings,
        parts=(*settings.parts, "fidelity"),
        fidelity_steps=plan.fidelity_steps,
        input_reference=True,  # "map = input" under the same attack, beside every map
    )
    out: dict[str, Any] = {"accuracy": float(len(correct) / len(y)), "n_images": len(keep)}
    out.update(_measures(model, x[keep], y[keep], settings))
    out.update(layer_info(model, layer))
    return out


# ------------------------------------------------------------------------------------ jobs
@dataclasses.dataclass(frozen=True)
class Job:
    """A fit ("natural" or "robust") or an eval (one explainer of one of them) of `arch`, seed."""

    __test__ = False

    kind: str  # "fit" or "eval"
    arch: str
    model: str  # "natural" or "robust"
    seed: int
    explainer: str | None = None

    @property
    def id(self) -> str:
        tail = f"_{self.explainer}" if self.explainer else ""
        return f"{self.kind}_{self.arch}_{self.model}_s{self.seed}{tail}"


class Run:
    """The run folder: recipes, sizes, the job files, and the jobs in the order they run."""

    def __init__(self, args: argparse.Namespace) -> None:
        from experiments.leaderboard_methods import MEASURE_VERSION, Plan, quick_plan

        self.args, self.out = args, Path(args.out)
        self.plan = quick_plan() if args.quick else Plan()
        self.limit = 2 if args.quick else None
        epochs = 1 if args.quick else None
        self.options: dict[str, Any] = dict(getattr(args, "options", {}))
        self.recipes = {
            "natural": read_recipe(args.natural_config, epochs or args.natural_epochs),
            "robust": with_options(read_recipe(args.recipe, epochs), self.options),
        }
        self.recipe_file = recipe_record(recipe_file(args.recipe))
        if self.recipes["natural"].finetune or not self.recipes["robust"].finetune:
            raise SystemExit(
                "`--natural-config` must train from scratch and `--recipe` fine-tune (its "
                "model.init_checkpoint set): the robust model starts from the natural one"
            )
        self.images = self.plan.test_images if args.quick else args.images
        self.measure_version = MEASURE_VERSION
        (self.out / "jobs").mkdir(parents=True, exist_ok=True)

    def settings(self, job: Job) -> dict[str, Any]:
        """What a stored result must have been made with to be reused."""
        out: dict[str, Any] = {"arch": ARCHS[job.arch], "quick": self.args.quick}
        penalised = job.kind == "fit" and job.model == "robust"
        if job.arch in GRAD_CAM_LAYERS and (penalised or job.explainer == "grad_cam"):
            out["grad_cam_layer"] = GRAD_CAM_LAYERS[job.arch]
        out["natural"] = self.recipes["natural"].record()
        if job.model == "robust":
            out["robust"] = self.recipes["robust"].record()
            if getattr(self.args, "recompute_bn", False):  # absent otherwise: older results stand
                out["recompute_bn"] = True
            if getattr(self.args, "bn_every", 0):
                out["bn_every"] = self.args.bn_every
        if job.kind == "eval":
            out.update(images=self.images, measure_version=self.measure_version)
        return json.loads(json.dumps(out))

    def path(self, job: Job) -> Path:
        return self.out / "jobs" / f"{job.id}.json"

    def stored(self, job: Job) -> dict[str, Any] | None:
        path = self.path(job)
        if not path.is_file():
            return None
        result = json.loads(path.read_text())
        return result if result.get("settings") == self.settings(job) else None

    def jobs(self) -> list[Job]:
        """Every fit first (natural, then robust, seed by seed), then the evaluations, the
        cheaper explainers' of every model first."""
        out, models = [], self.args.models
        for seed in self.args.seeds:
            for arch in self.args.archs:
                out += [Job("fit", arch, m, seed) for m in models]
        for explainer in self.args.maps:
            for seed in self.args.seeds:
                for arch in self.args.archs:
                    out += [Job("eval", arch, m, seed, explainer) for m in models]
        return out

    def execute(self, job: Job) -> dict[str, Any]:
        ckpt = self.out / "ckpt" / f"{job.arch}_{job.model}_s{job.seed}.ckpt"
        if job.kind == "fit":
            init = None
            if job.model == "robust":
                natural = self.stored(Job("fit", job.arch, "natural", job.seed))
                if natural is None:
                    raise RuntimeError(f"{job.id}: its natural model has not been trained")
                init = natural["ckpt"]
            recipe = self.recipes[job.model]
            extra: dict[str, Any] = {}  # the diagnosis options, robust fits only
            if job.model == "robust" and getattr(self.args, "curve_every", 0):
                extra["curve_every"] = self.args.curve_every
            if job.model == "robust" and getattr(self.args, "recompute_bn", False):
                extra["recompute_bn"] = True
            if job.model == "robust" and getattr(self.args, "bn_every", 0):
                extra["bn_every"] = self.args.bn_every
            result = fit(job.arch, recipe, job.seed, init, ckpt, self.limit, **extra)
            if job.model == "robust":  # what the fit ran with, whatever the files say later
                result.update(penalty_options=self.options, recipe_file=self.recipe_file)
            return result
        fitted = self.stored(Job("fit", job.arch, job.model, job.seed))
        if fitted is None or not Path(fitted["ckpt"]).is_file():
            raise RuntimeError(f"{job.id}: the model has not been trained")
        assert job.explainer is not None
        layer = GRAD_CAM_LAYERS.get(job.arch)
        return evaluate(fitted["ckpt"], job.explainer, self.images, self.plan, layer)

    def run(self) -> int:
        """Run every job that has no stored result; stop starting jobs after --budget-min."""
        deadline, ran, failed = time.time() + 60 * self.args.budget_min, 0, 0
        for job in self.jobs():
            if self.stored(job) is not None:
                continue
            if time.time() > deadline:
                print(f"budget spent: {job.id} and later jobs not run", flush=True)
                break
            start = time.perf_counter()
            try:
                result = self.execute(job)
            except RuntimeError as err:
                print(f"{job.id} skipped: {err}", flush=True)
                failed += 1
                continue
            result = {**dataclasses.asdict(job), "id": job.id, **result}
            result["job_wall_s"] = time.perf_counter() - start
            result["settings"] = self.settings(job)
            self.path(job).write_text(json.dumps(result, default=str))
            ran += 1
            print(f"{job.id} done in {result['job_wall_s']:.0f} s", flush=True)
        print(f"{ran} jobs run, {failed} skipped", flush=True)
        return 0


# ---------------------------------------------------------------------------------- report
SHORT = {"saliency": "sal", "integrated_gradients": "IG", "grad_cam": "Grad-CAM", "lrp": "LRP",
         "deeplift": "DeepLIFT"}  # fmt: skip
REPORT_MAPS = ("saliency", "integrated_gradients", "grad_cam", "lrp", "deeplift")


def load_jobs(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((out / "jobs").glob("*.json"))]


def _values(jobs: list[dict[str, Any]], arch: str, model: str, key: str, **match: Any) -> list:
    rows = [j for j in jobs if j["arch"] == arch and j["model"] == model]
    rows = [j for j in rows if all(j.get(k) == v for k, v in match.items())]
    vals = [j.get(key) for j in rows]
    return [float(v) for v in vals if isinstance(v, (int, float)) and math.isfinite(v)]


def cell(vals: list[float], n_seeds: int, digits: int = 3) -> str:
    """mean ± sd over seeds ("(k of n)" when some seeds are missing; "not run" when none)."""
    if not vals:
        return "not run"
    mean = sum(vals) / len(vals)
    if len(vals) == 1:
        text = f"{mean:.{digits}f}"
    else:
        sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
        text = f"{mean:.{digits}f} ± {sd:.{digits}f}"
    return text if len(vals) == n_seeds else f"{text} ({len(vals)} of {n_seeds})"


def _accuracy(jobs: list[dict[str, Any]], arch: str, model: str) -> list[float]:
    """Test accuracy, one value per seed (every eval job of a seed records the same one)."""
    by_seed: dict[Any, float] = {}
    for j in jobs:
        if j["arch"] == arch and j["model"] == model and j.get("kind") == "eval":
            v = j.get("accuracy")
            if isinstance(v, (int, float)) and math.isfinite(v):
                by_seed.setdefault(j.get("seed"), float(v))
    return list(by_seed.values())


def _eval_key(jobs: list[dict[str, Any]], arch: str, model: str, ex: str, key: str) -> list:
    return _values(jobs, arch, model, key, kind="eval", explainer=ex)


def attack_table(jobs: list[dict[str, Any]], archs: list[str], n: int) -> list[str]:
    head = ["architecture", "model", "test acc"]
    for ex in REPORT_MAPS:
        head += [f"{SHORT[ex]} ∩ attack", f"{SHORT[ex]} noise"]
    head.append("map = input ∩ attack")  # the same top-k attack on the image itself
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arch in archs:
        for model in ("natural", "robust"):
            row = [arch, model, cell(_accuracy(jobs, arch, model), n)]
            for ex in REPORT_MAPS:
                for obj in ("topk", "random_sign"):
                    key = f"attack/{ex}/{obj}/topk_intersection"
                    row.append(cell(_eval_key(jobs, arch, model, ex, key), n))
            mine = [j for j in jobs if j["arch"] == arch and j["model"] == model]
            row.append(cell(_per_seed(mine, None, VARIANT_KEYS["map = input ∩ attack"][1]), n))
            lines.append("| " + " | ".join(row) + " |")
    return lines


def fidelity_table(jobs: list[dict[str, Any]], archs: list[str], n: int) -> list[str]:
    head = ["architecture", "model", "Grad-CAM layer (side)"]
    head += [f"fidelity {SHORT[ex]}" for ex in REPORT_MAPS]
    head += [f"{SHORT[ex]} unmeasured" for ex in ("grad_cam", "lrp")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arch in archs:
        for model in ("natural", "robust"):
            layer = [
                j
                for j in jobs
                if j["arch"] == arch
                and j.get("explainer") == "grad_cam"
                and j.get("grad_cam_layer")
            ]
            where = (
                f"`{layer[0]['grad_cam_layer']}` ({layer[0]['grad_cam_side'][0]})" if layer else "-"
            )
            row = [arch, model, where]
            for ex in REPORT_MAPS:
                row.append(cell(_eval_key(jobs, arch, model, ex, f"fidelity/{ex}/fidelity"), n))
            for ex in ("grad_cam", "lrp"):
                key = f"attack/{ex}/topk/n_unmeasured"
                row.append(cell(_eval_key(jobs, arch, model, ex, key), n, 1))
            lines.append("| " + " | ".join(row) + " |")
    return lines


def cost_table(jobs: list[dict[str, Any]], archs: list[str], n: int) -> list[str]:
    lines = [
        "| architecture | natural fit CPU s | natural epoch CPU s | fine-tune CPU s | "
        "fine-tune epoch CPU s | cost × natural |",
        "|---|---|---|---|---|---|",
    ]
    for arch in archs:
        nat = {j["seed"]: j for j in jobs if j["arch"] == arch and j["id"].startswith("fit_")
               and j["model"] == "natural"}  # fmt: skip
        rob = {j["seed"]: j for j in jobs if j["arch"] == arch and j["id"].startswith("fit_")
               and j["model"] == "robust"}  # fmt: skip
        seeds = sorted(set(nat) & set(rob))
        ratio = [(nat[s]["cpu_s"] + rob[s]["cpu_s"]) / nat[s]["cpu_s"] for s in seeds]
        n_ep = [sum(nat[s]["epoch_cpu_s"]) / len(nat[s]["epoch_cpu_s"]) for s in nat]
        r_ep = [sum(rob[s]["epoch_cpu_s"]) / len(rob[s]["epoch_cpu_s"]) for s in rob]
        lines.append(
            f"| {arch} | {cell([nat[s]['cpu_s'] for s in nat], n, 1)} | {cell(n_ep, n, 1)} | "
            f"{cell([rob[s]['cpu_s'] for s in rob], n, 1)} | {cell(r_ep, n, 1)} | "
            f"{cell(ratio, n, 2)} |"
        )
    return lines


def _intro(jobs: list[dict[str, Any]], out: Path, command: str, archs: list[str]) -> list[str]:
    """The page's opening: the command, the two recipes and the protocol."""
    fits = [j for j in jobs if j["kind"] == "fit"]
    rob = next((j["settings"]["robust"] for j in fits if "robust" in j["settings"]), {})
    nat = next((j["settings"]["natural"] for j in fits), {})
    dropped = sorted({d for j in fits for d in j.get("dropped_layers", [])})
    ref = _values(jobs, archs[0], "natural", "attack/input_reference/topk/topk_intersection")
    n_images = next((j.get("n_images") for j in jobs if j["kind"] == "eval"), "?")
    cosine = " with a per-step cosine" if rob.get("cosine") else ""
    layers = (
        f" except the layer names {dropped}, which the new architectures lack (their "
        "explainers take their default layer)"
        if dropped
        else ""
    )
    reference = (
        f' "Map = input" keeps {sum(ref) / len(ref):.3f} of its top-100 under the saliency '
        "group's attack (the leaderboard's reference)."
        if ref
        else ""
    )
    return [
        "# One recipe, three architectures (MNIST-5k)",
        "",
        f"Command: `{command}`; tables: `python -m experiments.architectures report --out {out}`.",
        "",
        f"Natural: `{nat.get('source')}` ({nat.get('epochs')} epochs, Adam {nat.get('lr')}, "
        f"batch {nat.get('batch_size')}, from scratch). Robust: `{rob.get('source')}` "
        f"({rob.get('epochs')} epochs from the natural model of the same seed, Adam "
        f"{rob.get('lr')}{cosine}, Softplus beta {rob.get('softplus_beta')}); its penalties "
        f"unchanged{layers}.",
        "",
        "Mean ± sd over the seeds. Test acc: all 1,000 test images. Attack columns: the first "
        f"{n_images} correctly classified test images of each model, the leaderboard's test "
        "attack (attack k 200, reported k 100, L_inf 0.3, 50 sign steps of 0.015) aimed at "
        "that explainer's maps, and noise of the same budget "
        "(`experiments.leaderboard.attack_settings`, run by `robust_train.evaluation`). IG: 10 "
        "points, zero baseline; Grad-CAM at its default layer; LRP: the default composite; "
        f"DeepLIFT: zero baseline.{reference}",
        "",
    ]


def report(out: Path, md: Path, command: str) -> None:
    """Write the tables of the run folder `out` into `md`, keeping its hand-written part."""
    jobs = load_jobs(out)
    archs = [a for a in ARCHS if any(j["arch"] == a for j in jobs)]
    n = max((j["seed"] for j in jobs), default=0) + 1
    text = [
        *_intro(jobs, out, command, archs),
        *attack_table(jobs, archs, n),
        "",
        "Fidelity: AUC_LIF - AUC_MIF of the clean maps (mean fill; higher is more faithful). "
        "Unmeasured: images of the attack with a constant clean map or no attack direction.",
        "",
        *fidelity_table(jobs, archs, n),
        "",
        "Cost: CPU seconds of the fits (one thread, `time.process_time`), natural and fine-tune "
        "of the same seed one after the other in one process; cost × natural = (natural + "
        "fine-tune) / natural.",
        "",
        *cost_table(jobs, archs, n),
        "",
    ]
    from experiments.pages import HERE, page_text, store_page

    page = md.name if md.resolve().parent == HERE else None
    old = page_text(page) if page else (md.read_text() if md.is_file() else "")
    kept = old[old.index(MARKER) :] if MARKER in old else MARKER + "\n"
    if page:  # a generated page: keep it as its prose and results
        store_page(page, "\n".join(text) + "\n" + kept)
    else:
        md.write_text("\n".join(text) + "\n" + kept)


# ------------------------------------------------------------------------- recipe variants
VARIANT_COLUMNS = (
    "architecture", "model", "penalty options", "seeds", "test acc", "Grad-CAM ∩ attack",
    "Grad-CAM noise", "fidelity Grad-CAM", "sal ∩ attack", "map = input ∩ attack",
    "random map ∩ attack",
)  # fmt: skip
# column -> (explainer of the eval job, its key); "map = input" from any eval job of the model
VARIANT_KEYS = {
    "Grad-CAM ∩ attack": ("grad_cam", "attack/grad_cam/topk/topk_intersection"),
    "Grad-CAM noise": ("grad_cam", "attack/grad_cam/random_sign/topk_intersection"),
    "fidelity Grad-CAM": ("grad_cam", "fidelity/grad_cam/fidelity"),
    "sal ∩ attack": ("saliency", "attack/saliency/topk/topk_intersection"),
    "map = input ∩ attack": (None, "attack/input_reference/topk/topk_intersection"),
    "random map ∩ attack": ("grad_cam", "fragility/grad_cam/random_topk"),
}


def penalty_options(fit_job: Mapping[str, Any], recipe: str | None = None) -> dict[str, Any] | None:
    """The options a robust fit's penalties had beyond its recipe file's (`--penalty-option`).

    Read, in this order, from: the options the fit stored (`penalty_options`); the recipe file
    it stored (`recipe_file`), compared with the penalties it stored in its settings; or, for a
    fit stored before it kept either, `recipe` (the file the caller says it ran with), compared
    the same way when its optimiser, schedule, batch, Softplus beta and penalty classes match the
    fit's. None when none of these applies: the options are unknown (a recipe file as it is now
    may have changed since the fit, so it is never guessed from).

    Args:
        fit_job: a robust fit's stored result (`Run.run` writes it).
        recipe: a fit config (path or shipped name) for fits that stored neither.

    Returns:
        The options by name ({} for the recipe as it is), or None when unknown.
    """
    if isinstance(fit_job.get("penalty_options"), Mapping):
        return dict(fit_job["penalty_options"])
    record = fit_job.get("settings", {}).get("robust")
    if record is None:
        return None
    stored = fit_job.get("recipe_file")
    if isinstance(stored, Mapping) and "text" in stored:
        base = parse_recipe(stored["text"], stored.get("name", "?"), record["epochs"]).record()
    elif recipe is not None:
        file = recipe_file(recipe)
        base = parse_recipe(file.read_text(), record["source"], record["epochs"]).record()
    else:
        return None
    classes = [[p["class_path"] for p in r["penalties"]] for r in (record, base)]
    same = {k: v for k, v in record.items() if k not in ("source", "penalties")}
    if classes[0] != classes[1] or same != {k: base[k] for k in same}:
        return None
    out: dict[str, Any] = {}
    for used, shipped in zip(record["penalties"], base["penalties"], strict=True):
        args, base_args = used.get("init_args", {}), shipped.get("init_args", {})
        out.update({k: v for k, v in args.items() if base_args.get(k) != v})
    return out


def option_label(options: dict[str, Any] | None) -> str:
    """The "penalty options" cell: "KEY=VALUE, ..."; "-" for none; "unknown" for None."""
    if options is None:
        return "unknown"
    return ", ".join(f"{k}={v}" for k, v in options.items()) or "-"


RECOMPUTED = "BatchNorm statistics recomputed"
RECALIBRATED = "BatchNorm statistics re-estimated every {} steps"


def fit_label(fit_job: Mapping[str, Any], recipe: str | None = None) -> str:
    """A robust fit's "penalty options" cell (`option_label` of `penalty_options`), with
    `RECOMPUTED` added when its BatchNorm statistics were recomputed after it (`--recompute-bn`)
    and `RECALIBRATED` when they were kept in step during it (`--bn-every`)."""
    text = option_label(penalty_options(fit_job, recipe))
    settings = fit_job.get("settings", {})
    if settings.get("bn_every"):
        text = f"{text} + {RECALIBRATED.format(settings['bn_every'])}"
    return f"{text} + {RECOMPUTED}" if settings.get("recompute_bn") else text


def _per_seed(jobs: list[dict[str, Any]], explainer: str | None, key: str) -> list[float]:
    """One value per seed: the first eval job of the seed (of `explainer`, or any) that has it."""
    by_seed: dict[Any, float] = {}
    for j in jobs:
        v = j.get(key)
        if j["kind"] == "eval" and explainer in (None, j["explainer"]) and isinstance(v, float):
            if math.isfinite(v):
                by_seed.setdefault(j["seed"], v)
    return list(by_seed.values())


def variant_rows(label: str, out: Path, recipe: str | None = None) -> list[list[str]]:
    """The rows of one run folder: per architecture, its natural model (when evaluated there)
    and its robust model, labelled `label`, with the penalty options of its robust fits of the
    evaluated seeds (`penalty_options`, `recipe` for fits that stored no recipe; per seed when
    they differ)."""
    jobs = load_jobs(out)
    rows = []
    for arch in [a for a in ARCHS if any(j["arch"] == a for j in jobs)]:
        for model in ("natural", "robust"):
            mine = [j for j in jobs if j["arch"] == arch and j["model"] == model]
            evals = [j for j in mine if j["kind"] == "eval"]
            if not evals:
                continue
            seeds = sorted({j["seed"] for j in evals})
            fits = {j["seed"]: j for j in mine if j["kind"] == "fit" and j["seed"] in seeds}
            labels = {s: fit_label(j, recipe) for s, j in sorted(fits.items())}
            if model == "natural" or not labels:
                options = "-" if model == "natural" else "unknown"
            elif len(set(labels.values())) == 1:
                options = next(iter(labels.values()))
            else:
                options = "; ".join(f"seed {s}: {text}" for s, text in labels.items())
            row = [arch, "natural" if model == "natural" else label, options]
            row += [" ".join(map(str, seeds)), cell(_accuracy(jobs, arch, model), len(seeds))]
            for column in VARIANT_COLUMNS[5:]:
                explainer, key = VARIANT_KEYS[column]
                row.append(cell(_per_seed(evals, explainer, key), len(seeds)))
            rows.append(row)
    return rows


def variant_table(runs: list[tuple[str, Path]], recipe: str | None = None) -> dict[str, Any]:
    """The results table of recipe variants: one block of rows per run folder of `runs`
    (label, folder; `variant_rows`) and a natural row once per architecture (of the folder
    whose natural model was evaluated on the most seeds; the first of those), grouped by
    architecture in `ARCHS` order, the natural row first."""
    rows: list[list[str]] = []
    natural: dict[str, list[str]] = {}
    for label, out in runs:
        for row in variant_rows(label, out, recipe):
            if row[1] != "natural":
                rows.append(row)
            elif len(row[3].split()) > len(natural.get(row[0], ["", "", "", ""])[3].split()):
                natural[row[0]] = row
    rows = [*natural.values(), *rows]
    rows.sort(key=lambda r: (list(ARCHS).index(r[0]), r[1] != "natural"))
    align = "|" + "---|" * len(VARIANT_COLUMNS)
    return {"columns": list(VARIANT_COLUMNS), "align": align, "rows": rows}


def variants(runs: list[tuple[str, Path]], key: str, recipe: str | None = None) -> Path:
    """Store `variant_table(runs, recipe)` as the page's table `key` (`store_table`)."""
    return store_table(key, variant_table(runs, recipe))


def store_table(key: str, table: dict[str, Any], page: str = "ARCHITECTURES.md") -> Path:
    """Store `table` as the table `key` of the page's results and write the page (its prose
    places the table with a line `<!-- table: KEY -->`; KEY the slug of the heading above it,
    so that `report` keeps it under the same key)."""
    from experiments.pages import RESULTS, tables_page
    from experiments.support import read_text

    path = RESULTS / f"{Path(page).stem.lower()}.json"
    data = json.loads(read_text(path))
    data["tables"][key] = table
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return tables_page(page)


# ------------------------------------------------------------------------ training curves
CURVE_COLUMNS = (
    "architecture", "model", "seed", "val acc at start", "after epoch 1", "at the end",
    "lowest (step)", "median", "CE: first 10 steps", "last 10", "highest (step)",
    "penalty: first 10 steps", "last 10",
)  # fmt: skip


def curve_rows(label: str, out: Path) -> list[list[str]]:
    """One row per robust fit of the folder `out` that kept a curve (`--curve-every`): its
    validation accuracy in eval mode at the start, after its first epoch and at the end (before
    any `--recompute-bn`), its lowest and where, its median over the fit, and its clean loss
    and penalty per step averaged over the first and the last 10 steps, with the highest clean
    loss and where."""
    rows = []
    for job in load_jobs(out):
        curve = job.get("curve")
        if job["kind"] != "fit" or not curve:
            continue
        acc = dict(zip(curve["val_step"], curve["val_acc"], strict=True))
        per_epoch = len(curve["step"]) // max(len(job.get("epoch_cpu_s", [])), 1)
        low = min(acc, key=acc.__getitem__)
        ce = curve["train/ce"]
        pen = next((v for k, v in curve.items() if k.startswith("train/penalty/")), [math.nan])
        high = max(range(len(ce)), key=ce.__getitem__)
        row = [job["arch"], label, str(job["seed"])]
        row += [f"{acc[0]:.3f}", f"{acc.get(per_epoch, math.nan):.3f}"]
        row += [f"{acc[curve['val_step'][-1]]:.3f}", f"{acc[low]:.3f} ({low})"]
        row += [f"{statistics.median(curve['val_acc']):.3f}"]
        row += [f"{statistics.fmean(ce[:10]):.3f}", f"{statistics.fmean(ce[-10:]):.3f}"]
        row += [f"{ce[high]:.3f} ({curve['step'][high]})"]
        row += [f"{statistics.fmean(pen[:10]):.3f}", f"{statistics.fmean(pen[-10:]):.3f}"]
        rows.append(row)
    return sorted(rows, key=lambda r: (r[0], r[1], int(r[2])))


def curve_table(runs: list[tuple[str, Path]]) -> dict[str, Any]:
    """The training-curve table of the run folders `runs` (label, folder; `curve_rows`)."""
    rows = [row for label, out in runs for row in curve_rows(label, out)]
    return {"columns": list(CURVE_COLUMNS), "align": "|" + "---|" * 3 + "--:|" * 10, "rows": rows}


# ------------------------------------------------------------- the penalty's BatchNorm modes
MODE_MAPS = ("grad_cam", "saliency")
MODES = ("train", "eval")


def _l1(a: Any, b: Any) -> Any:
    """The L1 distance of sum-normalised maps (B, H, W), per sample (the recipe's distance)."""
    a, b = a.flatten(1), b.flatten(1)
    a = a / a.sum(1, keepdim=True).clamp_min(1e-12)
    return (a - b.flatten(1) / b.sum(1, keepdim=True).clamp_min(1e-12)).abs().sum(1)


def _top_share(maps: Any, k: int = 100) -> Any:
    """The share of each map's mass on its own k largest pixels, per sample (k/N: uniform)."""
    flat = maps.flatten(1)
    return flat.topk(k, dim=1).values.sum(1) / flat.sum(1).clamp_min(1e-12)


def mode_measures(
    model: Any, x: Any, y: Any, layer: str | None, batch: int = 13
) -> dict[str, float]:
    """On images `x` with labels `y` (the page: MNIST-5k's 500 validation images), in batches
    of `batch` (the recipe's penalised share of a batch of 64), with the network in train mode
    (BatchNorm on each batch's statistics, as the penalty runs by default; running statistics
    kept) and in eval mode (running statistics, as every attack and user sees it): Grad-CAM's
    top-100 share (`_top_share`) and each map of `MODE_MAPS`'s mean L1 distance under uniform
    noise of the recipe's radius (0.3, clipped to [0, 1], seed 0). Keys
    "<mode>/top100/grad_cam" and "<mode>/l1/<map>"; `model` is left in eval mode, its running
    statistics unchanged."""
    import torch

    from robust_train.core.runtime import running_statistics_kept
    from robust_train.regularizers.multi_map import gradient_family_maps

    noise = torch.rand(x.shape, generator=torch.Generator().manual_seed(0)) * 0.6 - 0.3
    x2, out = (x + noise).clamp(0, 1), {}
    for mode in MODES:
        sums: dict[str, float] = {}
        with running_statistics_kept(model):
            model.train(mode == "train")
            for i in range(0, len(x), batch):
                part = slice(i, i + batch)
                clean = gradient_family_maps(model, x[part], y[part], MODE_MAPS, layer=layer)
                pert = gradient_family_maps(model, x2[part], y[part], MODE_MAPS, layer=layer)
                values = {f"{mode}/l1/{m}": _l1(clean[m], pert[m]) for m in MODE_MAPS}
                values[f"{mode}/top100/grad_cam"] = _top_share(clean["grad_cam"])
                for key, v in values.items():
                    sums[key] = sums.get(key, 0.0) + float(v.sum())
        model.eval()
        out.update({key: total / len(x) for key, total in sums.items()})
    return out


def modes_table(ckpts: list[tuple[str, str]], layer: str | None) -> dict[str, Any]:
    """`mode_measures` of each (label, checkpoint) of `ckpts`, one row each."""
    keys = [f"{mode}/top100/grad_cam" for mode in MODES]
    keys += [f"{mode}/l1/{m}" for m in MODE_MAPS for mode in MODES]
    columns = ["model"] + [
        f"Grad-CAM top-100 share, {k.split('/')[0]} mode"
        if "top100" in k
        else f"{SHORT[k.split('/')[2]]} L1 under noise, {k.split('/')[0]} mode"
        for k in keys
    ]
    from experiments.leaderboard import pool_split
    from robust_train.models import load_classifier

    x, y = (t[-500:] for t in pool_split())  # the validation split follows the train split
    rows = []
    for label, ckpt in ckpts:
        measured = mode_measures(load_classifier(ckpt), x, y, layer)
        rows.append([label] + [f"{measured[k]:.3f}" for k in keys])
    return {"columns": columns, "align": "|" + "---|" * len(columns), "rows": rows}


# ------------------------------------------------------------------------------ step cost
STEM_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "mnist_cnn": ("mnist_cnn", {}),
    "resnet18 torchvision stem": ("resnet18", {"stem": "torchvision"}),
    "resnet18 3x3_pool stem": ("resnet18", {"stem": "3x3_pool"}),
    "resnet18 3x3 stem": ("resnet18", {"stem": "3x3"}),
    "vgg_bn": ("vgg_bn", {}),
}


def _variant_model(arch: str, overrides: dict[str, Any]) -> Any:
    from robust_train.models import build_model

    spec = copy.deepcopy(ARCHS[arch])
    spec["init_args"].update(overrides)
    return build_model(spec)


def _steps(arch: str, overrides: dict[str, Any], recipe: Recipe, x: Any, y: Any) -> dict:
    """Three calls on one batch of `arch`: a natural training step, a step of the recipe, and
    one attack step on saliency (the gradient of the map's squared sum, double backprop)."""
    import torch

    from robust_train import RobustClassifier
    from robust_train.explain import saliency

    model = _variant_model(arch, overrides)
    terms, _ = build_penalties(recipe, model, 0)
    natural, robust = RobustClassifier(copy.deepcopy(model)), RobustClassifier(model, terms)

    def step(module: Any) -> None:
        module.zero_grad()
        module.training_step((x, y), 0).backward()

    def attack() -> None:
        z = x.clone().requires_grad_(True)
        maps = saliency(natural.model.eval(), z, y, create_graph=True)
        torch.autograd.grad(maps.square().sum(), z)
        natural.model.train()

    return {"natural": lambda: step(natural), "robust": lambda: step(robust), "attack": attack}


def step_cost(args: argparse.Namespace) -> None:
    """Milliseconds per call (process CPU time, one thread, batch 64, interleaved rounds) of each
    `STEM_VARIANTS` model's natural step, recipe step and saliency attack step; ratios to the
    MNISTConvNet natural step."""
    import torch

    from benchmarks.bench_utils import time_interleaved
    from experiments.leaderboard import pool_split

    torch.set_num_threads(1)
    torch.manual_seed(0)
    recipe = read_recipe(args.recipe)
    x, y = (t[: args.batch] for t in pool_split())
    calls = {}
    for name, (arch, overrides) in STEM_VARIANTS.items():
        for part, fn in _steps(arch, overrides, recipe, x, y).items():
            calls[f"{name} | {part}"] = fn
    reference = "mnist_cnn | natural"
    timings = time_interleaved(
        calls, reference, rounds=args.rounds, device=torch.device("cpu"), min_sample_seconds=0.5
    )
    lines = ["| model | natural step ms | recipe step ms | saliency attack step ms | "
             "natural step / MNISTConvNet's |", "|---|---|---|---|---|"]  # fmt: skip
    for name in STEM_VARIANTS:
        t = {part: timings[f"{name} | {part}"] for part in ("natural", "robust", "attack")}
        lines.append(
            f"| {name} | {1000 * t['natural'].median:.0f} | {1000 * t['robust'].median:.0f} | "
            f"{1000 * t['attack'].median:.0f} | {t['natural'].ratio:.1f} |"
        )
    print("\n".join(lines), flush=True)


def add_run_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``run`` part (fit and evaluate, resumable) to the subparsers `sub`."""
    r = sub.add_parser("run", help="fit and evaluate (resumable)")
    r.add_argument("--recipe", required=True, help="the robust fine-tune config (file or name)")
    r.add_argument("--natural-config", default=NATURAL_CONFIG)
    r.add_argument("--natural-epochs", type=int, default=None)
    r.add_argument("--archs", nargs="+", default=list(ARCHS), choices=list(ARCHS))
    r.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    r.add_argument("--maps", nargs="+", default=list(MAPS), choices=MAPS)
    r.add_argument(
        "--models",
        nargs="+",
        default=["natural", "robust"],
        choices=("natural", "robust"),
        help="which models' jobs to run (natural ones do not depend on --recipe)",
    )
    r.add_argument(
        "--penalty-option",
        dest="penalty_options",
        action="append",
        metavar="KEY=VALUE",
        help="set an option of every penalty of --recipe (VALUE read as YAML; repeatable), e.g. "
        "model_mode=eval, map_powers=[1,1,2], or teacher=natural (the job's natural model)",
    )
    r.add_argument(
        "--curve-every",
        type=int,
        default=0,
        metavar="N",
        help="keep each robust fit's training curve: its losses every step and its validation "
        "accuracy every N steps (0: none)",
    )
    r.add_argument(
        "--recompute-bn",
        action="store_true",
        help="after each robust fit, recompute its BatchNorms' running statistics on the "
        "training images (weights unchanged)",
    )
    r.add_argument(
        "--bn-every",
        type=int,
        default=0,
        metavar="K",
        help="re-estimate each robust fit's BatchNorm running statistics during the fit, from "
        "16 training batches, every K steps and before each validation "
        "(robust_train.callbacks.BatchNormRecalibration; 0: not)",
    )
    r.add_argument("--images", type=int, default=100)
    r.add_argument("--budget-min", type=float, default=600.0)
    r.add_argument("--quick", action="store_true", help="2 batches, 1 epoch, tiny attacks")
    return r


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m experiments.architectures", description=__doc__)
    sub = p.add_subparsers(dest="part", required=True)
    r = add_run_parser(sub)
    c = sub.add_parser("cost", help="step times of the stems and models, side by side")
    c.add_argument("--recipe", required=True)
    c.add_argument("--batch", type=int, default=64)
    c.add_argument("--rounds", type=int, default=3)
    v = sub.add_parser("variants", help="a table of recipe variants' Grad-CAM rows, in the page")
    v.add_argument("--table", required=True, help="the table's key in the page's results")
    v.add_argument(
        "--run",
        nargs="+",
        required=True,
        metavar="LABEL=FOLDER",
        help="a run folder and the label of its robust rows, in the table's order",
    )
    v.add_argument(
        "--recipe",
        default=None,
        help="the recipe file (path or shipped name) the robust fits ran with, read only for "
        "fits that did not store theirs; without it their penalty options read 'unknown'",
    )
    cv = sub.add_parser("curves", help="the robust fits' training curves, a table in the page")
    cv.add_argument("--table", required=True, help="the table's key in the page's results")
    cv.add_argument("--run", nargs="+", required=True, metavar="LABEL=FOLDER")
    m = sub.add_parser(
        "modes", help="Grad-CAM's concentration and the maps' stability, train vs eval mode"
    )
    m.add_argument("--table", required=True, help="the table's key in the page's results")
    m.add_argument("--ckpt", nargs="+", required=True, metavar="LABEL=CHECKPOINT")
    m.add_argument("--layer", default=None, help="Grad-CAM's layer (default: its default)")
    rep = sub.add_parser("report", help="write the page from a run folder")
    rep.add_argument("--md", default=str(ROOT / "experiments" / "ARCHITECTURES.md"))
    rep.add_argument("--command", default="see the run's log")
    for q in (r, rep):
        q.add_argument("--out", default=str(ROOT / "runs" / "architectures"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.part == "report":
        report(Path(args.out), Path(args.md), args.command)
        return 0
    if args.part == "cost":
        step_cost(args)
        return 0
    if args.part == "modes":
        ckpts = [tuple(c.split("=", 1)) for c in args.ckpt]
        bad = [c for c, pair in zip(args.ckpt, ckpts, strict=True) if len(pair) != 2
               or not Path(pair[1]).is_file()]  # fmt: skip
        if bad:
            print(f"error: --ckpt takes LABEL=CHECKPOINT of a file, got {bad}", file=sys.stderr)
            return 2
        print(store_table(args.table, modes_table(ckpts, args.layer)))  # type: ignore[arg-type]
        return 0
    if args.part in ("variants", "curves"):
        runs = [tuple(r.split("=", 1)) for r in args.run]
        bad = [r for r, pair in zip(args.run, runs, strict=True) if len(pair) != 2
               or not (Path(pair[1]) / "jobs").is_dir()]  # fmt: skip
        if bad:
            print(
                f"error: --run takes LABEL=FOLDER with a jobs/ folder, got {bad}", file=sys.stderr
            )
            return 2
        try:
            if getattr(args, "recipe", None) is not None:
                parse_recipe(recipe_file(args.recipe).read_text(), args.recipe)
        except SystemExit as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        found = [(label, Path(folder)) for label, folder in runs]
        if args.part == "curves":
            print(store_table(args.table, curve_table(found)))
            return 0
        print(variants(found, args.table, args.recipe))
        return 0
    for name in ("images", "budget_min"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    if args.curve_every < 0:
        raise SystemExit(f"--curve-every must be >= 0, got {args.curve_every}")
    if args.bn_every < 0:
        raise SystemExit(f"--bn-every must be >= 0, got {args.bn_every}")
    if args.natural_epochs is not None and args.natural_epochs < 1:
        raise SystemExit(f"--natural-epochs must be >= 1, got {args.natural_epochs}")
    try:
        args.options = parse_options(args.penalty_options)
        check_options(args.recipe, args.options, args.archs)
    except (TypeError, ValueError, FileNotFoundError) as err:
        print(f"error: --penalty-option {args.penalty_options}: {err}", file=sys.stderr)
        return 2
    return Run(args).run()


def check_options(recipe: str, options: dict[str, Any], archs: list[str]) -> None:
    """Build `recipe`'s penalties with `options` on every architecture of `archs` (a natural
    teacher left out), so a bad option fails before any fit.

    Raises:
        TypeError, ValueError, FileNotFoundError: as the penalty's constructor does.
    """
    if not options:
        return
    checked = {k: (None if k == "teacher" and v == NATURAL_TEACHER else v)
               for k, v in options.items()}  # fmt: skip
    variant = with_options(read_recipe(recipe), checked)
    for arch in archs:
        build_penalties(variant, build_arch(arch), 0, GRAD_CAM_LAYERS.get(arch))


if __name__ == "__main__":
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
