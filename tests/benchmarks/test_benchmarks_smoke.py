"""The benchmark scripts still run (--quick, results written to a temporary file), and the two
measuring tools they share count what they claim to count."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    """The benchmark module `name` of the benchmarks package (imported as the scripts run)."""
    return lambda name: importlib.import_module(f"benchmarks.{name}")


def test_peak_memory_is_the_most_bytes_alive_at_once(bench):
    bu = bench("bench_utils")

    def allocate():
        a = torch.ones(1_000_000)  # 4 MB
        b = torch.ones(2_000_000)  # 8 MB: 12 MB alive
        del a
        c = torch.ones(500_000)  # 2 MB: 10 MB alive
        return float(b[0] + c[0])

    peak = bu.peak_memory(allocate, torch.device("cpu"))
    assert abs(peak - 12_000_000) <= 12_000, peak


def test_interleaving_alternates_the_order_and_ratios_are_per_round(bench):
    bu = bench("bench_utils")
    calls = []
    variants = {name: (lambda n=name: calls.append(n)) for name in "ABC"}
    timings = bu.time_interleaved(
        variants, "A", rounds=3, device=torch.device("cpu"), min_sample_seconds=0.0, warmup=False
    )
    assert calls == list("ABCCBAABC")
    assert timings["A"].ratios == [1.0, 1.0, 1.0]
    ratio, _ = bu.pair_ratio(timings, "B", "C")
    b_over_c = zip(timings["B"].seconds, timings["C"].seconds, strict=True)
    expected = sorted(b / c for b, c in b_over_c)[1]
    assert ratio == expected


def test_a_record_is_written_as_json_beside_the_markdown(bench, tmp_path):
    import json

    bu = bench("bench_utils")
    args = bu.base_parser("x").parse_args(
        ["--quick", "--results", str(tmp_path / "R.md"), "--json", str(tmp_path / "r" / "x.json")]
    )
    record = bu.Record("bench_x", args, torch.device("cpu"), ["--quick"])
    record.add(bu.table(["a", "b"], [[1, 0.5]]))
    text = record.finish()
    data = json.loads((tmp_path / "r" / "x.json").read_text())
    assert data["command"] == "python -m benchmarks run bench_x --quick" and data["quick"]
    assert data["sections"] == ["| a | b |\n|---|---|\n| 1 | 0.5 |"] and data["sections"][0] in text
    assert (tmp_path / "R.md").read_text().endswith(text)


def _check_record(text: str, path: Path, title: str) -> None:
    written = path.read_text()
    assert f"## {title} (quick)" in written and text in written
    assert "- command: `python -m benchmarks run " in written and "load average" in written
    assert "Targets:" in written and ("met (" in written or "MISSED (" in written)


@pytest.mark.heavy  # a benchmark's quick run
def test_bench_train_step_quick(bench, tmp_path):
    results = tmp_path / "RESULTS.md"
    text = bench("bench_train_step").main(["--quick", "--results", str(results)])
    _check_record(text, results, "bench_train_step")
    assert "curvature zero_order" in text and "ResNet18CIFAR" in text


@pytest.mark.heavy  # a benchmark's quick run
def test_bench_eval_quick(bench, tmp_path):
    results = tmp_path / "RESULTS.md"
    text = bench("bench_eval").main(["--quick", "--settings", "digits", "--results", str(results)])
    _check_record(text, results, "bench_eval")
    # Aligned with Quantus: equal up to float rounding, which depends on BLAS and thread count
    # (0 on one machine, 3e-07 on another), so a tolerance, never an exact 0.
    found = re.findall(r"max \|difference\| of the curves: ([0-9.e+-]+)", text)
    assert found and all(float(d) <= 1e-5 for d in found), found
    lipschitz = re.findall(r"max \|difference\|: ([0-9.e+-]+) \(same perturbed inputs", text)
    assert lipschitz and all(float(d) <= 1e-4 for d in lipschitz), lipschitz


@pytest.mark.heavy  # a benchmark's quick run
def test_bench_monitor_quick(bench, tmp_path):
    results = tmp_path / "RESULTS.md"
    config = str(BENCHMARKS.parent / "configs" / "digits_baseline.yaml")
    text = bench("bench_monitor").main(["--quick", "--configs", config, "--results", str(results)])
    _check_record(text, results, "bench_monitor")
    assert "| digits_baseline.yaml | default | 1 |" in text


@pytest.mark.heavy  # a benchmark's quick run
def test_gpu_check_cpu_smoke_writes_its_results(bench, tmp_path):
    results = bench("gpu_check").main(["--cpu-smoke", "--out", str(tmp_path / "gpu")])
    written = (tmp_path / "gpu.json").read_text()
    assert '"smoothness_relative_throughput"' in written
    assert (tmp_path / "gpu.md").read_text().startswith("# gpu_check (CPU smoke")
    assert set(results["attack"]) == {"saliency", "integrated_gradients"}
    assert all(a["ratio"] > 0 for a in results["attack"].values())


@pytest.mark.heavy  # a benchmark's quick run
def test_bench_train_step_registry_quick(bench, tmp_path):
    from robust_train.regularizers import PENALTIES

    results = tmp_path / "RESULTS.md"
    text = bench("bench_train_step").main(
        ["--quick", "--penalties", "registry", "--models", "mnist28", "--results", str(results)]
    )
    _check_record(text, results, "bench_train_step")
    for name in PENALTIES:  # every registered penalty is timed; the bare ones beside it
        assert f"| {name} |" in text
    assert "| ig_norm, bare |" in text and "its bare formula" in text


def test_bench_step_224_levers_change_only_their_options_of_the_shipped_recipe(bench):
    b = bench("bench_step_224")
    recipe = b.recipe_options()
    assert recipe["explainers"] == ["saliency", "input_x_gradient", "grad_cam"]
    terms = {v.name: b.make_term(recipe, v) for v in b.variants(recipe)}
    assert terms[b.PLAIN] is None and b.penalised(None, 8) == 0
    every = terms[b.EVERY_MAP]
    assert every.batch_fraction == recipe["batch_fraction"] == 0.09 and b.penalised(every, 8) == 1
    assert every.options.n_ascent_steps == recipe["n_ascent_steps"] == 1
    cam = terms["saliency + Grad-CAM"].options
    assert cam.explainers == ("saliency", "grad_cam") and cam.map_weights == (0.5, 1.5)
    assert cam.radius == every.options.radius and cam.n_ascent_steps == 1
    assert terms["ascent steps 0"].options.n_ascent_steps == 0
    assert [b.penalised(terms[f"batch fraction {f}"], 8) for f in ("0.1", "0.5")] == [1, 4]


@pytest.mark.heavy  # a benchmark's quick run
def test_bench_step_224_quick(bench, tmp_path):
    import json

    results = tmp_path / "RESULTS.md"
    text = bench("bench_step_224").main(
        ["--quick", "--results", str(results), "--json", str(tmp_path / "r.json")]
    )
    _check_record(text, results, "bench_step_224")
    assert "### resnet18, 64x64, batch 8, 1 round(s), 32" in text
    rows = re.findall(r"^\| ([^|]+) \| (\d+) \| ([0-9.e+-]+) \|", text, re.M)
    assert [(name, int(n)) for name, n, _ in rows] == [
        ("plain CE", 0),
        ("every-map recipe", 1),
        ("batch fraction 0.1", 1),
        ("batch fraction 0.5", 4),
        ("saliency only", 1),
        ("saliency + Grad-CAM", 1),
        ("ascent steps 0", 1),
        ("batch fraction 0.1, ascent steps 0", 1),
    ]
    assert all(float(s) > 0 for _, _, s in rows)
    assert json.loads((tmp_path / "r.json").read_text())["title"] == "bench_step_224"


SCRIPTS = sorted(
    f"{p.parent.name}.{p.stem}"
    for folder in ("benchmarks", "experiments")
    for p in (ROOT / folder).glob("*.py")
    if 'if __name__ == "__main__":' in p.read_text() and p.stem != "__main__"
)
RUN_EACH_AS_MAIN = """
import runpy, sys
for name in sys.argv[1:]:
    sys.argv = [name, "--help"]
    try:
        runpy.run_module(name, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        assert stop.code in (0, None), (name, stop.code)
    else:
        raise AssertionError(name + ": --help did not exit")
    print("ran", name)
"""


@pytest.mark.heavy  # a benchmark's quick run
def test_every_script_runs_as_a_module_from_the_repository_root():
    """`python -m benchmarks.<script> --help` and `python -m experiments.<study> --help` (runpy,
    as -m does) from the root, with no PYTHONPATH: the packages import their own modules, no
    script edits sys.path."""
    assert {"benchmarks.bench_eval", "benchmarks.gpu_check", "experiments.leaderboard"} <= set(
        SCRIPTS
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", RUN_EACH_AS_MAIN, *SCRIPTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("ran ") == len(SCRIPTS)


def test_cheaper_robustness_times_the_softplus_rows_beside_natural(tmp_path):
    """--variants picks rows by name prefix; a softplus variant trains and is measured as a
    softplus network (no ReLU left), with or without a penalty."""
    cheaper = importlib.import_module("experiments.cheaper_robustness")
    with pytest.raises(SystemExit, match="--variants: 'nothing'"):
        cheaper.chosen(["nothing"])
    picked = [name for name, _ in cheaper.chosen(["beta_smoothing", "finetune_ixg"])]
    assert len(picked) == 2 and picked[0].startswith("beta_smoothing")
    from robust_train.data import MNIST5kDataModule
    from robust_train.models import count_relus

    data = MNIST5kDataModule(batch_size=64, seed=0)
    data.setup("fit")
    loader = data.train_dataloader()
    for name in picked:
        options, epochs = cheaper.VARIANTS[name]
        model, seconds = cheaper.fine_tune(options, epochs, loader, max_steps=2, seed=0)
        assert count_relus(model) == 0 and len(seconds) == 1
        betas = {m.beta for m in model.modules() if isinstance(m, torch.nn.Softplus)}
        assert betas == {options["softplus_beta"]}
