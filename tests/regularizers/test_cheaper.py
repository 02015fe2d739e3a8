"""Cheaper penalties (`every_n_steps`, `batch_fraction` on every PenaltyTerm): the penalty really
is skipped / computed on the fraction (calls counted, directly and in a real Lightning fit),
every_n_steps is scaled by k, the options reach configs, and bad values fail before any work
(one line, exit code 2, from the console script in a process of the warm console)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import yaml
from torch.utils.data import DataLoader, TensorDataset

from robust_train import RobustClassifier
from robust_train.regularizers import (
    PENALTIES,
    AdversarialTraining,
    ExplanationSmoothness,
    IGSumNorm,
    PenaltyTerm,
    get_penalty,
)
from tests.support.helpers import SmoothMLP, TinyCNN, digits_tensors

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


class Counting(PenaltyTerm):
    """Sum of squared inputs per image; records the batch size of every real computation."""

    double_backprop = False

    def __init__(self, weight: float = 1.0, name: str | None = None) -> None:
        super().__init__(weight, name)
        self.seen: list[int] = []
        self.grad_flags: list[bool] = []
        self.logits_given: list[bool] = []

    def penalty(self, model, inputs, target, logits):
        self.seen.append(inputs.shape[0])
        self.grad_flags.append(inputs.requires_grad)
        self.logits_given.append(logits is not None)
        return model(inputs).pow(2).sum(1)


def test_every_n_steps_skips_and_scales():
    model = SmoothMLP()
    x, y = torch.rand(4, 1, 8, 8), torch.tensor([0, 1, 2, 3])
    term = Counting(every_n_steps=3)
    values = [term(model, x, y) for _ in range(7)]
    assert term.seen == [4, 4, 4]  # calls 0, 3 and 6 only
    full = model(x).pow(2).sum(1)
    for i, v in enumerate(values):
        expected = 3 * full if i % 3 == 0 else torch.zeros(4)
        torch.testing.assert_close(v, expected)
    # averaged over a whole cycle it is the full penalty
    torch.testing.assert_close(torch.stack(values[:6]).mean(0), full)


@pytest.mark.parametrize(("fraction", "rows"), [(0.5, 4), (0.25, 2), (0.3, 3), (0.01, 1)])
def test_batch_fraction_computes_on_the_first_rows(fraction, rows):
    model = SmoothMLP()
    x = torch.rand(8, 1, 8, 8).requires_grad_(True)
    y = torch.arange(8)
    term = Counting(batch_fraction=fraction)
    value = term(model, x, y, model(x))
    assert term.seen == [rows] and term.grad_flags == [True] and term.logits_given == [False]
    torch.testing.assert_close(value, model(x[:rows]).pow(2).sum(1))


def test_a_real_term_on_a_fraction_equals_the_term_on_those_images():
    model = TinyCNN()
    x, y = torch.rand(8, 1, 8, 8), torch.arange(8)
    cheap = get_penalty("lga", radius=0.2, seed=0, batch_fraction=0.5)
    full = get_penalty("lga", radius=0.2, seed=0)
    torch.testing.assert_close(cheap(model, x, y), full(model, x[:4], y[:4]))


def test_in_a_real_fit_the_penalty_runs_on_every_kth_step_and_on_the_fraction():
    x, y = digits_tensors()
    train = DataLoader(TensorDataset(x[:256], y[:256]), batch_size=32)
    term = Counting(name="counting", every_n_steps=2, batch_fraction=0.25)
    module = RobustClassifier(TinyCNN(), [term])
    trainer = pl.Trainer(
        max_steps=7, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(module, train)
    assert term.calls == 7 and term.seen == [8, 8, 8, 8]  # steps 0, 2, 4, 6; 25% of 32


def test_every_term_takes_the_options_in_its_signature():
    for name, cls in PENALTIES.items():
        params = inspect.signature(cls.__init__).parameters
        assert {"every_n_steps", "batch_fraction"} <= set(params), name


def test_the_options_reach_a_config():
    from jsonargparse import ArgumentParser

    parser = ArgumentParser()
    parser.add_argument("--penalty", type=PenaltyTerm)
    cfg = parser.parse_string(
        "penalty: {class_path: robust_train.regularizers.ExplanationSmoothness, "
        "init_args: {radius: 0.2, every_n_steps: 4, batch_fraction: 0.5}}"
    )
    term = parser.instantiate(cfg).penalty
    assert isinstance(term, ExplanationSmoothness)
    assert (term.every_n_steps, term.batch_fraction, term.options.radius) == (4, 0.5, 0.2)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"every_n_steps": 0}, ValueError, "`every_n_steps` must be > 0, got 0"),
        ({"every_n_steps": 1.5}, TypeError, "`every_n_steps` must be an int, got 1.5"),
        ({"every_n_steps": True}, TypeError, "`every_n_steps` must be an int, got True"),
        ({"batch_fraction": 0.0}, ValueError, "`batch_fraction` must be > 0, got 0.0"),
        ({"batch_fraction": 1.5}, ValueError, r"`batch_fraction` must lie in \(0, 1\], got 1.5"),
        ({"batch_fraction": "half"}, TypeError, "`batch_fraction` must be a number, got 'half'"),
    ],
)
def test_bad_values_fail_at_construction(kwargs, error, message):
    with pytest.raises(error, match=message):
        get_penalty("smoothness", **kwargs)


@pytest.mark.parametrize("cls", [AdversarialTraining, IGSumNorm])
def test_terms_that_replace_the_task_loss_refuse(cls):
    with pytest.raises(ValueError, match="`batch_fraction` 0.5 is not available for"):
        cls(batch_fraction=0.5)
    with pytest.raises(ValueError, match="`every_n_steps` 2 is not available for"):
        cls(every_n_steps=2)
    assert cls(every_n_steps=1, batch_fraction=1.0).every_n_steps == 1


def test_console_script_reports_a_bad_value_in_one_line(tmp_path: Path, cli):
    """Through the script's entry point in-process (the `cli` fixture): the refusal comes before
    any work, so a process of its own shows nothing more."""
    config = yaml.safe_load((CONFIGS / "digits_smoothness.yaml").read_text())
    config["model"]["penalties"][0]["init_args"]["every_n_steps"] = 0
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(config))
    result = cli("fit", "--config", str(tmp_path / "bad.yaml"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("robust-train: error: "), result.stderr
    assert "every_n_steps" in errors[0] and "0" in errors[0], errors[0]
    assert not (tmp_path / "checkpoints").exists()


class _RecordsInputs(torch.nn.Module):
    """TinyCNN that records whether each forward's input requires grad, and its batch size."""

    def __init__(self) -> None:
        super().__init__()
        self.net = TinyCNN()
        self.seen: list[tuple[int, bool]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((x.shape[0], x.requires_grad))
        return self.net(x)


def test_a_fraction_leaves_the_full_batch_without_an_input_gradient_and_changes_nothing_else(
    monkeypatch,
):
    """With `batch_fraction` < 1 the term explains its own subset, so the module's clean forward
    runs on inputs that do not require grad (no input gradient of the whole batch in the
    backward); the subset still does, and the loss and every parameter gradient are those of the
    clean forward on grad-requiring inputs (the earlier path, forced here)."""
    x, y = torch.rand(16, 1, 8, 8), torch.arange(16) % 10
    grads = []
    for force in (False, True):
        torch.manual_seed(0)
        model = _RecordsInputs()
        term = get_penalty("smoothness", radius=0.2, distance="cosine", seed=0, batch_fraction=0.25)
        assert term.reuses_clean_forward is False
        with monkeypatch.context() as patch:
            if force:  # the earlier behaviour: every needs_input_grad term made x require grad
                patch.setattr(ExplanationSmoothness, "reuses_clean_forward", True)
            loss = RobustClassifier(model, [term]).training_step((x, y), 0)
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
        assert model.seen[0] == (16, force)  # the whole batch: an input gradient only if forced
        assert (4, True) in model.seen[1:]  # the term's quarter, explained with input grad
    torch.testing.assert_close(grads[0][0], grads[1][0])
    for a, b in zip(grads[0][1], grads[1][1], strict=True):
        torch.testing.assert_close(a, b)
