"""Shared test setup: one torch thread per process, seeds, and the tiers.

The fast tier (`make test-fast`, `-m "not slow"`) runs in-process only: a test that starts a
subprocess there fails, naming the fix (mark it `slow`, or call `robust_train.app.cli.main`
in-process). `shared_artifact` builds an expensive artifact (a trained checkpoint) once per test
run, even across pytest-xdist workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# Small tensors: one thread is fastest, and keeps parallel test runs from oversubscribing the cores.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _restore_determinism():
    """A fit with `trainer.deterministic: true` in this process turns deterministic algorithms on
    for the whole process (Lightning never turns them off); later tests must not inherit that
    (Captum's DeepLift reference uses max_unpool2d, which has no deterministic kernel)."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


@pytest.fixture(scope="session")
def trained_digits(tmp_path_factory):
    """(model, x_test, y_test): a TinyCNN trained a few seconds on digits, shared by the session:
    trained once per run (`shared_artifact`), each test process rebuilding the same model (its
    weights and the .grad its last step left, in eval mode) from the saved copy."""
    from helpers import TinyCNN, train_digits_cnn

    def build(folder: Path) -> None:
        model, x, y = train_digits_cnn()
        grads = {name: p.grad for name, p in model.named_parameters()}
        torch.save({"state": model.state_dict(), "grads": grads, "x": x, "y": y}, folder / "m.pt")

    saved = torch.load(shared_artifact(tmp_path_factory, "trained-digits", build) / "m.pt")
    model = TinyCNN(seed=0)  # what train_digits_cnn builds
    model.load_state_dict(saved["state"])
    for name, p in model.named_parameters():
        p.grad = saved["grads"][name]
    return model.eval(), saved["x"], saved["y"]


PYTHON_BIN = Path(sys.executable).parent


def _starts_python(args: object) -> bool:
    """Whether a command line runs a Python process: this interpreter, or a console script
    beside it (robust-train, the benchmarks' modules)."""
    first = args if isinstance(args, (str, os.PathLike)) else next(iter(args), "")  # type: ignore[call-overload]
    program = Path(str(first).split()[0]) if str(first).strip() else Path()
    return program.name.startswith("python") or program.parent == PYTHON_BIN


@pytest.fixture(autouse=True)
def _fast_tier_runs_in_process(request, monkeypatch):
    """A test outside the slow tier never starts a Python subprocess (the console script, a
    fresh interpreter, a benchmark module): each costs seconds of imports, so they belong to the
    full suite. Other programs (W&B's service, git) are not affected."""
    if request.node.get_closest_marker("slow") is not None:
        return
    real = subprocess.Popen.__init__

    def guarded(self, args, *rest, **kwargs):
        if _starts_python(args):
            raise AssertionError(
                f"{request.node.nodeid} starts a Python subprocess ({args!r:.120}) but is not "
                "marked @pytest.mark.slow: mark it slow, or call robust_train.app.cli.main([...])"
                " in-process"
            )
        real(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)


def shared_artifact(
    factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]
) -> Path:
    """`build(folder)` once per test run, shared by every pytest-xdist worker: the first worker
    to ask builds it under a file lock, the others wait and reuse it. Returns the folder."""
    from filelock import FileLock

    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's base folder, shared by the workers
    folder = root / f"shared-{name}"
    with FileLock(str(folder) + ".lock"):
        done = folder / ".built.json"
        if not done.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            build(folder)
            done.write_text(json.dumps({"name": name}))
    return folder


@pytest.fixture(scope="session")
def _warm_server(tmp_path_factory):
    """The warm console server of the whole run, shared by the pytest-xdist workers."""
    from warm_console import WarmConsole

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return WarmConsole.shared(root.parent, run_pid=os.getppid())  # pytest's main process
    return WarmConsole.shared(root, run_pid=os.getpid())


@pytest.fixture
def warm_console(request):
    """The warm console script (tests/warm_console.py): `robust-train` commands in processes of
    their own, forked from an interpreter that imported the package's commands once (started by
    the first test of the run that asks). Slow tier only: it starts a Python process, and the
    fast tier calls `robust_train.app.cli.main` in-process instead."""
    if request.node.get_closest_marker("slow") is None:
        raise AssertionError(f"{request.node.nodeid} uses warm_console but is not marked slow")
    return request.getfixturevalue("_warm_server")


@pytest.fixture
def cli(monkeypatch, capsys):
    """`cli(*args, cwd=...)` -> CompletedProcess of `robust-train *args` run IN this process
    (robust_train.app.cli.main, the console script's entry point; stdout/stderr captured), for
    the fast tier: what the command prints and returns, without a subprocess's imports."""
    import logging

    from robust_train.app.cli import main

    def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None):
        with monkeypatch.context() as patch:
            if cwd is not None:
                patch.chdir(cwd)
            for key, value in (env or {}).items():
                patch.setenv(key, value)
            patch.delenv("ROBUST_TRAIN_DEBUG", raising=False)
            capsys.readouterr()
            # Lightning's log lines reach the console script's stderr; here its handler holds
            # the stream of the moment it was imported, so echo them to the captured stderr.
            echo = logging.StreamHandler(sys.stderr)
            loggers = [logging.getLogger(n) for n in ("pytorch_lightning", "lightning_fabric")]
            levels = [logger.level for logger in loggers]
            for logger in loggers:
                logger.addHandler(echo)
                logger.setLevel(logging.INFO)  # as Lightning sets it in a fresh process
            try:
                code = main([str(a) for a in args])
            except SystemExit as stop:  # argparse's --help
                code = stop.code if isinstance(stop.code, int) else 0
            finally:
                for logger, level in zip(loggers, levels, strict=True):
                    logger.removeHandler(echo)
                    logger.setLevel(level)
            out = capsys.readouterr()
        return subprocess.CompletedProcess(["robust-train", *args], code, out.out, out.err)

    return run


# Seconds that the longest test modules took in one run of the full suite (the CPU report below,
# summed per module, plus the longest waits). pytest-xdist hands out whole modules
# (`--dist loadscope`) in collection order: these go first, longest first, and the many short
# ones fill in at the end, so that no worker is left with a long module while the other idles
# (the Makefile's `--no-loadscope-reorder` keeps this order; xdist would otherwise put modules
# with many tests first). A module missing here runs after them, in collection order; stale
# numbers only cost time, never a result.
MODULE_SECONDS = {
    "tests/docs/test_docs_code.py": 44,
    "tests/test_leaderboard.py": 39,
    "tests/test_wheel.py": 37,
    "tests/docs/test_site.py": 33,  # 10 of them the build, when no fresh `make docs` build is there
    "tests/cli/test_configs.py": 32,
    "tests/app/test_fault_and_abuse.py": 31,
    "tests/regularizers/test_ig_warmup.py": 27,
    "tests/test_shipped_checkpoints.py": 20,
    "tests/cli/test_offline_wandb_view.py": 18,  # 10 of CPU, and the wait for W&B's service
    "tests/distributed/test_ddp.py": 16,  # 9 of CPU, and rank 0 waits for rank 1's imports
    "tests/explain/test_lrp.py": 14,
    "tests/cli/test_resume.py": 14,
    "tests/test_benchmarks_smoke.py": 13,
    "tests/cli/test_mnist_recipe.py": 12,
    "tests/cli/test_evaluate_commands.py": 11,
    "tests/test_demo.py": 11,
    "tests/test_architecture.py": 10,
    "tests/cli/test_user_models.py": 10,
    "tests/test_architectures_bench.py": 10,
    "tests/regularizers/test_cheaper.py": 8,
    "tests/models/test_torchvision_model.py": 7,
    "tests/cli/test_failures_clean.py": 7,
    "tests/explain/test_deeplift.py": 6,
    "tests/precision/test_precision.py": 4,
    "tests/test_explainer_recipes.py": 4,
    "tests/cli/test_errors.py": 4,
    "tests/models/test_small_cnn.py": 4,
    "tests/explain/test_grad_cam.py": 4,
    "tests/precision/test_refusals.py": 3,
    "tests/attacks/test_fragility.py": 3,
}


def pytest_collection_modifyitems(config, items):
    """The longest modules first (MODULE_SECONDS), each module's tests in their own order."""
    items.sort(key=lambda item: -MODULE_SECONDS.get(item.nodeid.partition("::")[0], 0))


_CPU_REPORT = os.environ.get("ROBUST_TRAIN_TEST_CPU_REPORT")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With ROBUST_TRAIN_TEST_CPU_REPORT=FILE, append each test's CPU seconds (this process, the
    subprocesses it waited for, its warm console's commands) to FILE as JSON lines: what sizes
    the tiers, whatever else shares the machine."""
    if not _CPU_REPORT:
        yield
        return
    import resource
    import time

    from warm_console import cpu_seconds

    def cpu() -> float:
        own, kids = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + cpu_seconds()

    start, wall = cpu(), time.perf_counter()
    yield
    record = {"test": item.nodeid, "cpu_s": cpu() - start, "wall_s": time.perf_counter() - wall}
    record["slow"] = item.get_closest_marker("slow") is not None
    record["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "")  # when and where: the schedule
    record["end"] = time.time()
    with open(_CPU_REPORT, "a") as out:
        out.write(json.dumps(record) + "\n")


_LIGHTNING_LOGGERS = (
    "pytorch_lightning",
    "pytorch_lightning.utilities.rank_zero",
    "lightning.pytorch",
    "lightning_fabric",
)


@pytest.fixture(autouse=True)
def _lightning_log_levels_restored():
    """Each test starts with Lightning's loggers at INFO at most (Lightning's own level): the
    benchmarks' quiet helpers set them to ERROR in the process that calls them (some at import
    or in module fixtures), which would hide Lightning's info lines, the console script's
    messages among them, from the tests after them. The levels are restored after the test."""
    import logging

    saved = [(logging.getLogger(n), logging.getLogger(n).level) for n in _LIGHTNING_LOGGERS]
    for logger, level in saved:
        if level > logging.INFO:
            logger.setLevel(logging.INFO)
    yield
    for logger, level in saved:
        logger.setLevel(level)
