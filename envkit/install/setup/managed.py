"""The managed environment a project gets from `envkit setup`: a folder `.envkit/` holding the
venv, the env scripts, the resolved profile and `state.json` (which profile, which Python).

`envkit selftest` and `envkit run` use it when it exists and the current interpreter otherwise.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from envkit.fsutil import atomic_write_text
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


def write_state(root: Path, **values) -> Managed:
    root.mkdir(parents=True, exist_ok=True)
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
