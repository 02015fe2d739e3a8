"""`robust-train fit` under DDP on the CPU (2 processes, gloo) trains and logs what one process
computes.

Lightning's "ddp" strategy re-launches the command for rank 1, so the fit runs as the console script
in a fresh process (`robust-train fit ...`). It starts from weights pre-trained here (so most
held-out images are classified correctly and get attacked) and takes 3 SGD steps per rank with the
explanation-smoothness penalty (double backprop); one process replays those steps from the
DistributedSampler's shards, averaging the two ranks' gradients as DDP does.

The RobustnessMonitor runs in `on_train_epoch_end`, after the epoch's last optimizer step and its
validation; ModelCheckpoint writes last.ckpt at the end of that same epoch, with no optimizer
step in between, so last.ckpt holds the weights the monitor saw. The test rebuilds the monitor's
held-out subset with the callbacks' own `from_dataloader` (same split, n_samples and seed),
evaluates it in this one process and compares with the values the two ranks logged (each rank
evaluated `subset[rank::2]`; torchmetrics summed the states).
"""

from __future__ import annotations

import copy
import csv
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
import yaml
from torch import Tensor, nn
from torch.utils.data import Dataset, DistributedSampler

from robust_train import RobustClassifier
from robust_train.app.checkpoint_io import instantiate, load_checkpoint
from robust_train.callbacks import RobustnessMonitor
from robust_train.callbacks._base import predict
from robust_train.callbacks._subset import from_dataloader, shard
from robust_train.data import DigitsDataModule
from robust_train.models import SmallCNN
from robust_train.models.config import build_model
from robust_train.regularizers import ExplanationSmoothness, PenaltyTerm
from robust_train.training.precision import penalty_value

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "digits_smoothness.yaml"
SETTINGS = yaml.safe_load(CONFIG.read_text())
LR, STEPS, WORLD = 0.05, 3, 2
MONITOR = dict(
    parts=["fragility", "fidelity"],
    attacks=["topk"],
    n_samples=32,
    seed=0,
    log_images=False,
    max_overhead=None,
    every_n_epochs=1,
)
# Deterministic on a fixed model: the top-k attack (no random start with one restart) and the
# fidelity curves with the mean fill. The Lipschitz search and random_sign draw per-rank noise.
DETERMINISTIC = (
    "robustness/attack/saliency/topk/topk_intersection",
    "robustness/attack/saliency/topk/spearman",
    "robustness/attack/saliency/topk/kendall",
    "robustness/attack/saliency/topk/center_shift",
    "robustness/n_attacked",
    "robustness/fidelity/saliency/mif_auc",
    "robustness/fidelity/saliency/lif_auc",
    "robustness/fidelity/saliency/fidelity",
)


def run_in_session(console, args: list[str], cwd: Path, timeout: float) -> tuple[int, str]:
    """Run `robust-train *args` in a session of its own (a hung fit and the rank Lightning spawned
    both get killed on timeout); returns (exit status, stdout and stderr together)."""
    proc = console.start(
        *args, cwd=cwd, env={"WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}, fresh=True,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the DDP fit timed out after {timeout}s:\n{out[-4000:]}")
    return proc.returncode, out


def logged_metrics(metrics_csv: Path) -> dict[str, float]:
    """Every non-empty value of a CSVLogger metrics.csv (the last row wins per key)."""
    rows = list(csv.DictReader(metrics_csv.open()))
    return {k: float(v) for row in rows for k, v in row.items() if v not in ("", None)}


def rank_batches(
    dataset: Dataset, world_size: int, batch_size: int, n_batches: int, seed: int
) -> list[list[tuple[Tensor, Tensor]]]:
    """The first `n_batches` training batches of each rank, as Lightning's DistributedSampler
    (shuffle, seed = PL_GLOBAL_SEED, epoch 0) hands them out: [rank][batch] -> (x, y)."""
    out = []
    for rank in range(world_size):
        sampler = DistributedSampler(
            dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed
        )
        sampler.set_epoch(0)
        order = list(sampler)
        batches = []
        for b in range(n_batches):
            items = [dataset[i] for i in order[b * batch_size : (b + 1) * batch_size]]
            batches.append((torch.stack([x for x, _ in items]), torch.stack([y for _, y in items])))
        out.append(batches)
    return out


def replay_sgd(
    model: nn.Module,
    batches: list[list[tuple[Tensor, Tensor]]],
    make_penalty: Callable[[], PenaltyTerm],
    lr: float,
    ranks: list[int] | None = None,
) -> None:
    """Plain-SGD steps of RobustClassifier's loss (CE + weight * mean penalty), in place, with the
    gradients of the chosen ranks averaged as DDP's all-reduce does; each rank has its own
    penalty term (its own seeded generator), as each DDP process does."""
    ranks = list(range(len(batches))) if ranks is None else ranks
    terms = {r: make_penalty() for r in ranks}
    params = [p for p in model.parameters() if p.requires_grad]
    for step in range(len(batches[0])):
        total = [torch.zeros_like(p) for p in params]
        for r in ranks:
            x, y = batches[r][step]
            x = x.detach().requires_grad_(True)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            loss = loss + terms[r].weight * penalty_value(terms[r], model, x, y, logits).mean()
            for acc, g in zip(total, torch.autograd.grad(loss, params), strict=True):
                acc += g
        with torch.no_grad():
            for p, g in zip(params, total, strict=True):
                p -= lr * g / len(ranks)


def _datamodule() -> DigitsDataModule:
    dm = instantiate(SETTINGS["data"])
    dm.setup("fit")
    return dm


def _config_model() -> SmallCNN:
    return build_model(SETTINGS["model"]["model"])


def _penalty() -> ExplanationSmoothness:
    config = SETTINGS["model"]["penalties"][0]
    assert config["class_path"].endswith(".ExplanationSmoothness"), config
    return ExplanationSmoothness(**config["init_args"])


def _pretrained(dm: DigitsDataModule) -> SmallCNN:
    """Two quick epochs of Adam, so that the monitor has correctly classified images to attack."""
    torch.manual_seed(0)
    model = _config_model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(2):
        for x, y in dm.train_dataloader():
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    return model


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory, shared_console):
    tmp = tmp_path_factory.mktemp("ddp")
    dm = _datamodule()
    init = _pretrained(dm)
    torch.save(init.state_dict(), tmp / "init.pt")
    override = {
        "model": {
            "init_checkpoint": str(tmp / "init.pt"),
            "optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": LR}},
        },
        "trainer": {
            "strategy": "ddp",
            "accelerator": "cpu",
            "devices": WORLD,
            "max_epochs": 1,
            "limit_train_batches": STEPS,
            "limit_val_batches": 2,
            "num_sanity_val_steps": 0,
            "log_every_n_steps": 1,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "logger": {
                "class_path": "pytorch_lightning.loggers.CSVLogger",
                "init_args": {"save_dir": str(tmp / "logs"), "name": "ddp"},
            },
            "callbacks": [
                {"class_path": "robust_train.callbacks.RobustnessMonitor", "init_args": MONITOR}
            ],
        },
        "checkpoint_root": str(tmp / "ckpt"),
    }
    (tmp / "override.yaml").write_text(yaml.safe_dump(override))
    status, output = run_in_session(
        shared_console,
        [
            "fit",
            "--config",
            str(CONFIG),
            "--config",
            str(tmp / "override.yaml"),
        ],
        cwd=tmp,
        timeout=150,
    )
    assert status == 0, output[-4000:]
    logged = logged_metrics(tmp / "logs" / "ddp" / "version_0" / "metrics.csv")
    return dict(
        ckpt=tmp / "ckpt" / "digits_smoothness" / "latest" / "last.ckpt",
        logged=logged,
        output=output,
        init=init,
        dm=dm,
    )


@pytest.mark.heavy  # two processes of DDP
def test_ddp_ran_two_ranks(ddp_run):
    output, logged = ddp_run["output"], ddp_run["logged"]
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in output and "distributed_backend=gloo" in output
    state = torch.load(ddp_run["ckpt"], map_location="cpu", weights_only=False)
    assert state["epoch"] == 0 and state["global_step"] == STEPS
    for key in ("train/loss_epoch", "train/ce_epoch", "train/penalty/smoothness_epoch", "val/acc"):
        assert torch.isfinite(torch.tensor(logged[key])), key
    # RobustClassifier logs its loss parts with sync_dist (no rank-0-only epoch means).
    assert "It is recommended to use `self.log('train/" not in output


@pytest.mark.heavy  # two processes of DDP
def test_ddp_weights_equal_one_process_replay_of_averaged_gradients(ddp_run):
    """Double backprop under DDP: the trained weights are those of SGD on the two ranks'
    gradients averaged (not on one rank's, not on their sum)."""
    model, _ = load_checkpoint(ddp_run["ckpt"])
    trained = dict(model.named_parameters())
    seed = int(SETTINGS["seed_everything"])
    batches = rank_batches(
        ddp_run["dm"].train_set, WORLD, SETTINGS["data"]["init_args"]["batch_size"], STEPS, seed
    )

    def replay(ranks: list[int]) -> dict[str, torch.Tensor]:
        net = copy.deepcopy(ddp_run["init"])
        replay_sgd(net, batches, _penalty, LR, ranks)
        return dict(net.named_parameters())

    both, rank0 = replay([0, 1]), replay([0])
    init = dict(ddp_run["init"].named_parameters())
    for name, value in trained.items():
        torch.testing.assert_close(value, both[name], rtol=1e-4, atol=1e-6, msg=name)
    moved = sum(float((trained[n] - init[n]).abs().sum()) for n in trained)
    off_rank0 = sum(float((trained[n] - rank0[n]).abs().sum()) for n in trained)
    assert moved > 1e-2 and off_rank0 > 0.1 * moved


@pytest.mark.heavy  # two processes of DDP
def test_ddp_monitor_values_equal_one_process(ddp_run):
    model, data_config = load_checkpoint(ddp_run["ckpt"])
    dm = instantiate(data_config)
    dm.setup("fit")
    inputs, targets = from_dataloader(
        dm.val_dataloader(), MONITOR["n_samples"], MONITOR["seed"], "val dataloader"
    )

    def evaluate(x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        with torch.enable_grad():
            report = RobustnessMonitor(**MONITOR).evaluate(
                model.eval(), x, y, predict(model, x, None)
            )
        return {k: report.scalars[k] for k in DETERMINISTIC}

    one_process, ddp = evaluate(inputs, targets), {k: ddp_run["logged"][k] for k in DETERMINISTIC}
    assert one_process["robustness/n_attacked"] >= 16, "too few correct images to compare attacks"
    for key in DETERMINISTIC:
        assert ddp[key] == pytest.approx(one_process[key], rel=1e-5, abs=1e-6), (
            key,
            ddp,
            one_process,
        )
    # The logged values are the reduction over both shards, not rank 0's own.
    rank0 = evaluate(*shard(inputs, targets, 0, WORLD))
    assert rank0["robustness/n_attacked"] < ddp["robustness/n_attacked"]
    assert any(abs(rank0[k] - ddp[k]) > 1e-4 for k in DETERMINISTIC if k != "robustness/n_attacked")


def test_skip_on_nonfinite_is_refused_under_ddp():
    """Lightning raises on a rank whose training_step returns None under DDP, so
    on_nonfinite='skip' is refused when fit starts; 'raise' works (every rank stops)."""
    trainer = pl.Trainer(
        strategy="ddp", accelerator="cpu", devices=WORLD, logger=False, enable_checkpointing=False
    )  # built, not launched
    assert trainer.world_size == WORLD
    skipping = RobustClassifier(SmallCNN(width=8), on_nonfinite="skip")
    skipping.trainer = trainer
    with pytest.raises(ValueError, match="on_nonfinite.*'skip'.*distributed.*'raise'"):
        skipping.on_fit_start()
    raising = RobustClassifier(SmallCNN(width=8), on_nonfinite="raise")
    raising.trainer = trainer
    raising.on_fit_start()
    assert raising.training_seconds >= 0
