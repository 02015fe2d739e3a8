"""A warm `robust-train`: a fresh interpreter that has imported the console script's heavy modules
(torch, Lightning, the package's commands) once, then forks a process per command.

    python tests/support/warm_console_server.py SOCKET RUN_PID

Run by `tests/support/warm_console.py` (never imported by the tests): each connection on the UNIX
socket SOCKET sends the stdin, stdout and stderr file descriptors of the command (SCM_RIGHTS) and a
JSON request {argv, cwd, env, owner}. The server forks the command process, replies `pid N`, waits
for it and replies `exit CODE` (Popen's returncode: -SIGNAL when a signal killed it); a client that
goes away takes its command with it (SIGKILL). A request {"query": "cpu", "owner": PID} is
answered with the CPU seconds of the finished commands of that owner (a test process), plus the
server's own if that process started it. The server serves every test process of the run and
ends (removing SOCKET and its folder) when the process RUN_PID does.

The command process is this interpreter as the console script would be after its imports: the
request's stdio on fds 0-2, its working folder, its environment (os.environ replaced, PYTHONPATH
put on sys.path as the interpreter does at start-up, OMP_NUM_THREADS applied to torch) and argv,
then the console script's own line, `sys.exit(main())`, ending in the interpreter's normal exit
(non-daemon threads joined, atexit handlers run, an uncaught exception's traceback and exit code
1). Nothing of a test process (pytest's capture, warning filters, logging handlers, signal
handlers, modules, sys.path) is in it: the server is a fresh interpreter started from a test
process's environment, not a fork of a test process.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import select
import signal
import socket
import struct
import sys

# The interpreter's own path, without this script's folder (a console script's sys.path[0] is
# its own folder; each command gets that and its PYTHONPATH in front).
BASE_PATH = sys.path[1:]
HEADER = struct.Struct("!Q")


def _warm_up() -> int:
    """Import what the commands import; return torch's default thread count (OMP_NUM_THREADS
    is unset here, so it is what a process without it gets)."""
    import numpy  # noqa: F401
    import pytorch_lightning  # noqa: F401
    import torch

    import robust_train.app.certify_command  # noqa: F401
    import robust_train.app.cli  # noqa: F401
    import robust_train.app.commands  # noqa: F401
    import robust_train.app.demo  # noqa: F401
    import robust_train.app.lightning_cli  # noqa: F401

    return torch.get_num_threads()


def _read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, HEADER.size, 3)
    while len(head) < HEADER.size:
        chunk = conn.recv(HEADER.size - len(head))
        if not chunk:
            raise ConnectionError("request cut short")
        head += chunk
    (size,) = HEADER.unpack(head)
    body = b""
    while len(body) < size:
        chunk = conn.recv(min(1 << 20, size - len(body)))
        if not chunk:
            raise ConnectionError("request cut short")
        body += chunk
    return json.loads(body), fds


def _start(conn: socket.socket, request: dict, fds: list[int]) -> int:
    """Fork the command process: 0 there (its stdio in place), its pid here."""
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    return child


def _cpu_seconds(owner: int, spent: dict[int, float], starter: int) -> float:
    """CPU seconds of `owner`'s finished commands, and the server's own if `owner` started it."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    mine = own.ru_utime + own.ru_stime if owner == starter else 0.0
    return spent.get(owner, 0.0) + mine


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def serve(path: str, run_pid: int) -> dict:
    """Accept commands until the process `run_pid` ends; returns (only in a command process) that
    command's request. A command's exit is waited for (its CPU time counted) before its client is
    told."""
    starter = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    # The imports' objects live as long as a command does: out of the garbage collector's sight,
    # a command's collections (and its exit) do not walk them, nor copy their memory pages.
    gc.freeze()
    print("ready", flush=True)
    running: dict[int, tuple[int, socket.socket, int]] = {}  # pidfd -> (pid, client, owner)
    spent: dict[int, float] = {}  # owner -> CPU seconds of its finished commands
    while _alive(run_pid):
        clients = {conn.fileno(): pidfd for pidfd, (_, conn, _) in running.items()}
        ready, _, _ = select.select([listener, *running, *clients], [], [], 1.0)
        for fd in sorted(ready, key=lambda fd: fd in running):  # clients first
            if fd in clients and clients[fd] in running:
                pid, conn, _ = running[clients[fd]]
                if not conn.recv(1):  # the client went away: stop its command
                    os.kill(pid, signal.SIGKILL)
            elif fd in running:
                pid, conn, owner = running.pop(fd)
                os.close(fd)
                _, status, usage = os.wait4(pid, 0)
                spent[owner] = spent.get(owner, 0.0) + usage.ru_utime + usage.ru_stime
                try:
                    conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                conn.close()
        if listener not in ready:
            continue
        conn, _ = listener.accept()
        try:
            request, fds = _read_request(conn)
        except (OSError, ValueError):
            conn.close()
            continue
        if request.get("query") == "cpu":
            conn.sendall(f"{_cpu_seconds(request['owner'], spent, starter)}\n".encode())
            conn.close()
            continue
        pid = _start(conn, request, fds)
        if pid == 0:
            listener.close()
            conn.close()
            for pidfd, (_, other, _) in running.items():
                os.close(pidfd)
                other.close()
            return request
        conn.sendall(f"pid {pid}\n".encode())
        running[os.pidfd_open(pid)] = (pid, conn, int(request.get("owner", 0)))
    os.unlink(path)
    os.rmdir(os.path.dirname(path))
    os._exit(0)


def become(request: dict, default_threads: int) -> None:
    """This process as `robust-train` started with the request's argv, folder and environment."""
    import numpy
    import torch

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv = request["argv"]
    extra = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [os.path.dirname(os.path.abspath(argv[0])), *extra, *BASE_PATH]
    sys.argv = list(argv)
    threads = os.environ.get("OMP_NUM_THREADS", "")
    torch.set_num_threads(int(threads) if threads.isdigit() else default_threads)
    numpy.random.seed()  # noqa: NPY002  a fresh process's seed (random reseeds itself after a fork)


def main() -> None:
    default_threads = _warm_up()
    request = serve(sys.argv[1], int(sys.argv[2]))
    become(request, default_threads)
    from robust_train.app.cli import main as console_main

    sys.exit(console_main())


if __name__ == "__main__":
    main()
