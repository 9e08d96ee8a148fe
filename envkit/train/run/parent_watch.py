"""The trainer's side of "die with the supervisor" (spawn.spawn_child): a daemon thread blocks on
reading the pipe whose write end only `envkit run`/`envkit sweep` holds. EOF means that process is
gone (the kernel closed its end, SIGKILL included): `on_gone` runs in this thread, at once, whatever
the main thread is doing (stopping.parent_gone: a step under way is given up, between steps the last
one is checkpointed, so no trainer outlives its supervisor by a long step). This works where
PR_SET_PDEATHSIG does not exist (macOS). Only the trainer itself: its process group may hold the
caller's shell or test runner."""

from __future__ import annotations

import os
import signal
import threading

PARENT_FD_ENV = "ENVKIT_PARENT_FD"


def watch_parent(environ=os.environ, on_gone=None) -> threading.Thread | None:
    """Start the watching thread; `on_gone()` when the parent is gone (default: SIGTERM to this process)."""
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
        if on_gone is not None:
            on_gone()
        else:
            os.kill(os.getpid(), signal.SIGTERM)

    t = threading.Thread(target=wait, name="envkit-parent-watch", daemon=True)
    t.start()
    return t
