"""The child's command line (no torch here): the trainer's entry script, run by the training
interpreter directly or under torchrun (`python -m torch.distributed.run`, the launcher PyTorch
ships) with the rendezvous of several machines."""

from __future__ import annotations

import os
from pathlib import Path

from envkit.fsutil import cache_dir
from envkit.plan.model import Nodes


def torchrun_args(nodes: Nodes) -> list[str]:
    """torchrun's options for the machines a run spans: --standalone for one."""
    if nodes.nnodes == 1:
        return ["--standalone"]
    return [f"--nnodes={nodes.nnodes}", f"--node-rank={nodes.node_rank}", f"--rdzv-backend={nodes.rdzv_backend}",
            f"--rdzv-endpoint={nodes.rdzv_endpoint}", f"--rdzv-id={nodes.rdzv_id or 'envkit'}"]


def torchrun_head(python: str, nodes: Nodes, nproc: int, rank_logs: Path | None = None) -> list[str]:
    """`python -m torch.distributed.run ...` up to the script. With rank_logs (a user's own script,
    where every rank may print) each worker's output goes through torchrun's tee: whole lines
    tagged `[default<rank>]:` on the console (two ranks printing at once no longer splice their
    lines) and a copy per rank under rank_logs. The trainer prints from rank 0 alone: no tags."""
    tee = ["--log-dir", str(rank_logs), "--tee", "3"] if rank_logs else []
    return [python, "-m", "torch.distributed.run", *torchrun_args(nodes), f"--nproc-per-node={nproc}", *tee]


def child_command(python: str, run_dir: Path, *, stop_after: int | None, resume: str, nproc: int, debug: bool,
                  nodes: Nodes | None = None, profile_steps: tuple[int, int] | None = None) -> list[str]:
    args = [str(run_dir), "--resume", resume]
    if stop_after is not None:
        args += ["--stop-after", str(stop_after)]
    if profile_steps is not None:
        args += ["--profile-steps", f"{profile_steps[0]}:{profile_steps[1]}"]
    if debug:
        args.append("--debug")
    entry = str(child_entry())
    nodes = nodes or Nodes()
    if nproc > 1 or nodes.nnodes > 1:
        return [*torchrun_head(python, nodes, nproc), entry, *args]
    return [python, "-u", entry, *args]


# The helpers the child may import (all pure Python) when the training interpreter lacks them.
_CHILD_HELPERS = ("rich", "pygments", "markdown_it", "mdurl", "yaml", "tomli", "packaging")

_BOOTSTRAP = """\
# Written by envkit: starts the trainer in whatever interpreter runs it.
import os, runpy, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path[0] = os.getcwd()  # as `python -m` would: the user's own modules (model factories) first
sys.path.append(here)      # envkit and its helpers LAST: the environment's own packages (its torch) win
runpy.run_module("envkit.train.run.child", run_name="__main__", alter_sys=True)
"""


def child_entry() -> Path:
    """A folder holding only a bootstrap script and links to envkit and its pure-Python helpers.

    The child must import envkit.train whatever its Python (the managed venv does not hold
    envkit), but putting envkit's own site-packages on PYTHONPATH would put that interpreter's
    torch ahead of the managed venv's: the bootstrap appends this folder to the END of sys.path."""
    import hashlib
    import importlib.util
    import tempfile

    pkg = Path(__file__).resolve().parents[1]  # envkit/ (this file is envkit/launch/torchrun.py)
    key = hashlib.sha256(f"{pkg}|{_BOOTSTRAP}".encode()).hexdigest()[:12]
    base = cache_dir() / "child" / key
    entry = base / "envkit_child.py"
    if entry.is_file():
        return entry
    base.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=base.parent))
    (tmp / "envkit").symlink_to(pkg, target_is_directory=True)
    for name in _CHILD_HELPERS:
        spec = importlib.util.find_spec(name)
        if spec and spec.origin and spec.submodule_search_locations:
            (tmp / name).symlink_to(Path(spec.origin).parent, target_is_directory=True)
        elif spec and spec.origin and spec.origin.endswith(".py"):
            (tmp / f"{name}.py").symlink_to(spec.origin)
    (tmp / "envkit_child.py").write_text(_BOOTSTRAP)
    try:
        os.replace(tmp, base)  # atomic: a concurrent run built the same folder, or this one wins
    except OSError:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return entry
