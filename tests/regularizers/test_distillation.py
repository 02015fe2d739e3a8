"""TeacherDistillation: the KL of the model's softened prediction from a frozen teacher's, checked
against scipy's relative entropy and its gradient's closed form; the snapshot teacher stays the
starting model, also across a resumed Lightning fit; a fine-tune that would forget keeps more of
the teacher's predictions with it."""

from __future__ import annotations

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from scipy.special import rel_entr, softmax
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from robust_train.regularizers import TeacherDistillation, distillation_loss, get_penalty
from robust_train.training import RobustClassifier
from tests.support.helpers import TinyCNN, digits_tensors, train_digits_cnn


def test_the_loss_is_t_squared_times_scipys_relative_entropy():
    g = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(5, 7, generator=g) * 3, torch.randn(5, 7, generator=g) * 3
    for t in (0.5, 1.0, 4.0):
        p = softmax(teacher.double().numpy() / t, axis=1)
        q = softmax(student.double().numpy() / t, axis=1)
        expected = t * t * rel_entr(p, q).sum(axis=1)
        got = distillation_loss(student, teacher, temperature=t)
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=1e-6)
    assert torch.equal(distillation_loss(student, student), torch.zeros(5))


def test_its_gradient_is_the_difference_of_the_softened_predictions():
    # d/ds T^2 KL(softmax(t/T) || softmax(s/T)) = T (softmax(s/T) - softmax(t/T))
    g = torch.Generator().manual_seed(1)
    student = torch.randn(3, 4, generator=g).requires_grad_(True)
    teacher = torch.randn(3, 4, generator=g).requires_grad_(True)
    for t in (1.0, 3.0):
        (grad,) = torch.autograd.grad(distillation_loss(student, teacher, t).sum(), student)
        closed = t * (F.softmax(student / t, 1) - F.softmax(teacher / t, 1))
        torch.testing.assert_close(grad, closed.detach())
    value = distillation_loss(student, teacher)  # the teacher's logits are constants
    assert torch.autograd.grad(value.sum(), teacher, allow_unused=True)[0] is None


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"temperature": 0.0}, ValueError, "temperature.*0"),
        ({"temperature": -2}, ValueError, "temperature.*-2"),
        ({"teacher": "/no/such/teacher.ckpt"}, FileNotFoundError, "teacher.*no/such"),
        ({"teacher": 3}, TypeError, "teacher.*3"),
        ({"temprature": 2.0}, TypeError, "temprature"),
    ],
)
def test_bad_options_fail_at_construction_naming_them(kwargs, error, match):
    with pytest.raises(error, match=match):
        TeacherDistillation(**kwargs)


def test_logits_of_different_shapes_are_refused():
    with pytest.raises(ValueError, match=r"same shape.*\(2, 3\).*\(2, 4\)"):
        distillation_loss(torch.zeros(2, 3), torch.zeros(2, 4))


def test_the_snapshot_teacher_is_the_model_at_the_first_call():
    net, x, y = train_digits_cnn(epochs=1)
    term = get_penalty("distillation", temperature=1.0)
    assert float(term(net, x[:8], y[:8]).abs().max()) == 0.0
    start = {k: v.clone() for k, v in net.state_dict().items()}
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
    first = TinyCNN()
    first.load_state_dict(start)
    expected = distillation_loss(net(x[:8]), first.eval()(x[:8]), 1.0)
    torch.testing.assert_close(term(net, x[:8], y[:8]), expected)
    assert float(expected.min()) > 0


def test_a_teacher_checkpoint_is_used_as_given(tmp_path):
    net, x, y = train_digits_cnn(epochs=1)
    other = TinyCNN(seed=5).eval()
    path = tmp_path / "teacher.pt"
    torch.save(other.state_dict(), path)
    term = TeacherDistillation(teacher=str(path), temperature=3.0)
    torch.testing.assert_close(
        term(net, x[:6], y[:6]), distillation_loss(net(x[:6]), other(x[:6]), 3.0)
    )
    assert term.snapshot is None and term.get_extra_state() == {"snapshot": None}


def _fit(module, x, y, tmp_path, epochs, ckpt_path=None):
    trainer = pl.Trainer(
        max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path, limit_val_batches=0, deterministic=True,
        callbacks=[pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True)],
    )  # fmt: skip
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=False)
    trainer.fit(module, loader, ckpt_path=ckpt_path)
    return trainer


def test_a_resumed_fit_distils_from_the_starting_model_not_the_resumed_one(tmp_path):
    net, x, y = train_digits_cnn(epochs=1)
    start = {k: v.clone() for k, v in net.state_dict().items()}
    x, y = x[:128], y[:128]

    def module():
        return RobustClassifier(
            TinyCNN(), [TeacherDistillation(weight=1.0)],
            optimizer=lambda p: torch.optim.SGD(p, lr=0.5),
        )  # fmt: skip

    first = module()
    first.model.load_state_dict(start)
    _fit(first, x, y, tmp_path, epochs=1)
    resumed = module()  # random weights: the checkpoint restores the model and the teacher
    _fit(resumed, x, y, tmp_path, epochs=2, ckpt_path=str(tmp_path / "last.ckpt"))
    snapshot = resumed.penalties[0].snapshot
    assert snapshot is not None and snapshot.keys() == start.keys()
    for key, value in start.items():
        assert torch.equal(snapshot[key], value), key
    moved = any(not torch.equal(v, start[k]) for k, v in resumed.model.state_dict().items())
    assert moved  # the model trained on; the teacher did not follow it
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert any(k.endswith("_extra_state") for k in saved["state_dict"])


def test_a_forgetting_fine_tune_keeps_more_of_the_teachers_predictions():
    """Fine-tuned on shuffled labels (pure forgetting), the model keeps the teacher's predicted
    class on more held-out digits with the distillation term than without it."""
    net, x_test, _ = train_digits_cnn(epochs=6)
    x, y = digits_tensors()
    shuffled = y[:512][torch.randperm(512, generator=torch.Generator().manual_seed(0))]
    with torch.no_grad():
        taught = net(x_test).argmax(1)

    def agreement(weight: float) -> float:
        model = TinyCNN()
        model.load_state_dict(net.state_dict())
        terms = [TeacherDistillation(weight=weight)] if weight else []
        module = RobustClassifier(model, terms, optimizer=lambda p: torch.optim.Adam(p, lr=1e-2))
        trainer = pl.Trainer(
            max_epochs=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, limit_val_batches=0, deterministic=True,
        )  # fmt: skip
        torch.manual_seed(0)
        trainer.fit(module, DataLoader(TensorDataset(x[:512], shuffled), batch_size=64))
        with torch.no_grad():
            return float((model.eval()(x_test).argmax(1) == taught).float().mean())

    plain, held = agreement(0.0), agreement(3.0)
    assert held > plain + 0.3, (plain, held)


def test_a_term_without_teacher_file_is_a_plain_module_of_the_classifier():
    term = TeacherDistillation()
    module = RobustClassifier(nn.Sequential(nn.Flatten(), nn.Linear(4, 2)), [term])
    assert "penalties.0._extra_state" in module.state_dict()
    assert not list(term.parameters())


def test_the_command_line_resumes_a_fit_with_the_snapshot_teacher(tmp_path, monkeypatch):
    """`robust-train fit --ckpt_path last` (the CLI's checks of the checkpoint against the model
    included) resumes a fit whose distillation term carries its snapshot as extra state."""
    from robust_train.app.lightning_cli import lightning_main

    monkeypatch.chdir(tmp_path)
    config = tmp_path / "kd.yaml"
    config.write_text(
        "experiment: kd\nseed_everything: 0\n"
        "trainer: {max_epochs: 1, logger: false, limit_train_batches: 3, limit_val_batches: 1,"
        " enable_progress_bar: false, enable_model_summary: false}\n"
        "model:\n  model: {class_path: robust_train.models.SmallCNN,"
        " init_args: {in_channels: 1, num_classes: 10, input_size: 8}}\n"
        "  penalties:\n  - class_path: robust_train.regularizers.TeacherDistillation\n"
        "    init_args: {weight: 1.0}\n"
        "data: {class_path: robust_train.data.DigitsDataModule, init_args: {batch_size: 32}}\n"
    )
    first = lightning_main(["fit", "--config", str(config)])
    start = first.model.penalties[0].snapshot
    resumed = lightning_main(
        ["fit", "--config", str(config), "--trainer.max_epochs", "2", "--ckpt_path", "last"]
    )
    assert resumed.trainer.current_epoch == 2
    snapshot = resumed.model.penalties[0].snapshot
    assert snapshot.keys() == start.keys()
    assert all(torch.equal(snapshot[k], v) for k, v in start.items())
