"""The managed environment a project gets from `envkit setup`: a folder `.envkit/` holding the
venv, the env scripts, the resolved profile and `state.json` (which profile, which Python).

`envkit run`, `exec`, `selftest`, `check` and `env` find it in the current folder or the nearest
folder above it that has one; a project elsewhere names it with ENVKIT_HOME (the path of that
`.envkit` folder). Where none is found they use the current interpreter and say so in one line
(`missing_line`); `envkit setup` ends by saying where it is and how to use it elsewhere (`where_line`).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from envkit.fsutil import atomic_write_text, ignore_all
from envkit.redact import redact

MANAGED_DIR = ".envkit"
STATE_FILE = "state.json"


@dataclass
class Managed:
    root: Path  # the .envkit folder
    state: dict = field(default_factory=dict)

    @property
    def venv(self) -> Path:
        return Path(self.state.get("venv") or self.root / "venv")

    @property
    def python(self) -> Path:
        if self.state.get("python"):
            return Path(self.state["python"])
        sub = "Scripts/python.exe" if os.name == "nt" else "bin/python"
        return self.venv / sub

    @property
    def profile(self) -> str | None:
        return self.state.get("profile")


def find_managed(start: Path | None = None) -> Managed | None:
    """The nearest .envkit/state.json in `start` (default: cwd) or its parents, if its Python exists.
    ENVKIT_HOME points at a .envkit folder explicitly."""
    explicit = os.environ.get("ENVKIT_HOME")
    here = (start or Path.cwd()).resolve()
    candidates = [Path(explicit)] if explicit else [p / MANAGED_DIR for p in [here, *here.parents]]
    for root in candidates:
        state_path = root / STATE_FILE
        if state_path.is_file():
            try:
                state = json.loads(state_path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            m = Managed(root, state if isinstance(state, dict) else {})
            if m.python.exists():
                return m
    return None


def where_line(root: Path) -> str:
    """What `envkit setup` says last about the environment it made: where it is, what finds it."""
    root = Path(root).resolve()
    return (f"environment: {root} (found by envkit run, exec and selftest in {root.parent} and the folders below it; "
            f"a project elsewhere uses it with: export ENVKIT_HOME={root})")


def missing_line(python: str, start: Path | None = None) -> str:
    """The one line `envkit run` and `envkit exec` print where no managed environment is found: what
    was looked at, what is used instead, and how to use one made in another folder."""
    explicit = os.environ.get("ENVKIT_HOME")
    here = (start or Path.cwd()).resolve()
    looked = (f"ENVKIT_HOME={explicit} holds no environment (no {STATE_FILE} naming a Python that exists)" if explicit else
              f"no `envkit setup` environment in {here} or a folder above it, and ENVKIT_HOME is not set")
    return (f"note: {looked}: using {python} (fix: `envkit setup` here, or export ENVKIT_HOME=PATH/{MANAGED_DIR} "
            "to use the one a project in PATH set up)")


def write_state(root: Path, **values) -> Managed:
    root.mkdir(parents=True, exist_ok=True)
    ignore_all(root)  # the venv, the env scripts and the lock's state never go into the project's git
    path = root / STATE_FILE
    state = {}
    if path.is_file():
        try:
            state = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            state = {}
    state.update({k: (str(v) if isinstance(v, Path) else v) for k, v in values.items()})
    atomic_write_text(path, json.dumps(redact(state), indent=2) + "\n")  # an index URL's password never lands on disk
    return Managed(root, state)


def current_python() -> str:
    return sys.executable


def target_python(explicit: str | None = None) -> str | None:
    """The interpreter a command should examine: --python if given, else the managed
    environment's (a project set up with `envkit setup`), else None for envkit's own."""
    if explicit:
        return explicit
    m = find_managed()
    return str(m.python) if m else None
