"""The registered benchmarks: speed and memory only, each `python -m benchmarks run NAME`."""

from __future__ import annotations

from benchmarks.runner import Entry

BENCHMARKS: dict[str, Entry] = {
    "bench_train_step": Entry(
        "benchmarks.bench_train_step",
        "time and peak memory of one optimisation step, plain vs each penalty",
        json=True,
    ),
    "bench_step_224": Entry(
        "benchmarks.bench_step_224",
        "seconds per step at 224 px, torchvision ResNets: plain vs the every-map recipe and levers",
        json=True,
    ),
    "bench_eval_224": Entry(
        "benchmarks.bench_eval_224",
        "seconds per image of evaluate at 224 px, ResNet-18, per explainer: default and fast",
        json=True,
    ),
    "bench_eval": Entry(
        "benchmarks.bench_eval",
        "fidelity curves, Lipschitz estimate and attack beside Quantus, Captum and bare loops",
        json=True,
    ),
    "bench_monitor": Entry(
        "benchmarks.bench_monitor", "share of fit wall time spent in the monitors", json=True
    ),
    "bench_certify": Entry(
        "benchmarks.bench_certify", "cost of a certified explanation per image", json=True
    ),
    "bench_lrp": Entry("benchmarks.bench_lrp", "cost of LRP beside saliency", json=True),
    "bench_new_explainers": Entry(
        "benchmarks.bench_new_explainers",
        "cost of Grad-CAM and DeepLIFT beside saliency",
        json=True,
    ),
    "gpu_check": Entry(
        "benchmarks.gpu_check", "the GPU path in one short run (JSON and markdown to --out)"
    ),
}
