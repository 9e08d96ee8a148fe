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
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from envkit.facts.bytecode_cache import PREFIX_VAR, cache_folder, marker
from envkit.facts.model import TorchBytecode
from envkit.facts.runner import LiveRunner
from envkit.fsutil import atomic_write_text

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


def _sys_path(python: str) -> list[str]:
    code = "import json, os, sys; print(json.dumps([p for p in sys.path if p and os.path.isdir(p)]))"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def _compileall(python: str, folders: list[str], prefix: Path | None) -> subprocess.CompletedProcess:
    # -j 0: every core. Its exit code is 1 when any one file fails (a package's test data written in
    # Python 2 is common), so whether torch's bytecode is there is asked afterwards (_found).
    return subprocess.run([python, "-m", "compileall", "-q", "-j", "0", *folders], capture_output=True, text=True,
                          timeout=COMPILE_TIMEOUT_S, env=_with_prefix(prefix))


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
            folders = [*_sys_path(python), *(str(p) for p in also if Path(p).is_dir())]
            prefix.mkdir(parents=True, exist_ok=True)
        done = _compileall(python, folders, prefix)
        ok = _found(python, str(Path(torch_folder) / "__init__.py"), prefix)
        error = "" if ok else (done.stdout.strip().splitlines() or done.stderr.strip().splitlines() or ["no output"])[-1][:300]
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
