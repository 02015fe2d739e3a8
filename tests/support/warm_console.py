"""`robust-train` in a process of its own without paying its imports each time: the client side of
`warm_console_server.py` (a fresh interpreter that imported torch, Lightning and the package's
commands once, and forks one process per command; one server for the whole test run).

What a test sees is what a console-script subprocess gives it: a process of its own (its pid,
killable by any signal, its exit code or -SIGNAL), its own stdout and stderr, working folder,
environment (PYTHONPATH included) and argv, started from a clean interpreter rather than from the
test process. What it does not exercise is the console script's start-up (the `robust-train` file
and the imports themselves): tests of that keep a real subprocess.

- `WarmConsole.shared(folder, run_pid)`: the run's server (started, or found started);
- `WarmConsole.start(argv, cwd=..., env=...)` -> `WarmProcess` (Popen-like: pid, poll, wait,
  send_signal, kill, communicate, returncode);
- `WarmConsole.run(...)` -> `subprocess.CompletedProcess` (as `subprocess.run(...,
  capture_output=True, text=True)`);
- `WarmConsole.shim(folder)` writes `folder/robust-train`, a stand-in for the console script on
  PATH (for shell scripts: the docs' code blocks) that runs its command in the warm server with
  its own stdin, stdout, stderr, folder and environment, and exits with its exit code.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER = Path(__file__).with_name("warm_console_server.py")
SCRIPT = Path(sys.executable).parent / "robust-train"
HEADER = struct.Struct("!Q")
_RUNNING: list[WarmConsole] = []
_SERVERS: list[subprocess.Popen[str]] = []


def cpu_seconds() -> float:
    """CPU seconds of this test process's finished warm commands (and of the warm server, if this
    process started it): not its children, so `getrusage(RUSAGE_CHILDREN)` misses them; for the
    suite's CPU report (tests/support/cpu_report.py)."""
    return sum(server.cpu_seconds() for server in _RUNNING)


def _send(path: str, argv: list[str], cwd: Path | str, env: dict[str, str], fds) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    request = {"argv": argv, "cwd": os.path.abspath(cwd), "env": env, "owner": os.getpid()}
    body = json.dumps(request).encode()
    socket.send_fds(sock, [HEADER.pack(len(body))], list(fds))
    sock.sendall(body)
    return sock


def _line(sock: socket.socket, buffer: bytearray, timeout: float | None) -> str | None:
    """The next reply line, or None when `timeout` passes first."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while b"\n" not in buffer:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([sock], [], [], left)
        if not ready:
            return None
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("the warm console server went away")
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line.decode()


def _text(data: bytes) -> str:
    """As Popen's text mode decodes a captured stream (universal newlines)."""
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


def _appending_file():
    """An anonymous temporary file whose writes, by whichever process holds it, go to its end."""
    file = tempfile.TemporaryFile(mode="w+b", buffering=0)
    flags = fcntl.fcntl(file.fileno(), fcntl.F_GETFL)
    fcntl.fcntl(file.fileno(), fcntl.F_SETFL, flags | os.O_APPEND)
    return file


class WarmProcess:
    """One command of the warm server, with the interface of `subprocess.Popen` that the tests
    use; stdout and stderr go to temporary files, read by `communicate` (and `stderr_so_far`)."""

    def __init__(self, path: str, argv: list[str], cwd: Path | str, env: dict[str, str]):
        self.args = argv
        self.returncode: int | None = None
        # The command shares these files' offsets: they are read with `os.pread`, which leaves
        # the offset alone (a seek here while the command writes would put its next write at
        # the seek's place, over what it wrote), and opened O_APPEND besides (`open` in mode "a"
        # of a file descriptor, as TemporaryFile does, does not set it).
        self._out, self._err = _appending_file(), _appending_file()
        self._buffer = bytearray()
        self._sock = _send(path, argv, cwd, env, [0, self._out.fileno(), self._err.fileno()])
        line = _line(self._sock, self._buffer, timeout=60)
        if line is None or not line.startswith("pid "):
            raise RuntimeError(f"the warm console server did not start {argv!r}: {line!r}")
        self.pid = int(line.split()[1])
        # Signals go through a pidfd: once the server has reaped the process, its pid may be
        # another process's (a Popen's child stays a zombie until its parent waits for it).
        try:
            self._pidfd: int | None = os.pidfd_open(self.pid)
        except ProcessLookupError:
            self._pidfd = None  # it has ended already: `exit` is on its way

    def poll(self) -> int | None:
        if self.returncode is None:
            line = _line(self._sock, self._buffer, timeout=0)
            if line is not None:
                self._exited(line)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            line = _line(self._sock, self._buffer, timeout)
            if line is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._exited(line)
        return self.returncode

    def _exited(self, line: str) -> None:
        self.returncode = int(line.split()[1])
        self._sock.close()
        if self._pidfd is not None:
            os.close(self._pidfd)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None and self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):  # ended, its exit not read yet
                signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _read(self, file) -> str:
        chunks, offset = [], 0
        while chunk := os.pread(file.fileno(), 1 << 20, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return _text(b"".join(chunks))

    def stderr_so_far(self) -> str:
        return self._read(self._err)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        out, err = self._read(self._out), self._read(self._err)
        self._out.close()
        self._err.close()
        return out, err


class WarmConsole:
    """A client of the warm server that serves the whole test run (every pytest-xdist worker):
    `WarmConsole.shared(folder, run_pid)` starts it, or finds it started by another worker; it
    ends when the process `run_pid` (pytest's main process) does. Each client counts the CPU
    time of its own commands (and the starting client the server's imports)."""

    def __init__(self, path: str) -> None:
        self.path = path
        _RUNNING.append(self)

    @classmethod
    def shared(cls, folder: Path, run_pid: int) -> WarmConsole:
        from filelock import FileLock

        record = folder / "warm-console.json"
        with FileLock(str(record) + ".lock"):
            if not record.is_file():
                record.write_text(json.dumps({"socket": cls._start_server(run_pid)}))
            return cls(json.loads(record.read_text())["socket"])

    @staticmethod
    def _start_server(run_pid: int) -> str:
        # a short path: a socket's is at most 107 bytes (the server removes the folder at its end)
        path = os.path.join(tempfile.mkdtemp(prefix="rt-warm-"), "socket")
        # PYTHONPATH stays: the server imports the package the tests import
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        server = subprocess.Popen(
            [sys.executable, str(SERVER), path, str(run_pid)], env=env, cwd=os.path.dirname(path),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert server.stdout is not None
        ready = server.stdout.readline()
        server.stdout.close()
        if ready.strip() != "ready":
            server.kill()
            server.wait()
            raise RuntimeError("the warm console server did not start (see the test's stderr)")
        _SERVERS.append(server)  # it outlives this process if other workers still use it
        return path

    def start(self, argv: list[str], *, cwd: Path | str, env: dict[str, str]) -> WarmProcess:
        """`argv` as the console script's sys.argv (argv[0]: the script's path)."""
        return WarmProcess(self.path, [str(a) for a in argv], cwd, env)

    def run(
        self, argv: list[str], *, cwd: Path | str, env: dict[str, str], timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        process = self.start(argv, cwd=cwd, env=env)
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
        return subprocess.CompletedProcess(process.args, process.returncode or 0, out, err)

    def shim(self, folder: Path) -> Path:
        """`folder/robust-train`: the console script's stand-in (see the module docstring)."""
        folder.mkdir(parents=True, exist_ok=True)
        shim = folder / "robust-train"
        shim.write_text(
            f"#!{sys.executable} -IS\n"
            "import sys\n"
            f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "from warm_console_client import main\n"
            f"sys.exit(main({self.path!r}, {str(SCRIPT)!r}, sys.argv[1:], {os.getpid()}))\n"
        )
        shim.chmod(0o755)
        return shim

    def cpu_seconds(self) -> float:
        """CPU seconds of this test process's finished commands (and, if this process started
        the server, of the server itself: its imports)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(self.path)
            body = json.dumps({"query": "cpu", "owner": os.getpid()}).encode()
            socket.send_fds(sock, [HEADER.pack(len(body))], [])
            sock.sendall(body)
            return float(_line(sock, bytearray(), timeout=60) or 0.0)
