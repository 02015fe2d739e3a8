"""The client that `WarmConsole.shim` (tests/support/warm_console.py) puts on PATH as
`robust-train`: it hands its own stdin, stdout and stderr, argv, folder and environment to the
warm server, waits for the command and exits as it did (its exit code, or killed by the same
signal). Standard library only: the shim runs it with `python -I -S`, which starts in
milliseconds."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct


def main(path: str, script: str, args: list[str], owner: int) -> int:
    """`owner`: the test process whose command this is (its CPU time is counted there)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    request = {"argv": [script, *args], "cwd": os.getcwd(), "env": dict(os.environ), "owner": owner}
    body = json.dumps(request).encode()
    socket.send_fds(sock, [struct.pack("!Q", len(body))], [0, 1, 2])
    sock.sendall(body)
    replies = b""
    while replies.count(b"\n") < 2:
        chunk = sock.recv(4096)
        if not chunk:
            raise SystemExit("robust-train (warm console): the server went away")
        replies += chunk
    code = int(replies.splitlines()[1].split()[1])
    if code < 0:  # killed by a signal: die of it too
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code
