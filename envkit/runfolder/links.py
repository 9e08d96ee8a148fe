"""A run folder made, and no writes through links in it: a symlink where envkit writes is one
EnvkitError naming it (link_error), whether found in the folder (refuse_links) or met by an open
with NOFOLLOW (the appends, runfolder/applog.py; the owner lock, runfolder/owner.py)."""

from __future__ import annotations

import os
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.fsutil import ignore_all
from envkit.runfolder import names

# What envkit writes in a run folder. A symlink planted at one of these names would have envkit append
# to (or truncate) whatever it points at, so a folder holding one is refused (refuse_links) and the
# appends and the lock open with O_NOFOLLOW (open_append). Atomic writes (atomic_writer) replace the
# name itself and make their temporary file with O_EXCL, so they never write through a link.
RUN_FOLDER_NAMES = (names.OWNER_LOCK, "train.log", names.METRICS, names.HEARTBEAT, names.SUMMARY, names.CONFIG, "config.yaml",
                    names.ENVIRONMENT, "checkpoints", "faults.jsonl", "console.log", "supervisor.log", "ranks")
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def link_error(path: Path) -> EnvkitError:
    """The error for a symlink found where envkit writes: it names the link and where it points."""
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return EnvkitError(f"{path} is a symbolic link{target}: envkit writes that file and never writes through a link",
                       where=str(Path(path).parent), fix=f"remove the link (rm {path}) or use another run folder")


def refuse_links(run_dir: Path) -> None:
    """EnvkitError naming the first of RUN_FOLDER_NAMES in `run_dir` that is a symlink. The run folder
    itself may be one (runs/<name> linked to a bigger disk): only what is inside it is checked."""
    for name in RUN_FOLDER_NAMES:
        if (Path(run_dir) / name).is_symlink():
            raise link_error(Path(run_dir) / name)


def make_run_folder(run_dir: Path) -> Path:
    """mkdir -p of a run folder, a folder that cannot be made (read-only, no permission, full) as one
    EnvkitError naming it, then refuse_links."""
    run_dir = Path(run_dir)
    runs_root = run_dir.parent.parent  # runs/ of runs/<experiment>/<run>
    new_root = not runs_root.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvkitError(f"cannot make the run folder: {exc.strerror or exc} ({exc.filename or run_dir})", where=str(run_dir),
                          fix="set experiment.output_dir (or --runs-dir) to a folder you can write") from None
    if new_root:
        ignore_all(runs_root)  # made by this first run: its outputs never go into the project's git
    refuse_links(run_dir)
    return run_dir
