"""The shipped cluttered MNIST-5k pair: small, weights only, the recorded recipe, the stated
accuracy (experiments/results/cluttered.json, which measured the fits they were exported from)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from robust_train.core.resources import shipped_checkpoint, shipped_config
from robust_train.core.runtime import predict
from robust_train.models import MNISTConvNet, load_classifier

ROOT = Path(__file__).resolve().parents[2]
# shipped name -> the label of its fit in the benchmark's results
SHIPPED = {
    "cluttered_mnist5k_baseline": "cnn/natural",
    "cluttered_mnist5k_robust": "cnn/em_w3_r8_e16",
}


def stated_accuracy(label: str) -> float:
    results = json.loads((ROOT / "experiments" / "results" / "cluttered.json").read_text())
    (found,) = [r for r in results["results"] if r["label"] == label and "accuracy" in r][:1]
    return float(found["accuracy"])


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_cluttered_checkpoint_is_small_and_loads_the_rgb_network(name):
    path = shipped_checkpoint(name)
    assert path.stat().st_size < 5_000_000
    model = load_classifier(path)
    assert isinstance(model, MNISTConvNet) and not model.training
    assert model(torch.rand(2, 3, 64, 64)).shape == (2, 10)
    assert "optimizer_states" not in torch.load(path, map_location="cpu", weights_only=True)


def test_robust_checkpoint_records_the_shipped_fine_tune_penalty():
    import yaml

    recipe = yaml.safe_load(shipped_config("cluttered_mnist5k_finetune_every_map").read_text())
    (penalty,) = recipe["model"]["penalties"]
    record = torch.load(
        shipped_checkpoint("cluttered_mnist5k_robust"), map_location="cpu", weights_only=True
    )["robust_train"]
    (recorded,) = record["penalties"]
    weight = float(penalty["init_args"]["weight"])
    assert penalty["class_path"].endswith(recorded.split("(")[0])
    assert (
        f"weight={weight}" in recorded
        and f"batch_fraction={penalty['init_args']['batch_fraction']}" in recorded
    )


@pytest.mark.slow
def test_shipped_cluttered_pair_has_the_stated_test_accuracy():
    from robust_train.data import ClutteredMNIST5kDataModule

    data = ClutteredMNIST5kDataModule(image_size=64)
    data.setup("test")
    x = torch.stack([data.test_set[i][0] for i in range(len(data.test_set))])
    y = data.test_set.targets
    for name, label in SHIPPED.items():
        model = load_classifier(shipped_checkpoint(name))
        with torch.no_grad():
            accuracy = float((predict(model, x, 256) == y).float().mean())
        assert accuracy == pytest.approx(stated_accuracy(label), abs=5e-4)
