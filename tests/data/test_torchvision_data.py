"""MNIST / Fashion-MNIST / CIFAR-10 DataModules on tiny files written in the real formats."""

from __future__ import annotations

import hashlib
import pickle
import socket
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision

from robust_train.data import CIFAR10DataModule, FashionMNISTDataModule, MNISTDataModule


def _write_idx(folder: Path, prefix: str, images: np.ndarray, labels: np.ndarray) -> None:
    """MNIST's idx layout: big-endian magic (0x0803 images, 0x0801 labels), sizes, then uint8."""
    folder.mkdir(parents=True, exist_ok=True)
    n, rows, cols = images.shape
    (folder / f"{prefix}-images-idx3-ubyte").write_bytes(
        struct.pack(">IIII", 2051, n, rows, cols) + images.tobytes()
    )
    (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(
        struct.pack(">II", 2049, n) + labels.tobytes()
    )


def _tiny_mnist(root: Path, name: str, n_train: int = 12, n_test: int = 5):
    rng = np.random.default_rng(0)
    train = rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8)
    train[:, 0, 0] = np.arange(n_train)  # identify each image
    test = rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8)
    train_labels = (np.arange(n_train) % 10).astype(np.uint8)
    test_labels = (np.arange(n_test) * 3 % 10).astype(np.uint8)
    _write_idx(root / name / "raw", "train", train, train_labels)
    _write_idx(root / name / "raw", "t10k", test, test_labels)
    return train, train_labels, test, test_labels


def _stack(dataset):
    xs, ys = zip(*[dataset[i] for i in range(len(dataset))], strict=True)
    return torch.stack(xs), torch.stack(ys)


@pytest.mark.parametrize(
    ("cls", "folder"), [(MNISTDataModule, "MNIST"), (FashionMNISTDataModule, "FashionMNIST")]
)
def test_tiny_mnist_layout_loads(tmp_path, cls, folder):
    train, train_labels, test, test_labels = _tiny_mnist(tmp_path, folder)
    dm = cls(data_dir=str(tmp_path), val_size=4, batch_size=5)
    assert (dm.num_classes, dm.in_channels, dm.image_size) == (10, 1, (28, 28))
    dm.setup()
    x_test, y_test = _stack(dm.test_set)
    assert x_test.shape == (5, 1, 28, 28) and x_test.dtype == torch.float32
    torch.testing.assert_close(x_test, torch.tensor(test).unsqueeze(1).float() / 255)
    assert y_test.tolist() == test_labels.tolist()
    x_train, y_train = _stack(dm.train_set)
    x_val, y_val = _stack(dm.val_set)
    ids = (torch.cat([x_train, x_val])[:, 0, 0, 0] * 255).round().long()
    assert sorted(ids.tolist()) == list(range(12)) and len(x_val) == 4
    assert torch.equal(torch.cat([y_train, y_val]), torch.tensor(train_labels[ids.numpy()]).long())
    assert float(x_train.min()) >= 0 and float(x_train.max()) <= 1
    batch = next(iter(dm.train_dataloader()))
    assert batch[0].shape == (5, 1, 28, 28)


def test_subset_resize_and_seeded_validation(tmp_path):
    _tiny_mnist(tmp_path, "MNIST")
    dm = MNISTDataModule(data_dir=str(tmp_path), val_size=4, subset=3, resize=32)
    dm.setup()
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (3, 3, 3)
    assert dm.image_size == (32, 32) and dm.test_set[0][0].shape == (1, 32, 32)
    first, second = (
        MNISTDataModule(str(tmp_path), val_size=4),
        MNISTDataModule(str(tmp_path), val_size=4, seed=1),
    )
    first.setup()
    second.setup()
    assert not torch.equal(_stack(first.val_set)[0], _stack(second.val_set)[0])
    with pytest.raises(ValueError, match="val_size"):
        big = MNISTDataModule(str(tmp_path), val_size=12)
        big.setup()


def test_missing_mnist_names_folder_and_remedies(tmp_path):
    dm = MNISTDataModule(data_dir=str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError) as info:
        dm.setup()
    message = str(info.value)
    assert str(tmp_path / "nowhere" / "MNIST" / "raw") in message
    assert "download=True" in message and "train-images-idx3-ubyte" in message


def _offline() -> bool:
    try:
        socket.getaddrinfo("ossci-datasets.s3.amazonaws.com", 443)
        return False
    except OSError:
        return True


@pytest.mark.skipif(not _offline(), reason="needs to be offline (the download would succeed)")
def test_failed_download_names_folder(tmp_path):
    dm = FashionMNISTDataModule(data_dir=str(tmp_path), download=True)
    with pytest.raises(
        RuntimeError, match=r"Downloading FashionMNIST into .*FashionMNIST/raw.* failed"
    ):
        dm.prepare_data()


def test_missing_cifar_names_folder_and_files(tmp_path):
    dm = CIFAR10DataModule(data_dir=str(tmp_path))
    assert (dm.num_classes, dm.in_channels, dm.image_size) == (10, 3, (32, 32))
    assert dm.class_names[:2] == ["airplane", "automobile"]
    with pytest.raises(FileNotFoundError) as info:
        dm.setup()
    message = str(info.value)
    assert str(tmp_path / "cifar-10-batches-py") in message
    assert (
        "data_batch_1" in message
        and "download=True" in message
        and "cifar-10-python.tar.gz" in message
    )


def _tiny_cifar(root: Path) -> tuple[dict[str, str], np.ndarray, list[int]]:
    """CIFAR-10's python layout (pickled dicts, rows of 1024 R, 1024 G, 1024 B); returns md5s."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    md5 = {}
    test_data, test_labels = None, None
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (2, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, 2).tolist()
        (folder / name).write_bytes(pickle.dumps({"data": data, "labels": labels}))
        md5[name] = hashlib.md5((folder / name).read_bytes()).hexdigest()
        test_data, test_labels = data, labels
    names = [
        "airplane",
        "automobile",
        "bird",
        "cat",
        "deer",
        "dog",
        "frog",
        "horse",
        "ship",
        "truck",
    ]
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": names}))
    md5["batches.meta"] = hashlib.md5((folder / "batches.meta").read_bytes()).hexdigest()
    return md5, test_data, test_labels


def test_tiny_cifar_loads_with_channel_order_kept(tmp_path, monkeypatch):
    md5, test_data, test_labels = _tiny_cifar(tmp_path)
    with pytest.raises(FileNotFoundError, match="not intact"):  # torchvision's md5 check is real
        CIFAR10DataModule(str(tmp_path), val_size=2).setup()
    cifar = torchvision.datasets.CIFAR10
    monkeypatch.setattr(cifar, "train_list", [[n, md5[n]] for n, _ in cifar.train_list])
    monkeypatch.setattr(cifar, "test_list", [[n, md5[n]] for n, _ in cifar.test_list])
    monkeypatch.setattr(cifar, "meta", {**cifar.meta, "md5": md5["batches.meta"]})
    dm = CIFAR10DataModule(str(tmp_path), val_size=2)
    dm.setup()
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (8, 2, 2)
    x, y = _stack(dm.test_set)
    torch.testing.assert_close(x, torch.tensor(test_data).reshape(2, 3, 32, 32).float() / 255)
    assert y.tolist() == test_labels
