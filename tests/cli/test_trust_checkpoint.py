"""Checkpoints you are handed, through the console script (`evaluate` in a process of its own, the
warm console's, tests/support/warm_console.py; the others in-process, through the `cli` fixture
of tests/support/in_process.py): a file that carries a pickled call, or records a class path
naming `subprocess.Popen`, runs nothing; the command exits with 2 and one line naming the file;
`--trust-checkpoint` is the explicit opt-in."""

from __future__ import annotations

import copy
import fractions
import os
import shutil
from pathlib import Path

import pytest
import torch

from robust_train.core.resources import shipped_checkpoint

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = shipped_checkpoint("digits_baseline")
TINY_EVAL = [
    "--n-samples",
    "4",
    "--parts",
    "fragility",
    "--explainers",
    "saliency",
    "--attacks",
    "topk",
    "--no-ensemble",
    "--n-steps",
    "1",
    "--no-progress",
    "--no-wandb",
]


class _Marker:
    """Pickles as a call that creates the file `path` when unpickled (what an attacker ships)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def _one_error_line(result, *fragments: str) -> str:
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("robust-train: error: ")]
    assert len(errors) == 1, result.stderr[-3000:]
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    assert "internal error" not in errors[0]
    return errors[0]


def _shipped() -> dict:
    return torch.load(SHIPPED, map_location="cpu", weights_only=True)


@pytest.fixture
def crafted(tmp_path: Path) -> dict[str, Path]:
    """The shipped digits checkpoint with (a) a pickled os.system call, (b) a datamodule and (c) a
    model recorded as subprocess.Popen creating a marker file, (d) a harmless Python object."""
    files = {}
    evil = _shipped()
    evil["hyper_parameters"]["payload"] = _Marker(tmp_path / "MARKER_pickle")
    torch.save(evil, files.setdefault("pickle", tmp_path / "evil.ckpt"))
    for part in ("datamodule", "model"):
        ckpt = _shipped()
        popen = {"class_path": "subprocess.Popen", "init_args": {"args": ["touch", "x"]}}
        popen["init_args"]["args"][1] = str(tmp_path / f"MARKER_{part}")
        ckpt["robust_train"][part] = copy.deepcopy(popen)
        torch.save(ckpt, files.setdefault(part, tmp_path / f"popen_{part}.ckpt"))
    harmless = _shipped()
    harmless["hyper_parameters"]["ratio"] = fractions.Fraction(1, 3)
    torch.save(harmless, files.setdefault("object", tmp_path / "object.ckpt"))
    shutil.copy(SHIPPED, files.setdefault("good", tmp_path / "good.ckpt"))
    return files


@pytest.mark.slow
def test_crafted_checkpoints_run_nothing_and_exit_2(tmp_path: Path, crafted, console, cli):
    evil = str(crafted["pickle"])
    fit_args = [
        "fit",
        "--config",
        str(ROOT / "configs" / "digits_baseline.yaml"),
        "--trainer.logger=false",
        "--ckpt_path",
        evil,
    ]
    cases = {
        "evaluate": ["evaluate", "--ckpt", evil, *TINY_EVAL],
        "compare": ["compare", str(crafted["good"]), evil, "--out", str(tmp_path / "cmp")],
        "export": ["export", evil, str(tmp_path / "small.ckpt")],
        "certify": ["certify", "--ckpt", evil, "--n-images", "2", "--no-progress"],
        "fit": fit_args,
        "popen_data": ["evaluate", "--ckpt", str(crafted["datamodule"]), *TINY_EVAL],
        "popen_model": ["evaluate", "--ckpt", str(crafted["model"]), *TINY_EVAL],
    }
    out = {  # a process of its own once (the warm console's); the other commands in-process
        k: (console if k == "evaluate" else cli)(*args, cwd=tmp_path) for k, args in cases.items()
    }

    for name in ("evaluate", "compare", "export", "certify"):
        line = _one_error_line(out[name], "evil.ckpt", "posix.system", "--trust-checkpoint")
        assert "refused" in line
    _one_error_line(out["fit"], "evil.ckpt", "--weights_only false")
    _one_error_line(out["popen_data"], "subprocess.Popen", "popen_datamodule.ckpt")
    _one_error_line(out["popen_model"], "subprocess.Popen", "popen_model.ckpt")
    assert sorted(p.name for p in tmp_path.glob("MARKER*")) == []  # nothing ran
    assert not (tmp_path / "small.ckpt").exists() and not (tmp_path / "cmp").exists()
    assert not (tmp_path / "runs").exists()  # compare refused before evaluating good.ckpt


def test_opt_in_loads_and_export_writes_a_tensors_only_copy(tmp_path: Path, crafted, cli):
    src, dst = crafted["object"], tmp_path / "shared.ckpt"
    refused = cli("export", src, dst)
    assert refused.returncode == 2 and "Fraction" in refused.stderr
    assert cli("export", src, dst, "--trust-checkpoint").returncode == 0
    copy_ = torch.load(dst, map_location="cpu", weights_only=True)  # plain values only now
    assert copy_["hyper_parameters"]["ratio"] == "Fraction(1, 3)"
    out = tmp_path / "eval"
    assert cli("evaluate", "--ckpt", dst, "--out", out, *TINY_EVAL).returncode == 0
    assert (out / "results.json").is_file()
    trusted = tmp_path / "eval_trusted"
    args = ["evaluate", "--ckpt", src, "--out", trusted, *TINY_EVAL]
    assert cli(*args).returncode == 2 and not trusted.exists()
    assert cli(*args, "--trust-checkpoint").returncode == 0
    assert (trusted / "results.json").is_file()


def test_data_config_class_path_is_checked_before_it_is_called(tmp_path: Path, cli):
    config = tmp_path / "data.yaml"
    marker = tmp_path / "MARKER_yaml"
    config.write_text(
        f"data:\n  class_path: subprocess.Popen\n  init_args: {{args: [touch, {marker}]}}\n"
    )
    done = cli("evaluate", "--ckpt", SHIPPED, "--data-config", config, *TINY_EVAL,
               "--out", tmp_path / "e")  # fmt: skip
    assert done.returncode == 2
    assert "is not a pytorch_lightning.LightningDataModule subclass" in done.stderr
    assert not marker.exists()
