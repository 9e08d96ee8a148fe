"""Shared fixtures: run the real CLI in a subprocess, find recorded snapshots."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"


_EMPTY_CONFIG_DIR = __import__("tempfile").mkdtemp(prefix="envkit-test-config-")


def envkit(*args: str, env: dict | None = None, cwd: str | os.PathLike | None = None, timeout: float = 300,
           input: str | None = None) -> subprocess.CompletedProcess:
    """Run `python -m envkit ARGS` as a user would; stdout is not a TTY (plain output)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}
    full_env["PYTHONUNBUFFERED"] = "1"
    # A tuned profile in the developer's own user folder (envkit tune) must not change what tests see.
    full_env["ENVKIT_CONFIG_DIR"] = _EMPTY_CONFIG_DIR
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=timeout, input=input)


@pytest.fixture
def run_envkit():
    return envkit


def snapshot_path(name: str) -> Path:
    return SNAPSHOTS / f"{name}.json"


def load_snapshot(name: str) -> dict:
    return json.loads(snapshot_path(name).read_text())


def has_cuda() -> bool:
    try:
        import torch
    except Exception:
        return False
    return torch.cuda.is_available()


# The local package index and throw-away venvs of the setup tests (tests/localindex.py).
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from localindex import LocalIndex, build_all

    wheels = build_all(tmp_path_factory.mktemp("wheels"))
    with LocalIndex(wheels) as srv:
        yield srv


@pytest.fixture(scope="module")
def template_venv(tmp_path_factory):
    path = tmp_path_factory.mktemp("template") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path


@pytest.fixture
def venv(template_venv, tmp_path):
    """A fresh venv (a copy of one made once: ensurepip costs seconds)."""
    import shutil

    dest = tmp_path / "venv"
    shutil.copytree(template_venv, dest, symlinks=True)
    return dest


def default_sigint() -> None:
    """preexec_fn for a child a test will Ctrl-C: a suite started in the background by a shell
    without job control (`cmd &`) runs with SIGINT ignored, and a Python that starts with SIGINT
    ignored never raises KeyboardInterrupt. The child gets the default back, as in a terminal."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
