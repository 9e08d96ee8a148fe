"""The trainer's side of "die with the supervisor" (spawn.spawn_child): a daemon thread blocks on
reading the pipe whose write end only `envkit run`/`envkit sweep` holds. EOF means that process is
gone (the kernel closed its end, SIGKILL included): the trainer sends itself SIGTERM, its handler
checkpoints and stops, as for `envkit stop`. This works where PR_SET_PDEATHSIG does not exist
(macOS). Only the trainer itself: its process group may hold the caller's shell or test runner."""

from __future__ import annotations

import os
import signal
import threading

PARENT_FD_ENV = "ENVKIT_PARENT_FD"


def watch_parent(environ=os.environ) -> threading.Thread | None:
    spec = environ.pop(PARENT_FD_ENV, None)  # not for this process's own children
    if not spec:
        return None
    try:
        fd_text, _, ppid_text = spec.partition("@")
        fd, ppid = int(fd_text), int(ppid_text)
    except ValueError:
        return None
    if os.getppid() != ppid:  # inherited the variable, not the pipe (a torchrun worker)
        return None
    try:
        os.fstat(fd)
    except OSError:
        return None

    def wait() -> None:
        try:
            while os.read(fd, 512):
                pass
        except OSError:
            return
        os.kill(os.getpid(), signal.SIGTERM)

    t = threading.Thread(target=wait, name="envkit-parent-watch", daemon=True)
    t.start()
    return t
