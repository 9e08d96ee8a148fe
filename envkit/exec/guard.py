"""The exec'd command dies with envkit's supervisor: `python -m envkit.exec.guard GRACE`, started by
the supervisor (supervise.py) with its stdin the read end of a pipe whose write end only the
supervisor holds. The supervisor writes "pgid N" for each command it starts and "done" when it ends
normally. EOF without "done" means the supervisor died (SIGKILL included: the kernel closes its
end): the guard sends SIGTERM to the command's whole process group, and SIGKILL after GRACE seconds
to whatever is left. Why a separate process rather than PR_SET_PDEATHSIG in preexec_fn alone: the
command is not Python envkit controls (a shell script, torchrun, a launcher that forks); pdeathsig
reaches only the direct child, only on Linux, and a `bash -c` that gets it leaves its own children
running. A pipe's EOF works the same on Linux and macOS, and the process group takes the grandchildren
too. The guard runs in a session of its own, so a Ctrl-C at the terminal or a signal to the command's
group does not reach it; it holds nothing of the run folder (not its owner lock)."""

from __future__ import annotations

import os
import signal
import sys
import time


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch(stream, grace: float) -> int:
    pgid, buf = None, b""
    fd = stream.fileno()
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            word, _, arg = line.decode("ascii", "replace").partition(" ")
            if word == "pgid":
                pgid = int(arg)
            elif word == "done":
                return 0
    if pgid is None or not _group_alive(pgid):
        return 0
    os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _group_alive(pgid):
            return 0
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return 0


def main(argv: list[str]) -> int:
    for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    return watch(sys.stdin.buffer, float(argv[0]) if argv else 30.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
