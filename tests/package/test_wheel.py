"""The package as a user installs it: the sdist and the wheel built from it (PyPA's `build`), the
wheel installed into a fresh virtual environment, the commands run from an empty folder outside
the repository with PYTHONPATH unset.

Installing torch and the other dependencies anew costs minutes and gigabytes, so the fresh
environment borrows the running interpreter's site-packages folders through a .pth file: a
folder a .pth file adds is put on sys.path without processing the .pth files inside it, so the
development install of robust_train (an editable finder registered by a .pth file) is not
carried over; a folder that holds robust_train itself is not borrowed. The test checks both:
robust_train cannot be imported before the wheel is installed, and afterwards it is imported from
the fresh environment.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tarfile
import zipfile
from importlib.machinery import PathFinder
from pathlib import Path

import pytest
import torch

import robust_train
from robust_train.core.resources import list_shipped

pytestmark = pytest.mark.heavy  # the wheel and sdist built and installed into a fresh venv

REPO = Path(__file__).resolve().parents[2]
SHIPPED = list_shipped()
# One process of the fresh venv for most tests (each `robust-train` process pays seconds of
# imports): the entry point of the installed console script, `robust_train.app.cli.main`, prints
# every shipped config, evaluates a shipped checkpoint by name, fine-tunes a shipped config, locates
# and copies a shipped file and runs the quick demo (one epoch of each fit, 4 test images), each in
# its own folder; stdout, stderr and exit code of each as JSON. (The console script itself runs
# from the venv in test_the_console_script_lists_the_assets.)
WHEEL_COMMANDS = """
import contextlib, io, json, os, sys, yaml
from robust_train.app.cli import main
from robust_train.core.resources import list_shipped


def run(argv, cwd):
    os.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stop:
            code = stop.code or 0
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


work, evaluate, fit, assets, demo = sys.argv[1:6]
seen = {}
for name in list_shipped("configs"):
    done = run(["fit", "--config", name, "--print_config"], work)
    parsed = yaml.safe_load(done["stdout"]) if done["code"] == 0 else {}
    init = (parsed.get("model") or {}).get("init_checkpoint")
    seen[name] = [done["code"], parsed.get("experiment"), init]
results = {"configs": seen}
results["evaluate"] = run(
    ["evaluate", "--ckpt", "mnist5k_robust", "--n-samples", "8", "--no-ensemble", "--n-steps", "2",
     "--ig-steps", "3", "--no-wandb", "--no-progress"], evaluate)
results["fit"] = run(
    ["fit", "--config", "configs/finetune_digits_checkpoint.yaml", "--trainer.max_epochs=1",
     "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
     "--trainer.logger=false", "--trainer.enable_progress_bar=false"], fit)
results["assets_path"] = run(["assets", "path", "mnist5k_robust.ckpt"], assets)
results["assets_copy"] = run(["assets", "copy", "configs/mnist5k_baseline.yaml", "."], assets)
results["demo"] = run(
    ["demo", "--quick", "--epochs", "1", "--n-samples", "4", "--seed", "0", "--out", "run",
     "--trainer.enable_progress_bar=false"], demo)
print(json.dumps(results))
"""


def _env(venv: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.pop("ROBUST_TRAIN_DEBUG", None)
    env.pop("VIRTUAL_ENV", None)
    env.update(OMP_NUM_THREADS="1", WANDB_MODE="offline", WANDB_SILENT="true")
    if venv is not None:
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(*command: str | Path, cwd: Path, venv: Path | None = None, timeout: float = 600):
    return subprocess.run(
        [str(c) for c in command], cwd=cwd, env=_env(venv), capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"{proc.args}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, Path]:
    """The sdist, and the wheel built from the unpacked sdist (what `python -m build` does)."""
    out = tmp_path_factory.mktemp("dist")
    # Without an isolated build environment (each costs a venv and a setuptools install): `build`
    # still checks that this environment satisfies the build-system requirements.
    _ok(_run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, REPO, cwd=out))
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def _borrowed_site_folders() -> list[str]:
    """The running interpreter's site-packages folders from which robust_train cannot be
    imported (a plain folder on sys.path)."""
    return [
        p
        for p in dict.fromkeys(sys.path)
        if Path(p).name in ("site-packages", "dist-packages")
        and Path(p).is_dir()
        and PathFinder.find_spec("robust_train", [p]) is None
    ]


@pytest.fixture(scope="module")
def fresh(dist, tmp_path_factory) -> dict[str, Path]:
    """A fresh venv with the wheel installed (`pip install --no-deps`), and an empty folder. The
    venv is made without its own pip (installing one costs seconds): the borrowed folders hold
    this interpreter's pip, which installs into the venv that runs it."""
    root = tmp_path_factory.mktemp("fresh")
    venv, work = root / "venv", root / "work"
    work.mkdir()
    _ok(_run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=root))
    python = venv / "bin" / "python"
    purelib = _ok(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                       cwd=work)).strip()  # fmt: skip
    (Path(purelib) / "_borrowed_dependencies.pth").write_text("\n".join(_borrowed_site_folders()))
    probe = "import importlib.util as u; print(u.find_spec('robust_train'), u.find_spec('torch'))"
    before = _ok(_run(python, "-c", probe, cwd=work)).split()
    assert before[0] == "None", "the fresh venv sees a robust_train before the wheel is installed"
    assert before[1] != "None", "the borrowed folders do not hold the dependencies"
    _ok(_run(python, "-m", "pip", "install", "--no-deps", "-q", dist["wheel"], cwd=work))
    return {"venv": venv, "python": python, "work": work}


def test_the_wheel_carries_package_data_license_and_version(dist):
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        names = wheel.namelist()
        links = [i.filename for i in wheel.infolist() if stat.S_ISLNK(i.external_attr >> 16)]
        info = f"robust_train-{robust_train.__version__}.dist-info"
        metadata = wheel.read(f"{info}/METADATA").decode()
        license_text = wheel.read(f"{info}/licenses/LICENSE").decode()
    assert robust_train.__version__ == "0.2.0"
    assert {f"robust_train/assets/{name}" for name in SHIPPED} <= set(names)
    assert "robust_train/assets/results/demo_claims.json" in names  # the demo's claim ranges
    assert "robust_train/py.typed" in names and not links
    assert not any(n.startswith(("configs/", "checkpoints/", "tests/")) for n in names)
    assert f"Version: {robust_train.__version__}\n" in metadata
    assert "License-Expression: Apache-2.0\n" in metadata and "License-File: LICENSE\n" in metadata
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text


def test_the_sdist_carries_the_sources_license_and_package_data(dist):
    top = f"robust_train-{robust_train.__version__}"
    with tarfile.open(dist["sdist"]) as sdist:
        members = {m.name: m for m in sdist.getmembers()}
    for name in ("LICENSE", "README.md", "pyproject.toml", "robust_train/py.typed"):
        assert f"{top}/{name}" in members
    assert {f"{top}/robust_train/assets/{name}" for name in SHIPPED} <= set(members)
    assert not [m for m in members.values() if m.issym() or m.islnk()]


def test_the_installed_package_is_the_wheel_not_the_checkout(fresh):
    code = (
        "import robust_train, importlib.metadata as m, importlib.resources as r; "
        "print(robust_train.__file__); print(m.version('robust-train')); "
        "print(m.metadata('robust-train')['License-Expression']); "
        "print((r.files('robust_train') / 'py.typed').is_file())"
    )
    where, version, license_id, typed = _ok(
        _run(fresh["python"], "-c", code, cwd=fresh["work"])
    ).split()
    assert Path(where).resolve().is_relative_to(fresh["venv"].resolve())
    assert (version, license_id, typed) == (robust_train.__version__, "Apache-2.0", "True")


def test_the_console_script_lists_the_assets(fresh):
    """The installed console script, from the venv's bin folder, in a process of its own."""
    listing = _ok(_run("robust-train", "assets", "list", cwd=fresh["work"], venv=fresh["venv"]))
    assert all(name in listing for name in SHIPPED)


def test_assets_are_located_and_copied(fresh, commands):
    path = _done(commands["assets_path"]).strip()
    assert Path(path).is_file() and Path(path).resolve().is_relative_to(fresh["venv"].resolve())
    _done(commands["assets_copy"])
    assert (fresh["work"] / "assets" / "mnist5k_baseline.yaml").is_file()


def test_quick_demo_runs_from_an_empty_folder(fresh, commands):
    work = fresh["work"] / "demo"
    out = _done(commands["demo"])
    results = json.loads((work / "run" / "results.json").read_text())
    assert set(results) == {"natural", "robust"} and (work / "run" / "report.md").is_file()
    assert "claim:" in out
    for name in ("natural", "robust"):  # each fit's checkpoint, under --out of the empty folder
        checkpoint = Path(results[name]["checkpoint"])
        checkpoint = checkpoint if checkpoint.is_absolute() else work / checkpoint
        assert checkpoint.is_file() and checkpoint.resolve().is_relative_to(work.resolve())


@pytest.fixture(scope="module")
def commands(fresh) -> dict:
    """WHEEL_COMMANDS run by the fresh venv's interpreter (the installed package) from the empty
    folder; the fine-tune's folder holds a decoy at the config's relative init_checkpoint path."""
    work = fresh["work"]
    (work / "fit" / "checkpoints").mkdir(parents=True)
    (work / "fit" / "checkpoints" / "digits_baseline.ckpt").write_bytes(b"not a checkpoint")
    folders = [work, work / "evaluate", work / "fit", work / "assets", work / "demo"]
    for folder in folders[1:]:
        folder.mkdir(exist_ok=True)
    return json.loads(_ok(_run(fresh["python"], "-c", WHEEL_COMMANDS, *folders, cwd=work)))


def _done(result: dict) -> str:
    assert result["code"] == 0, f"{result['stdout'][-2000:]}\n{result['stderr'][-4000:]}"
    return result["stdout"]


def test_evaluate_a_shipped_checkpoint_by_name(fresh, commands):
    work = fresh["work"] / "evaluate"
    _done(commands["evaluate"])
    assert (
        "`--ckpt` 'mnist5k_robust': using the shipped checkpoint" in commands["evaluate"]["stderr"]
    )
    (results,) = (work / "runs" / "eval" / "mnist5k_robust").glob("*/results.json")
    stored = json.loads(results.read_text())["mnist5k_robust"]
    assert Path(stored["checkpoint_path"]).is_relative_to(fresh["venv"].resolve())
    assert stored["measures"]["split_accuracy"] > 0.9


def test_every_shipped_config_parses_and_the_readme_names_only_shipped_ones(fresh, commands):
    named = set(re.findall(r"configs/[\w.-]+\.yaml", (REPO / "README.md").read_text()))
    assert named and named <= set(list_shipped("configs")), named - set(list_shipped("configs"))
    seen = commands["configs"]
    assert sorted(seen) == list_shipped("configs")
    for name, (code, experiment, init) in seen.items():
        assert code == 0 and experiment, name
        if init is not None:  # a fine-tune: it starts from a checkpoint of the package
            assert Path(init).is_file() and Path(init).is_relative_to(fresh["venv"].resolve())


def test_a_shipped_finetune_fits_from_the_wheel_with_the_shipped_checkpoint(fresh, commands):
    """A file at the config's relative init_checkpoint path in the working folder is not read."""
    work = fresh["work"] / "fit"
    _done(commands["fit"])
    (last,) = (work / "checkpoints").glob("*/latest/last.ckpt")
    stored = torch.load(last, map_location="cpu", weights_only=True)
    init = Path(stored["hyper_parameters"]["init_checkpoint"])
    assert init.name == "digits_baseline.ckpt" and init.is_relative_to(fresh["venv"].resolve())
    assert stored["epoch"] == 0
