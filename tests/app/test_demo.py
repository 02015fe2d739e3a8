"""`robust-train demo` on MNIST-5k: the command end to end (`--quick`, as the getting-started
page runs it: in a process of the warm console, tests/support/warm_console.py, its own process
without the console script's seconds of imports; tests/package/test_wheel.py runs the demo from
the installed wheel), claim, flags."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import robust_train.app.demo as demo
from robust_train.app.report import same_images
from tests.support.wandb_reader import read_run

TOPK_KEY = "robustness/attack/saliency/topk/topk_intersection"


def judged(line: str, measured: dict[str, float], margin: float, scale: float = 1.0) -> None:
    """The claim line says inside exactly when its value lies in the measured range, within the
    margin when it lies up to `margin` beyond it, OUTSIDE further away."""
    value = float(re.search(r" ([+-][0-9.]+)(:|$)", line).group(1)) / scale  # type: ignore[union-attr]
    lo, hi = measured["min"], measured["max"]
    if lo != lo:
        assert "range" not in line
        return
    tolerance = 0.0006  # the printed value is rounded (3 decimals, or 0.1 points)
    if lo + tolerance < value < hi - tolerance:
        assert ": inside the measured range" in line, line
    elif lo - margin + tolerance < value < hi + margin - tolerance:
        assert "(another machine's margin) of the measured range" in line or (
            ": inside the measured range" in line and lo - tolerance <= value <= hi + tolerance
        ), line
    elif value < lo - margin - tolerance or value > hi + margin + tolerance:
        assert ": OUTSIDE the measured range" in line, line


@pytest.fixture(scope="module")
def quick_run(docs_shell_run):
    """The getting-started page's `robust-train demo --quick` (its shell blocks run once per test
    run, by whichever of this module and tests/docs/test_docs_code.py comes first): the command
    in a process of the warm console, from an empty folder, W&B left at its default."""
    run = docs_shell_run("getting-started.md")
    block = run.block_running("robust-train demo --quick")
    assert block.returncode == 0, run.failure()
    return run.work / "runs" / "demo", block.stdout


@pytest.mark.slow
def test_quick_demo_trains_natural_then_fine_tunes_it(quick_run):
    out, _ = quick_run
    results = json.loads((out / "results.json").read_text())
    natural = Path(results["natural"]["checkpoint"])
    robust = Path(results["robust"]["checkpoint"])
    # Checkpoint rule: each model at the end of its last epoch, not at best val/acc.
    for checkpoint, epochs in zip((natural, robust), demo.QUICK_EPOCHS, strict=True):
        assert checkpoint.name == "last.ckpt"
        assert torch.load(checkpoint, map_location="cpu", weights_only=False)["epoch"] == epochs - 1
    # The fine-tune starts from the natural model the demo just trained, and moved it.
    stored = torch.load(robust, map_location="cpu", weights_only=False)
    assert Path(stored["hyper_parameters"]["init_checkpoint"]).resolve() == natural.resolve()
    start = torch.load(natural, map_location="cpu", weights_only=False)["state_dict"]
    weights = [k for k in start if k.endswith((".weight", ".bias"))]
    assert len(weights) >= 4 and all(k in stored["state_dict"] for k in weights)
    assert all(not torch.equal(stored["state_dict"][k], start[k]) for k in weights)
    # ... with the shipped recipe: one multi-map penalty on the ReLU network.
    (penalty,) = stored["robust_train"]["penalties"]
    assert penalty.startswith("MultiMapSmoothness(") and "batch_fraction=0.2" in penalty
    assert stored["robust_train"]["softplus_beta"] is None
    # Both evaluated with the demo protocol (shrunk by --quick): every reported map attacked.
    settings = results["natural"]["settings"]
    assert settings["epsilon"] == 0.3 and settings["attacks"] == ["random_sign", "topk"]
    assert settings["explainers"] == list(demo.MAPS)
    assert settings["n_samples"] == demo.QUICK_SETTINGS["n_samples"]


@pytest.mark.slow
def test_quick_demo_writes_the_table_report_figures_and_wandb_runs(quick_run):
    out, stdout = quick_run
    assert "| measure | natural | robust |" in stdout
    for explainer in demo.MAPS:
        assert f"| `attack/{explainer}/topk/topk_intersection` ↑ |" in stdout
    report = (out / "report.md").read_text()
    assert "MNIST-5k" in report.splitlines()[0] and "## The claim" in report
    for png in ("robustness_per_epoch.png", "fidelity_curves.png", "attack_examples.png"):
        assert (out / png).stat().st_size > 1000 and f"({png})" in report
    runs = sorted((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 2, "each fit gets its own W&B run"
    counts = sorted(len(read_run(r).column(TOPK_KEY)) for r in runs)
    assert counts == sorted(demo.QUICK_EPOCHS), "the monitors logged every epoch of each fit"
    for run_dir in runs:
        assert all(0 <= v <= 1 for v in read_run(run_dir).column(TOPK_KEY))


@pytest.mark.slow
def test_quick_demo_states_its_claim_against_the_measured_range(quick_run):
    out, stdout = quick_run
    lines = stdout.splitlines()
    claim = lines.index(next(line for line in lines if line.startswith("claim:")))
    n = len(demo.MAPS)
    *maps, accuracy = lines[claim + 1 : claim + 2 + n]
    for line, (name, label) in zip(maps, demo.MAPS.items(), strict=True):
        assert line.startswith(f"  {label} gain"), line
        judged(line, demo.MEASURED_GAINS[name], demo.MACHINE_MARGIN["map"])
    judged(accuracy, demo.MEASURED_ACC_CHANGE, demo.MACHINE_MARGIN["accuracy"], scale=100)
    assert "differ from the measured ones" in lines[claim + 2 + n], "--quick is not measured"
    printed = float(maps[0].split()[2].rstrip(":"))
    results = json.loads((out / "results.json").read_text())
    key = demo.TOPK["saliency"]
    (natural, robust), _ = same_images(results, key)  # what the table beside it shows
    assert printed == pytest.approx(robust - natural, abs=6e-4)
    row = next(line for line in stdout.splitlines() if line.startswith(f"| `{key}`"))
    cells = [c.strip() for c in row.split("|")[2:4]]
    assert printed == pytest.approx(float(cells[1]) - float(cells[0]), abs=2e-3)


def test_claim_gain_uses_the_images_both_models_measured():
    key = demo.TOPK["saliency"]
    own = {"natural": 0.5, "robust": 0.45}  # each over its own images
    per_image = {"natural": [0.2, 0.8, float("nan")], "robust": [0.6, 0.9, 0.0]}
    results = {
        name: {"measures": {key: own[name], "split_accuracy": 0.9},
               "per_image": {key: per_image[name]}, "images_digest": "d"}
        for name in ("natural", "robust")
    }  # fmt: skip
    assert demo.gain(results)["saliency"] == pytest.approx(0.75 - 0.5)  # not 0.45 - 0.5


def test_verdict_says_inside_or_outside(monkeypatch):
    gains = {name: {"mean": 0.5, "min": 0.45, "max": 0.55} for name in demo.MAPS}
    gains["integrated_gradients"] = {"mean": 0.2, "min": 0.15, "max": 0.25}
    monkeypatch.setattr(demo, "MEASURED_GAINS", gains)
    monkeypatch.setattr(demo, "MEASURED_ACC_CHANGE", {"mean": -0.01, "min": -0.02, "max": 0.0})
    lines = demo.verdict({"saliency": 0.5, "integrated_gradients": 0.3, "accuracy": -0.03})
    saliency, ig, accuracy = lines.splitlines()[1:4]
    assert "+0.500: inside the measured range +0.450 to +0.550" in saliency
    assert "+0.300: OUTSIDE the measured range +0.150 to +0.250" in ig
    assert "-3.0: OUTSIDE the measured range -2.0 to +0.0" in accuracy
    edge = demo.verdict({"saliency": 0.45, "integrated_gradients": 0.25, "accuracy": -0.02})
    assert edge.count(": inside the measured range") == 3, "a range holds its own ends"
    # Just beyond an end (another machine's arithmetic): within the margin, not OUTSIDE.
    monkeypatch.setattr(demo, "MACHINE_MARGIN", {"map": 0.01, "accuracy": 0.002})
    near = demo.verdict({"saliency": 0.445, "integrated_gradients": 0.258, "accuracy": 0.0015})
    saliency, ig, accuracy = near.splitlines()[1:4]
    assert "+0.445: within 0.010 (another machine's margin) of the measured range" in saliency
    assert "+0.258: within 0.010 (another machine's margin) of the measured range" in ig
    assert "+0.1: within 0.2 (another machine's margin) of the measured range" in accuracy
    far = demo.verdict({"saliency": 0.439, "integrated_gradients": 0.261, "accuracy": 0.0025})
    assert far.count(": OUTSIDE the measured range") == 3, far
    other = demo.verdict({"saliency": 0.5, "integrated_gradients": 0.2, "accuracy": 0.0}, False)
    assert "reference, not a check" in other


def test_only_the_default_run_is_the_measured_one():
    parser = demo._parser()

    def measured(*argv: str) -> bool:
        args, extra = parser.parse_known_args(list(argv))
        return demo._as_measured(args, extra, demo._settings(args))

    assert measured() and measured("--seed", "7", "--trainer.enable_progress_bar=false")
    assert measured("--trainer.enable_progress_bar", "false")  # the space form is the same
    assert not measured("--trainer.max_epochs", "3")
    assert not measured("--quick")
    assert not measured("--n-samples", "10")
    assert not measured("--epochs", "3")
    assert not measured("--trainer.limit_train_batches=3")


def test_help_and_bad_flags_of_the_command(tmp_path, cli):
    help_text = cli("demo", "--help", cwd=tmp_path)
    assert help_text.returncode == 0
    for flag in ("--seed", "--out", "--quick", "--n-samples"):
        assert flag in help_text.stdout
    bad = cli("demo", "--seed", "-1", "--out", str(tmp_path / "x"), cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == ["robust-train: error: `--seed` must be >= 0, got -1"]
    assert not (tmp_path / "x").exists(), "refused before any work"
    missing = cli("demo", "--robust", "nope.yaml", "--out", tmp_path / "y", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        "robust-train: error: `--robust` config 'nope.yaml' does not exist"
    ]
    assert not (tmp_path / "y").exists()


def test_demo_protocol_is_rar_at_the_demos_size():
    from robust_train.app.commands import settings_tag
    from robust_train.evaluation import PROTOCOLS
    from robust_train.explain import reported_explainers

    rar, preset = PROTOCOLS["rar"], PROTOCOLS["demo"]
    differs = {name for name in rar.as_dict() if getattr(rar, name) != getattr(preset, name)}
    assert differs == {
        "n_samples", "explainers", "n_steps", "step_size", "n_restarts", "lipschitz_samples",
        "fidelity_steps", "extra",
    }  # fmt: skip
    assert preset.explainers == tuple(demo.MAPS) == tuple(reported_explainers())
    assert (preset.n_samples, preset.n_steps, preset.step_size, preset.n_restarts) == (
        100, 20, 0.03, 1,
    )  # fmt: skip
    assert (
        settings_tag(preset) == "demo"
        and demo._settings(demo._parser().parse_args([])) == PROTOCOLS[demo.PROTOCOL]
    )
