"""`--accelerator` / `--devices` (Lightning's names) and the whole evaluation's time left."""

from __future__ import annotations

import pytest
import torch

from robust_train.core import devices
from robust_train.core.devices import parse_devices, resolve_device
from robust_train.evaluation import EvaluationSettings
from robust_train.evaluation import engine as engine_module
from robust_train.evaluation.engine import build_parts, run_parts, total_work

QUICK = ["--n-samples", "6", "--n-steps", "2", "--lipschitz-samples", "2", "--fidelity-steps"]
QUICK += ["3", "--parts", "fragility", "--attacks", "topk", "--explainers", "saliency"]
QUICK += ["--search-queries", "20"]  # the ensemble's random search: a few queries show the device


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(devices, "_mps_available", lambda: False)


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


def test_auto_is_the_cpu_without_a_gpu(no_gpu):
    assert resolve_device() == torch.device("cpu")
    assert resolve_device("auto", 1) == torch.device("cpu")
    assert resolve_device("CPU", "auto") == torch.device("cpu")


def test_mocked_gpus_are_picked_by_lightning_index_forms(two_gpus):
    assert resolve_device() == torch.device("cuda", 0)
    assert resolve_device("gpu", "1,") == torch.device("cuda", 1)
    assert resolve_device("cuda", "[1]") == torch.device("cuda", 1)
    assert resolve_device("gpu", [0]) == torch.device("cuda", 0)
    with pytest.raises(ValueError, match=r"`devices` '3,': this machine has 2 CUDA device"):
        resolve_device("gpu", "3,")


@pytest.mark.parametrize("value", [2, "2", "-1", "0,1", [0, 1]])
def test_more_than_one_device_is_refused(value):
    with pytest.raises(ValueError, match="an evaluation runs on one"):
        parse_devices(value)


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="`accelerator` must be one of auto, cpu, gpu"):
        resolve_device("tpu")
    with pytest.raises(ValueError, match="`devices` must be 'auto', 1, or one device index"):
        parse_devices("two")


@pytest.mark.parametrize("command", ["evaluate", "compare", "certify"])
def test_unavailable_cuda_is_one_line_exit_2_before_any_work(cli, no_gpu, tmp_path, command):
    out = tmp_path / "out"
    ckpts = ["--ckpt", "digits_robust"] if command != "compare" else ["digits_robust"] * 2
    if command == "compare":
        ckpts += ["--names", "a", "b"]
    done = cli(command, *ckpts, "--accelerator", "cuda", "--out", str(out))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()[-1:]
    assert line.startswith("robust-train: error: `--accelerator` 'cuda': no CUDA GPU")
    assert "`--accelerator cpu`" in line
    assert not out.exists()


def test_model_and_images_run_on_the_resolved_device(cli, monkeypatch, tmp_path):
    """The resolver's device reaches the weights' loading and the engine's model and images."""
    from robust_train.app import checkpoint_io, commands
    from robust_train.evaluation import split

    asked: list[tuple[str, str]] = []
    seen: dict[str, torch.device] = {}
    real_loader = checkpoint_io.FitCheckpoint.classifier
    real_engine = split.evaluate_classifier

    def resolver(args):
        asked.append((args.accelerator, args.devices))
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")

    def loader(self, device="cpu"):
        seen["loaded"] = torch.device(device)
        return real_loader(self, device)

    def engine(model, inputs, labels, settings, **kwargs):
        seen["model"] = next(model.parameters()).device
        seen["inputs"], seen["labels"] = inputs.device, labels.device
        return real_engine(model, inputs, labels, settings, **kwargs)

    monkeypatch.setattr(commands, "device_from", resolver)
    monkeypatch.setattr(checkpoint_io.FitCheckpoint, "classifier", loader)
    monkeypatch.setattr(split, "evaluate_classifier", engine)
    done = cli("evaluate", "--ckpt", "digits_robust", *QUICK, "--no-progress", "--devices", "1",
               "--out", str(tmp_path / "o"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert asked == [("auto", "1")]
    wanted = seen["loaded"]
    assert wanted.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert seen["model"].type == seen["inputs"].type == seen["labels"].type == wanted.type
    assert f"on {wanted}" in done.stderr


def test_total_work_is_known_before_any_work():
    s = EvaluationSettings(
        parts=("fragility", "lipschitz"), explainers=("saliency",), attacks=("random_sign", "topk"),
        n_steps=4, noise_draws=3, lipschitz_samples=5, input_reference=False, ensemble=False,
    )  # fmt: skip
    # in attack steps: random_sign draws 3 (+1 clean map), a fifth of a step each; topk 1 restart
    # x (4 steps + the start's map); the chance levels' 32 random maps (a forward each);
    # Lipschitz 5 + 1 maps (the ensemble's members: tests/evaluation/test_time_left.py)
    per_image = 4 * 0.2 + 4.2 + 32 / 15 + 6 * 0.2
    assert total_work(build_parts(s, 8, 8), 10) == pytest.approx(per_image * 10)


def test_progress_reaches_the_total_in_steps_with_time_left(monkeypatch, capsys):
    bars = []
    real = engine_module.progress_bar

    def spy(parts, n_images, *, enabled):
        bar = real(parts, n_images, enabled=enabled)
        updates: list[float] = []
        update = bar.update
        bar.update = lambda n=1: (updates.append(bar.n + n), update(n))[1]
        bars.append((bar, updates))
        return bar

    monkeypatch.setattr(engine_module, "progress_bar", spy)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3), torch.nn.Softplus(),
                              torch.nn.Linear(3, 2))  # fmt: skip
    s = EvaluationSettings(
        parts=("fragility", "lipschitz"), explainers=("saliency",), n_steps=2,
        attacks=("random_sign", "topk", "mass_center"), lipschitz_samples=2, search_queries=20,
    )  # fmt: skip
    x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 0, 1])
    run_parts(net, x, y, s, progress=True)
    ((bar, updates),) = bars
    assert bar.total == total_work(build_parts(s, 4, 4), 4)
    assert updates[-1] == pytest.approx(bar.total)
    assert updates == sorted(updates) and len(set(updates)) >= 4  # each attack moves it
    assert "left" in capsys.readouterr().err
