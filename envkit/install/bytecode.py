"""torch's bytecode, written for the user where Python writes none.

A torch installed without bytecode (uv's default, an image built with PYTHONDONTWRITEBYTECODE=1)
in a Python that writes none (that variable set, or a site-packages this user may not write: a
shared cluster module, a read-only image) is compiled from its sources by every process that imports
it: `import torch` 4.0 s against 2.4 s, and torch.compile's imports 14.0 s against 6.9 s, on an H100
host (benchmarks/RESULTS.md). Two fixes, the first where it can be made:

- in place: `python -m compileall` over site-packages, where this user may write it. Every process
  of that interpreter gains, envkit's or not.
- envkit's cache: where site-packages is read-only, the interpreter's modules (the standard library,
  site-packages, envkit's trainer) are compiled into a folder envkit owns, and the processes envkit
  starts with that interpreter (`envkit run`, `exec`, `sweep`) get PYTHONPYCACHEPREFIX pointing at it.
  Python then reads and writes bytecode there only (never beside the sources, docs.python.org:
  PYTHONPYCACHEPREFIX), which is why everything they import is compiled into it, not only torch.
  A marker file per interpreter says the cache was made for it: without one, nothing is set.

`envkit setup` and `envkit doctor --fix` call `fix`; the launchers call facts/bytecode_cache.py's
`child_environ`, which reads the marker.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from envkit.facts.bytecode_cache import PREFIX_VAR, cache_folder, marker
from envkit.facts.model import TorchBytecode
from envkit.facts.runner import LiveRunner
from envkit.fsutil import atomic_write_text

# Folders never imported by a training process, and most of the standard library's files (its test suite
# alone is two thirds of CPython's): pruned from the walk into envkit's cache, by name below the folders
# walked (a venv that lives in a folder named `test` is walked all the same).
SKIPPED_NAMES = frozenset({"test", "tests", "idlelib", "turtledemo", "lib2to3", "tkinter", "ensurepip", "__pycache__"})
COMPILE_TIMEOUT_S = 1800  # the standard library and a CUDA torch's site-packages: about a minute on 16 cores


@dataclass(frozen=True)
class Fixed:
    """What `fix` did: `where` is "in place" or "envkit's cache"; `ok` whether torch's bytecode is there now."""

    where: str
    folders: tuple[str, ...]
    seconds: float
    ok: bool
    error: str = ""

    def line(self) -> str:
        what = (f"torch's bytecode written in place ({', '.join(self.folders)})" if self.where == "in place"
                else f"torch's bytecode written into envkit's cache {cache_folder()} ({len(self.folders)} folders); "
                     f"`envkit run`, `exec` and `sweep` use it ({PREFIX_VAR})")
        return f"{what} in {self.seconds:.0f} s" + ("" if self.ok else f", but it is still missing: {self.error}")

    def to_dict(self) -> dict:
        return {"where": self.where, "folders": list(self.folders), "seconds": round(self.seconds, 1), "ok": self.ok,
                "error": self.error or None, **({"prefix": str(cache_folder())} if self.where != "in place" else {})}


def _sys_path(python: str) -> tuple[list[str], str]:
    """(`python`'s import folders, its bytecode's tag: cpython-312)."""
    code = ("import json, os, sys; print(json.dumps([[p for p in sys.path if p and os.path.isdir(p)], "
            "sys.implementation.cache_tag]))")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    folders, tag = json.loads(out.stdout)
    return folders, tag


def _nested_site_packages(folders: list[str]) -> set[str]:
    """The site-packages inside a folder that is not itself on the interpreter's path: a venv's base
    interpreter keeps its own packages inside its standard library's folder."""
    return {os.path.join(f, name) for f in folders for name in ("site-packages", "dist-packages")
            if os.path.isdir(os.path.join(f, name)) and os.path.join(f, name) not in folders}


def _sources(folders: list[str], prune: bool) -> list[str]:
    """Every module under `folders`, as Python names them (the folders as the interpreter's path gives
    them, not resolved: its bytecode's place under a prefix mirrors that name). With `prune`, the
    folders of SKIPPED_NAMES and nested site-packages are left out as the walk meets them (compileall's
    own -x filters file by file after walking everything: 8 s for a stdlib holding its base site-packages)."""
    nested = _nested_site_packages(folders) if prune else set()
    out = []
    for folder in folders:
        for here, dirs, files in os.walk(folder):
            dirs[:] = [d for d in dirs if d != "__pycache__" and not (prune and (d in SKIPPED_NAMES
                                                                                 or os.path.join(here, d) in nested))]
            out += [os.path.join(here, f) for f in files if f.endswith(".py")]
    return out


def _copy_beside_ones(sources: list[str], prefix: Path, tag: str) -> int:
    """Copy the bytecode that already lies beside the sources (the standard library's, a package pip
    compiled) to where Python looks under `prefix`: the same files, valid there as they are (a .pyc
    names its source's size and time, not its place), so compileall only compiles what is missing."""
    copied = 0
    for source in sources:
        folder, name = os.path.split(source)
        pyc = os.path.join(folder, "__pycache__", f"{name[:-3]}.{tag}.pyc")  # what an interpreter without -O reads
        dest = prefix / os.path.abspath(folder).lstrip(os.sep) / os.path.basename(pyc)  # importlib's cache_from_source
        if os.path.isfile(pyc) and not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(pyc, dest)
            copied += 1
    return copied


def _compileall(python: str, sources: list[str], prefix: Path | None) -> tuple[int, str]:
    """(the worst exit code, the output) of compileall over `sources`, in one process a core: compileall
    runs a list of files (-i) in one process, and its -j only spreads a folder's walk. A file that is
    up to date is skipped by its header. The exit code is 1 when any one file fails (a package's test
    data written in Python 2 is common), so whether torch's bytecode is there is asked afterwards (_found)."""
    parts = max(1, min(os.cpu_count() or 1, 32, len(sources) // 200 or 1))
    with tempfile.TemporaryDirectory(prefix="envkit-compile-") as tmp:
        procs = []
        for i in range(parts):
            listed = Path(tmp) / f"{i}.txt"
            listed.write_text("\n".join(sources[i::parts]) + "\n")
            procs.append(subprocess.Popen([python, "-m", "compileall", "-q", "-i", str(listed)], stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, env=_with_prefix(prefix)))
        try:
            outs = [p.communicate(timeout=COMPILE_TIMEOUT_S)[0] for p in procs]
        finally:  # a timeout or Ctrl-C leaves none of them compiling on
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    return max(p.returncode for p in procs), "".join(outs)


def _with_prefix(prefix: Path | None) -> dict[str, str]:
    """The environment that points Python at `prefix` (None: beside the sources). The variable, not
    `-X pycache_prefix`: compileall's workers are started by a fork server from Python 3.12 on, and
    inherit the environment but not -X options (seen on an H100 host: they wrote beside the sources)."""
    env = {k: v for k, v in os.environ.items() if k != PREFIX_VAR}
    return env if prefix is None else {**env, PREFIX_VAR: str(prefix)}


def _found(python: str, source: str, prefix: Path | None) -> bool:
    """Whether `python` (with `prefix` as its PYTHONPYCACHEPREFIX) finds the bytecode of `source`: asked of
    that interpreter, whose cache tag and prefix rule are its own."""
    code = "import importlib.util, os, sys; print(os.path.isfile(importlib.util.cache_from_source(sys.argv[1])))"
    out = subprocess.run([python, "-c", code, source], capture_output=True, text=True, timeout=60, env=_with_prefix(prefix))
    return out.stdout.strip() == "True"


def fix(python: str, torch_folder: str, writable: bool, also: tuple[Path, ...] = ()) -> Fixed:
    """Write torch's bytecode for `python`: in place where `writable` (this user may write torch's
    folders), else into envkit's cache, with the marker that makes envkit's launchers use it for
    `python`. `also`: more folders a process of `python` imports from (envkit's trainer, linked beside
    its entry script: launch/torchrun.py)."""
    start = time.perf_counter()
    folders, prefix = [str(Path(torch_folder).parent)], None if writable else cache_folder()
    try:
        if prefix is not None:
            found, tag = _sys_path(python)
            folders = [*found, *(str(p) for p in also if Path(p).is_dir())]
        sources = _sources(folders, prune=prefix is not None)
        if prefix is not None:
            prefix.mkdir(parents=True, exist_ok=True)
            _copy_beside_ones(sources, prefix, tag)
        _, output = _compileall(python, sources, prefix)
        ok = _found(python, str(Path(torch_folder) / "__init__.py"), prefix)
        error = "" if ok else (output.strip().splitlines() or ["no output"])[-1][:300]
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        ok, error = False, str(exc)[:300]
    if ok and prefix is not None:
        atomic_write_text(marker(python), json.dumps({"python": os.path.abspath(python), "prefix": str(prefix),
                                                      "folders": folders, "written": time.time()}, indent=1) + "\n")
    return Fixed("in place" if prefix is None else "envkit's cache", tuple(folders), time.perf_counter() - start, ok, error)


def ensure(python: str, also: tuple[Path, ...] = ()) -> Fixed | None:
    """`fix` where `python`'s torch has no bytecode, Python writes none and envkit's cache does not hold
    it either (doctor's probe answers); None where nothing is to be done. After setup's verification,
    whose imports wrote the bytecode they loaded (torch.compile's too on CUDA), that is a torch in a
    folder this user may not write; torch.compile's modules alone missing on a machine that does not
    compile by default (doctor says so) are not worth compiling all of site-packages for."""
    try:
        code = TorchBytecode.from_probe(LiveRunner(python).interpreter().get("torch_bytecode"))
    except Exception:  # noqa: BLE001 - an interpreter that cannot be probed has its own error elsewhere (setup's verification)
        return None
    if code is None or code.compiled or code.envkit_cache or code.python_writes:
        return None
    return fix(python, code.folder, code.writable, also)
