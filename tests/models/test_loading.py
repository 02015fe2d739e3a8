"""load_classifier: fit checkpoints (hand-made in the documented format) and plain state dicts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.explain import saliency
from robust_train.models import (
    SmallCNN,
    TorchvisionClassifier,
    count_relus,
    load_classifier,
    model_config,
    softplus,
)
from robust_train.models.loading import UntrustedCheckpointError


def _trained_like(model: nn.Module) -> nn.Module:
    """Perturb every parameter and buffer so that a fresh build can not match by chance."""
    with torch.no_grad():
        for tensor in list(model.parameters()) + [
            b for b in model.buffers() if b.is_floating_point()
        ]:
            tensor.add_(0.1 * torch.randn_like(tensor))
    return model.eval()


def _fit_checkpoint(model: nn.Module, beta: float | None = None, **extra) -> dict:
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    state["penalty.scale"] = torch.ones(1)  # other parts of the LightningModule are ignored
    return {
        "epoch": 3,
        "global_step": 120,
        "pytorch-lightning_version": "2.6.6",
        "state_dict": state,
        "robust_train": {
            "model": model_config(model),
            "softplus_beta": beta,
            "datamodule": {"class_path": "robust_train.data.DigitsDataModule", "init_args": {}},
        },
        **extra,
    }


def test_fit_checkpoint_round_trip(tmp_path):
    model = _trained_like(SmallCNN(width=8, batchnorm=True))
    path = tmp_path / "fit.ckpt"
    torch.save(_fit_checkpoint(model), path)
    loaded = load_classifier(path)
    assert isinstance(loaded, SmallCNN) and not loaded.training
    x = torch.rand(5, 1, 8, 8)
    torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)


def test_fit_checkpoint_with_softplus_beta(tmp_path):
    model = _trained_like(SmallCNN(width=8))
    path = tmp_path / "smooth.ckpt"
    torch.save(_fit_checkpoint(model, beta=4.0), path)
    loaded = load_classifier(path)
    assert count_relus(loaded) == 0
    x = torch.rand(3, 1, 8, 8)
    torch.testing.assert_close(loaded(x), softplus(model, 4.0)(x), rtol=0, atol=0)


def test_fit_checkpoint_with_python_objects_in_hyperparameters(tmp_path):
    """Python objects need full unpickling: refused by default, loaded with trusted=True."""
    model = _trained_like(SmallCNN(width=8))
    path = tmp_path / "hp.ckpt"
    torch.save(_fit_checkpoint(model, hyper_parameters={"explainer": saliency}), path)
    with pytest.raises(UntrustedCheckpointError, match=r"hp\.ckpt.*saliency.*trusted=True"):
        load_classifier(path)
    x = torch.rand(2, 1, 8, 8)
    torch.testing.assert_close(load_classifier(path, trusted=True)(x), model(x))


def test_pretrained_config_is_rebuilt_without_downloading(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty_torch_home"))
    model = _trained_like(
        TorchvisionClassifier("squeezenet1_1", num_classes=4, weights="DEFAULT", load_weights=False)
    )
    checkpoint = _fit_checkpoint(model)
    checkpoint["robust_train"]["model"]["init_args"]["load_weights"] = (
        True  # as fit would record it
    )
    torch.save(checkpoint, tmp_path / "tv.ckpt")
    loaded = load_classifier(tmp_path / "tv.ckpt")
    x = torch.rand(2, 3, 64, 64)
    torch.testing.assert_close(loaded(x), model(x))
    assert not (tmp_path / "empty_torch_home").exists()


@pytest.mark.parametrize("prefixed", [False, True])
@pytest.mark.parametrize("as_module", [False, True])
def test_plain_state_dict_round_trip(tmp_path, prefixed, as_module):
    model = _trained_like(SmallCNN(in_channels=3, width=8, dropout=0.3))
    state = {("model." if prefixed else "") + k: v for k, v in model.state_dict().items()}
    torch.save(state, tmp_path / "weights.pt")
    target = SmallCNN(in_channels=3, width=8, dropout=0.3) if as_module else model_config(model)
    loaded = load_classifier(tmp_path / "weights.pt", model=target)
    if as_module:
        assert loaded is target
    x = torch.rand(4, 3, 8, 8)
    assert not loaded.training
    torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)


def test_module_with_a_submodule_named_model_loads_unprefixed_keys(tmp_path):
    wrapper = nn.Sequential()
    wrapper.add_module("model", SmallCNN(width=4))
    _trained_like(wrapper)
    torch.save(wrapper.state_dict(), tmp_path / "w.pt")
    fresh = nn.Sequential()
    fresh.add_module("model", SmallCNN(width=4))
    x = torch.rand(2, 1, 8, 8)
    torch.testing.assert_close(load_classifier(tmp_path / "w.pt", model=fresh)(x), wrapper(x))


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.ckpt"):
        load_classifier(tmp_path / "nothing.ckpt")


def test_no_config_in_file_and_none_given(tmp_path):
    torch.save(SmallCNN(width=4).state_dict(), tmp_path / "plain.pt")
    with pytest.raises(ValueError, match="no model config.*pass model="):
        load_classifier(tmp_path / "plain.pt")
    torch.save({"state_dict": {}, "epoch": 1}, tmp_path / "other.ckpt")
    with pytest.raises(ValueError, match="no model config"):
        load_classifier(tmp_path / "other.ckpt")


def test_mismatched_keys_and_shapes_are_named(tmp_path):
    state = SmallCNN(width=4).state_dict()
    state["extra.weight"] = torch.zeros(1)
    del state["classifier.bias"]
    torch.save(state, tmp_path / "bad.pt")
    with pytest.raises(
        RuntimeError,
        match=r"missing keys \['classifier.bias'\].*unexpected keys \['extra.weight'\]",
    ):
        load_classifier(tmp_path / "bad.pt", model=SmallCNN(width=4))
    torch.save(SmallCNN(width=4, num_classes=3).state_dict(), tmp_path / "shape.pt")
    with pytest.raises(
        RuntimeError, match=r"classifier.weight: file \(3, 128\) vs model \(10, 128\)"
    ):
        load_classifier(tmp_path / "shape.pt", model=SmallCNN(width=4))


def test_unreadable_file(tmp_path):
    (tmp_path / "text.ckpt").write_text("not a checkpoint")
    with pytest.raises(RuntimeError, match="cannot read .*text.ckpt.* as a torch checkpoint"):
        load_classifier(tmp_path / "text.ckpt", model=SmallCNN(width=4))
