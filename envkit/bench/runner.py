"""Run one RunSpec in a fresh child process of the target interpreter.

A fresh process per run: environment variables such as the MPS watermark ratios and
PYTORCH_ENABLE_MPS_FALLBACK are read when torch starts, and a rung that crashes (a segfault, an
abort, an out-of-memory kill) or hangs must not take the others down. The child imports envkit
from the same link folder the trainer's child uses (envkit/launch/torchrun.py child_entry), put
LAST on sys.path so the target environment's own torch wins.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from envkit.bench.child import MARK
from envkit.bench.clock import PROGRESS
from envkit.bench.spec import RunResult, RunSpec, rate_unit
from envkit.launch.launcher import omp_threads_per_process
from envkit.launch.torchrun import child_entry, torchrun_head
from envkit.plan.model import Nodes

_BOOT = ("import sys, runpy; sys.path.append({folder!r}); "
         "runpy.run_module('envkit.bench.child', run_name='__main__', alter_sys=True)")


def child_command(python: str, spec_path: Path, debug: bool = False, nproc: int = 1) -> list[str]:
    """The child's command line; with nproc > 1 under torchrun on this machine (`envkit run
    --nproc-per-node N` starts the trainer so: torchrun.py), which runs the same command N times
    with RANK, WORLD_SIZE and the rendezvous set, from which the trainer sets up DDP or FSDP."""
    folder = str(child_entry().parent)
    cmd = [python, "-u", "-c", _BOOT.format(folder=folder), str(spec_path), *(["--debug"] if debug else [])]
    if nproc > 1:  # --no-python: torchrun runs the command as given (it takes a script otherwise, not `-c`)
        return [*torchrun_head(python, Nodes(), nproc), "--no-python", *cmd]
    return cmd


def child_env(spec: RunSpec, base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    env.update(spec.env)
    if spec.threads:
        env["OMP_NUM_THREADS"] = str(spec.threads)  # before torch starts: its OpenMP pool reads it
    elif spec.nproc > 1:
        # what `envkit run` gives each torchrun process: its share of the cores (or of the profile's count)
        env["OMP_NUM_THREADS"] = omp_threads_per_process(spec.env, env, spec.nproc)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Interrupted(Exception):
    """Ctrl-C while a child ran: the child is gone; the caller keeps what it measured before."""


def run_spec(spec: RunSpec, python: str, base_env: dict[str, str], timeout: float, debug: bool = False,
             on_progress=None) -> RunResult:
    """Run the child; its progress lines (one per timed window) go to on_progress(name, dict) as
    they come, so a terminal shows the running figure."""
    t0 = time.perf_counter()
    # the child's run folders are made in here too (bench/child.py): removed whether it ended or was killed
    with tempfile.TemporaryDirectory(prefix="envkit-bench-", ignore_cleanup_errors=True) as tmp:
        path = Path(tmp) / "spec.json"
        path.write_text(json.dumps(spec.to_dict()))
        kwargs: dict[str, Any] = {"start_new_session": True} if os.name == "posix" else {}  # Ctrl-C reaches envkit, which ends the child
        proc = subprocess.Popen(child_command(python, path, debug, spec.nproc), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=child_env(spec, base_env), **kwargs)
        out: list[str] = []
        err: list[str] = []
        readers = [threading.Thread(target=_read, args=(proc.stdout, out, spec.name, on_progress), daemon=True),
                   threading.Thread(target=_read, args=(proc.stderr, err, spec.name, None), daemon=True)]
        for t in readers:
            t.start()
        try:
            proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            _kill(proc)
            return RunResult(spec.name, "fail", reason=f"did not finish within {timeout:.0f} s (killed)",
                             seconds=time.perf_counter() - t0, note="timeout")
        except KeyboardInterrupt:
            _kill(proc)
            raise Interrupted(spec.name)
        for t in readers:
            t.join(timeout=10)
    seconds = time.perf_counter() - t0
    return read_result(spec.name, out, seconds) or RunResult(
        spec.name, "fail", reason=f"the child {_describe(proc.returncode)}: {_tail(chr(10).join(err))}", seconds=seconds)


def read_result(name: str, out: list[str], seconds: float = 0.0) -> RunResult | None:
    """The child's result line (its last, under torchrun rank 0's), or None when it printed none."""
    for line in reversed(out):
        if line.startswith(MARK):
            data = json.loads(line[len(MARK):])
            status = data["status"]
            if status not in ("ok", "fail"):  # no status bench/child.py writes
                return RunResult(name, "fail", reason=f"the child's result says status {status!r}", seconds=seconds)
            r = RunResult(name, status, data.get("per_second"), rate_unit(data.get("unit")),
                          data.get("peak_memory_mb"), data.get("loss"), data.get("reason", ""), steps=data.get("steps") or 0,
                          micro_batch=data.get("micro_batch"), grad_accum=data.get("grad_accum"),
                          did_not_fit=data.get("did_not_fit") or [], seconds=seconds,
                          world=data.get("world") or 1, timed_s=data.get("timed_s"))
            r.rss_peak_mb, r.device_free_mb = data.get("rss_peak_mb"), data.get("device_free_mb")
            r.device_used_mb = data.get("device_used_mb")
            if data.get("oom"):
                r.note = "oom"
            return r
    return None


def _read(stream, lines: list[str], name: str, on_progress) -> None:
    for line in stream:
        line = line.rstrip("\n")
        lines.append(line)
        if on_progress is not None and line.startswith(PROGRESS):
            try:
                on_progress(name, json.loads(line[len(PROGRESS):]))
            except ValueError:
                pass


def _kill(proc: subprocess.Popen) -> None:
    """The child and everything it started. Its process group holds its DataLoader workers; torchrun
    starts each worker in a session of its own (out of that group's reach), and a SIGKILLed torchrun
    cannot end them: they are found as descendants first, and each one's group killed too."""
    try:
        if os.name == "posix":
            tree = descendants(proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)
            for pid in tree:
                _kill_group(pid)
        else:
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=10)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        pass


def descendants(pid: int) -> list[int]:
    """Every process below pid (children, theirs, ...)."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents():
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _parents() -> list[tuple[int, int]]:
    """(pid, parent pid) of every process: from /proc on Linux (a slim container may have no `ps`),
    else from `ps` (macOS)."""
    proc = Path("/proc")
    if (proc / "self" / "stat").exists():
        pairs = []
        for stat in proc.glob("[0-9]*/stat"):
            try:  # the name, in parentheses, may hold spaces: the fields after its last ")"
                pairs.append((int(stat.parent.name), int(stat.read_text().rsplit(")", 1)[1].split()[1])))
            except (OSError, IndexError, ValueError):
                continue  # ended meanwhile
        return pairs
    try:
        listing = subprocess.run(["ps", "-A", "-o", "pid=", "-o", "ppid="], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [(int(a), int(b)) for a, b in (ln.split() for ln in listing.splitlines() if len(ln.split()) == 2)
            if a.isdigit() and b.isdigit()]


def _kill_group(pid: int) -> None:
    try:
        if os.getpgid(pid) == pid:  # a torchrun worker leads its own group: its DataLoader workers with it
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _describe(rc: int | None) -> str:
    if rc is not None and rc < 0:
        try:
            return f"died of {signal.Signals(-rc).name}"
        except ValueError:
            return f"died of signal {-rc}"
    return f"exited {rc} without a result"


def _tail(err: str, lines: int = 2) -> str:
    useful = [ln.strip() for ln in (err or "").splitlines() if ln.strip() and "Warning" not in ln]
    return " | ".join(useful[-lines:])[:400] or "no output"
