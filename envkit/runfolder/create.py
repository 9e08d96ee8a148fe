"""Where a run folder is made: one name check for every folder name a user gives (`--run-id` of
`envkit run`, `--name` of `envkit exec`, a sweep's), and a new folder that no other run shares,
whose runs folder, when this run made it, gets a `.gitignore` of `*` (fsutil.ignore_all)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.fsutil import check_inside, check_name, ignore_all


def folder_name(value: str, where: str, what: str) -> str:
    """One folder name of letters, digits, '.', '_' and '-', never '.', '..' or empty."""
    check_name(value, where, what)
    if not re.fullmatch(r"[\w.-]+", value):
        raise EnvkitError(f"{what} {value!r} may hold letters, digits, '.', '_' and '-' only", where=where)
    return value


def new_run_dir(root: Path, name: str) -> Path:
    """root/<name>/<timestamp>[-n], made here (exist_ok=False: two runs never share one)."""
    exp = check_inside(root, Path(root) / folder_name(name, "--name", "run name"), "--name")
    new_root = not Path(root).exists()
    base = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1, 1000):
        d = exp / (base if i == 1 else f"{base}-{i}")
        try:
            d.mkdir(parents=True)
            if new_root:
                ignore_all(Path(root))  # made by this first run: its outputs never go into the project's git
            return d
        except FileExistsError:
            continue
        except OSError as exc:  # a read-only or full runs folder: one line, not a traceback
            raise EnvkitError(f"cannot make the run folder: {exc.strerror or exc} ({exc.filename or d})", where="--runs-dir",
                              fix="give a --runs-dir you can write") from None
    raise EnvkitError("could not make a new run folder", where=str(exp))
