"""The shipped MNIST-5k checkpoints load with `load_classifier`, are small, carry their data
config, and match the test accuracy that experiments/LEADERBOARD.md records for them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from robust_train.app.checkpoint_io import load_checkpoint
from robust_train.core.resources import shipped_checkpoint, shipped_config
from robust_train.core.runtime import predict
from robust_train.data import MNIST5kDataModule
from robust_train.models import MNISTConvNet, load_classifier

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("mnist5k_baseline", "mnist5k_robust")


def recorded_accuracy(name: str) -> float:
    """The accuracy in LEADERBOARD.md's row `| `checkpoints/<name>.ckpt` | <accuracy> | ...`."""
    text = (ROOT / "experiments" / "LEADERBOARD.md").read_text()
    match = re.search(rf"\| `checkpoints/{name}\.ckpt` \| ([0-9.]+) \|", text)
    assert match, f"LEADERBOARD.md has no accuracy row for checkpoints/{name}.ckpt"
    return float(match.group(1))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_mnist_checkpoint_loads_with_the_recorded_accuracy(name):
    torch.set_num_threads(1)
    path = shipped_checkpoint(name)
    assert path.stat().st_size < 15_000_000
    model = load_classifier(path)
    assert isinstance(model, MNISTConvNet) and not model.training
    _, data = load_checkpoint(path)
    assert data["class_path"].endswith("MNIST5kDataModule")
    dm = MNIST5kDataModule(**{k: v for k, v in data["init_args"].items() if k == "seed"})
    dm.setup()
    x, y = dm.test_set.tensors
    with torch.no_grad():
        accuracy = float((predict(model, x, 256) == y).float().mean())
    # 1,000 images: 0.002 is two predictions flipped by a different BLAS or thread count.
    assert accuracy == pytest.approx(recorded_accuracy(name), abs=2e-3)
    assert accuracy >= 0.9


def test_the_shipped_robust_model_is_its_recipe_fitted_on_the_natural_network():
    """mnist5k_robust is `configs/mnist5k_finetune_every_map.yaml` fitted: the natural model's
    ReLU network (LRP's rules and DeepLIFT's rescale rule assume ReLUs) with other weights, and
    its checkpoint records the recipe's penalty (its class, weight and batch fraction)."""
    import yaml

    recipe = yaml.safe_load(shipped_config("mnist5k_finetune_every_map").read_text())
    (penalty,) = recipe["model"]["penalties"]
    assert "softplus_beta" not in recipe["model"]
    robust = load_classifier(shipped_checkpoint("mnist5k_robust"))
    natural = load_classifier(shipped_checkpoint("mnist5k_baseline"))
    for model in (robust, natural):
        assert sum(isinstance(m, torch.nn.ReLU) for m in model.modules()) == 3
        assert not any(isinstance(m, torch.nn.Softplus) for m in model.modules())
    moved = [
        k for k, v in natural.state_dict().items() if not torch.equal(v, robust.state_dict()[k])
    ]
    assert len(moved) >= 6, "the fine-tune moved the weights"
    stored = torch.load(shipped_checkpoint("mnist5k_robust"), map_location="cpu", weights_only=True)
    (recorded,) = stored["robust_train"]["penalties"]
    args = penalty["init_args"]
    assert recorded.startswith(penalty["class_path"].rsplit(".", 1)[1] + "(")
    assert f"weight={args['weight']}" in recorded
    assert f"batch_fraction={args['batch_fraction']}" in recorded
    assert stored["robust_train"]["softplus_beta"] is None
