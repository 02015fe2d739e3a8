"""The shipped certification-aware checkpoint: it loads with the accuracy its page states, and
its saliency map is certified at L_inf 0.005 where the shipped robust model's is not."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch

from robust_train.certify import certify_topk
from robust_train.core.resources import shipped_checkpoint
from robust_train.core.runtime import predict
from robust_train.data import MNIST5kDataModule
from robust_train.models import MNISTConvNet, load_classifier

ROOT = Path(__file__).resolve().parents[2]


def test_the_certified_checkpoint_earns_its_certificate() -> None:
    dm = MNIST5kDataModule(seed=0)
    dm.setup()
    x, y = dm.test_set.tensors
    results = json.loads((ROOT / "experiments/results/certified_front.json").read_text())
    stated = results["groups"]["mnist5k_certified"]  # the page measures the shipped file itself
    assert stated["seeds"] == 1 and stated["fit"] is None
    medians = {}
    for name in ("mnist5k_certified", "mnist5k_robust"):
        model = load_classifier(shipped_checkpoint(name))
        assert isinstance(model, MNISTConvNet) and not model.training
        right = predict(model, x, 256) == y
        if name == "mnist5k_certified":
            assert float(right.float().mean()) == pytest.approx(stated["test_acc"], abs=5e-4)
        xs, ys = x[right][:8], y[right][:8]
        with torch.no_grad():
            cert = certify_topk(model, xs, ys, epsilons=[0.005], k=100)
        medians[name] = statistics.median(cert.certified_overlap[:, 0].tolist())
    assert medians["mnist5k_robust"] == 0.0
    assert medians["mnist5k_certified"] >= 0.2
