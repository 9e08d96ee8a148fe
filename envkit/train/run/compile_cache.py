"""What torch.compile produced, kept in envkit's cache so the next run of the same model on the
same kind of machine compiles nothing (training.compile_cache).

Inductor already keeps a local cache (/tmp/torchinductor_<user>), but a fresh machine, a new
container or a cleaned /tmp starts empty and pays the whole compile again (about 29 s for GPT-2
small on an H100). torch's "mega cache" (torch.compiler.save_cache_artifacts / load_cache_artifacts)
packs the compiled graphs (Inductor's FX graph cache, AOTAutograd's cache, Triton kernels, autotuning
results) into one blob; envkit writes it after the first step to cache_dir()/compile/<key>.bin and
loads it before the next run compiles. On the CPU the graphs' C++ kernels are shared libraries that
Inductor builds with the system compiler into its own cache folder, and the mega cache holds only
their source: a fresh folder built them all again (14 of the 2-block gpt's, 13 s of g++ on the 2-core
box, most of a warm run's 20 s). So the file also holds the libraries this run built or loaded, put
back where Inductor looks for them (<its cache>/<2 characters>/<name>.so) before anything compiles.

The key names what the graphs depend on: torch's build (version, git commit, CUDA), the device
(its name, or the CPU's architecture), Python's version and the model's shape (its config, the
data's vocabulary or classes, the micro-batch, precision, compile mode and scope, the processes).
A blob holds generated code that will run, so it is signed with this machine's key
(runfolder/seal.py): a file that does not verify (copied from elsewhere, changed) is never
loaded; one line says so and the run compiles as if there were none. Nothing here stops a run:
every failure is a warning. Only rank 0 writes, each write atomic, so several processes or
runs never see half a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import platform
import re
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from envkit.config.schema import CompileMode, CompileScoped, Parallel, TrainPrecision
from envkit.fsutil import cache_dir
from envkit.train.run.determinism import flex_attention_for
from envkit.runfolder.seal import machine_key
from envkit.fsutil import atomic_write_bytes

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice

MAGIC = b"envkit-compile-cache 2\n"  # 2: a zip of torch's blob and the C++ kernels (1: torch's blob alone)
OLD_MAGIC = b"envkit-compile-cache 1\n"
# Inductor's name for a built kernel library: <cache>/<its 2nd and 3rd characters>/c<key>[.main].so
KERNEL = re.compile(r"(?P<dir>[a-z0-9]{2})/c(?P=dir)[a-z0-9]{40,60}(?:\.main)?\.so")
MAX_BYTES = 512 << 20  # a blob above this is not kept: reading it would cost more than compiling saves
COUNTERS = (("inductor", "fxgraph_cache_hit"), ("inductor", "fxgraph_cache_miss"),
            ("aot_autograd", "autograd_cache_hit"), ("aot_autograd", "autograd_cache_miss"))


def compile_counters() -> dict:
    """torch's own counts of compiled graphs and cache hits in this process (summary.json's
    "compile_stats"): a miss is a graph compiled here; a second run that loaded the cache has none."""
    from torch._dynamo.utils import counters

    out: dict = {name: int(counters[group][name]) for group, name in COUNTERS}
    out["graphs"] = int(counters["stats"]["unique_graphs"])  # what Dynamo traced (it traces on a hit too)
    out["seconds"] = compile_seconds()
    return out


def compile_seconds(top: int = 12, at_least: float = 0.05) -> dict[str, float]:
    """Where the compile's seconds went in this process, by torch's own phase timers (Dynamo's trace,
    AOTAutograd, Inductor's lowering, the wait for Triton/C++ kernel builds, autotuning...), the longest
    first. The phases nest (compile_inner holds the rest), so they do not add up: they show whether a
    warm start still pays for tracing, for kernel builds or for neither."""
    try:
        from torch._dynamo.utils import compile_times

        names, values = compile_times(repr="csv", aggregate=True)
        pairs = [(str(n), round(float(str(v)), 2)) for n, v in zip(names, values)]  # csv: both are text
    except Exception:  # noqa: BLE001 - a private torch helper: its shape may change; the figures are optional
        return {}
    pairs = sorted((p for p in pairs if p[1] >= at_least), key=lambda p: -p[1])[:top]
    return dict(pairs)


def cache_folder() -> Path:
    return cache_dir() / "compile"


def key_parts(cfg, *, device_type: TrainDevice, device_name: str, data_info: dict, micro_batch: int, precision: TrainPrecision, mode: CompileMode,
              scope: CompileScoped, world: int, parallel: Parallel) -> dict:
    """What the compiled graphs depend on, as the key's readable source."""
    device = device_name if device_type == "cuda" else f"{device_type} {platform.machine()}"
    parts = {"torch": torch.__version__, "git": getattr(torch.version, "git_version", None),
             "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None), "device": device,
             "python": sys.version.split()[0], "model": cfg.run_dict().get("model"),
             "data": {k: v for k, v in sorted(data_info.items()) if isinstance(v, (int, float, str, bool, type(None)))},
             "batch": micro_batch, "precision": precision, "mode": mode, "scope": scope,
             "world": world, "parallel": parallel, "deterministic": cfg.training.deterministic}
    # the attention kernel is chosen when the graph is traced, so a blob of another choice is not this run's; named only
    # where it is not SDPA's own choice, so the keys of the runs before it stay the same
    attention = "flex" if flex_attention_for(cfg, device_type) else cfg.training.sdpa_backend
    if attention not in (None, "auto"):
        parts["attention"] = attention
    return parts


def cache_key(cfg, **shape) -> str:
    """The cache's name for the graphs of `cfg`'s model at `shape` (key_parts' keywords)."""
    digest = hashlib.sha256(json.dumps(key_parts(cfg, **shape), sort_keys=True, default=str).encode()).hexdigest()
    return f"{cfg.model.type.replace(':', '_').replace('.', '_')[:40]}-{digest[:20]}"


def _mac(key: str, data: bytes) -> str:
    return hmac.new(machine_key(), key.encode() + b"\0" + hashlib.sha256(data).digest(), hashlib.sha256).hexdigest()


def pack(key: str, data: bytes) -> bytes:
    """One file, header then blob: written in one atomic rename, never a blob without its signature."""
    return MAGIC + _mac(key, data).encode() + b"\n" + data


def unpack(key: str, blob: bytes) -> bytes | None:
    """The blob, if its signature verifies under this machine's key for this key; else None."""
    if not blob.startswith(MAGIC):
        return None
    mac, _, data = blob[len(MAGIC):].partition(b"\n")
    return data if hmac.compare_digest(mac, _mac(key, data).encode()) else None


@dataclass
class CompileCache:
    """One run's use of the cache: `load` before the first step compiles, `save` after it (rank 0)."""

    key: str
    enabled: bool
    log: Callable[[str], None]
    loaded: bytes | None = None  # torch's blob, as loaded
    kernels: dict = field(default_factory=dict)  # the C++ kernel libraries loaded: path under Inductor's cache -> bytes
    started: float = field(default_factory=time.time)  # a library built after this was built by this run
    saved_misses: int = 0  # the compile count at the last save: a later save only when something new compiled
    notes: list = field(default_factory=list)  # summary.json's compile_cache: what was loaded and saved

    @property
    def path(self) -> Path:
        return cache_folder() / f"{self.key}.bin"

    def load(self) -> None:
        if self.enabled and not hasattr(torch.compiler, "load_cache_artifacts"):
            self.enabled = False
            self._say(f"compile cache: off (torch {torch.__version__} has no torch.compiler.save_cache_artifacts: 2.7 and later)")
        if not self.enabled:
            return
        try:
            self._load()
        except Exception as exc:  # noqa: BLE001 - the cache only saves time: compile instead, say why
            self._say(f"compile cache: not loaded ({type(exc).__name__}: {str(exc)[:200]}); compiling")

    def _load(self) -> None:
        path = self.path
        if not path.is_file():
            self._say(f"compile cache: none for {self.key} yet (saved after the first step)")
            return
        if path.stat().st_size > MAX_BYTES + 4096:
            self._say(f"compile cache: {path} refused: larger than {MAX_BYTES >> 20} MiB; compiling")
            return
        blob = path.read_bytes()
        if blob.startswith(OLD_MAGIC):
            self._say(f"compile cache: {path} is in an earlier envkit's format (no C++ kernels); compiling, and saved again")
            return
        data = unpack(self.key, blob)
        if data is None:
            self._say(f"compile cache: {path} refused: its signature does not verify under this machine's key "
                      "(written elsewhere or changed; generated code is never run unverified); compiling")
            return
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            torch_blob = z.read("torch.bin")
            kernels = {n.removeprefix("kernels/"): z.read(n) for n in z.namelist()
                       if n.startswith("kernels/") and KERNEL.fullmatch(n.removeprefix("kernels/"))}
        info = torch.compiler.load_cache_artifacts(torch_blob)
        count = sum(len(v) for v in info.artifacts.values()) if info is not None else 0
        self.loaded, self.kernels = torch_blob, kernels
        placed = _place_kernels(kernels)
        self._say(f"compile cache: loaded {self.key} ({count} artifacts, {len(kernels)} C++ kernels, "
                  f"{len(data) / 2**20:.1f} MiB)" + (f"; {placed} kernels put in Inductor's cache" if placed else ""))

    def save(self) -> None:
        """After the first step (everything the steps run is compiled by then), and again at the
        end only if something compiled since (a split micro-batch). Rank 0 only."""
        if not self.enabled:
            return
        misses = _misses()
        if misses == self.saved_misses:
            return  # nothing compiled since the load or the last save: the file holds it all
        try:
            self._save(misses)
        except Exception as exc:  # noqa: BLE001 - the cache only saves time: the run goes on
            self._say(f"compile cache: not saved ({type(exc).__name__}: {str(exc)[:200]})")

    def _save(self, misses: int) -> None:
        self.saved_misses = misses
        if self.loaded is not None:  # what was loaded is not recorded again by torch: kept in the new file too
            with contextlib.suppress(Exception):
                _record_again(self.loaded)
        result = torch.compiler.save_cache_artifacts()
        if result is None:
            return
        torch_blob, info = result
        count = sum(len(v) for v in info.artifacts.values())
        kernels = {**self.kernels, **_kernels_of_this_run(self.started)}
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:  # stored: the blob is read back whole, once
            z.writestr("torch.bin", torch_blob)
            for rel, lib in sorted(kernels.items()):
                z.writestr(f"kernels/{rel}", lib)
        data = out.getvalue()
        if len(data) > MAX_BYTES:
            self._say(f"compile cache: not saved: {len(data) / 2**20:.0f} MiB is above the {MAX_BYTES >> 20} MiB kept")
            return

        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write_bytes(self.path, pack(self.key, data), mode=0o600)
        self._say(f"compile cache: saved {self.key} ({count} artifacts, {len(kernels)} C++ kernels, {len(data) / 2**20:.1f} MiB) "
                  f"in {self.path.parent}")

    def _say(self, line: str) -> None:
        self.notes.append(line.removeprefix("compile cache: "))
        self.log(line)


def _misses() -> int:
    c = compile_counters()
    return c["fxgraph_cache_miss"] + c["autograd_cache_miss"]


def inductor_folder() -> Path:
    """Inductor's own cache folder (TORCHINDUCTOR_CACHE_DIR, else /tmp/torchinductor_<user>)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir
    except ImportError:  # older torch
        from torch._inductor.codecache import cache_dir as inductor_cache_dir  # type: ignore[attr-defined,no-redef]
    return Path(inductor_cache_dir())


def _kernels_of_this_run(started: float) -> dict[str, bytes]:
    """The C++ kernel libraries in Inductor's cache this process built (newer than its start) or
    loaded (mapped into its memory, where /proc/self/maps says so): path under the cache -> bytes."""
    root = inductor_folder()
    mapped: set[str] = set()
    with contextlib.suppress(OSError):
        prefix = str(root.resolve()) + "/"
        for line in Path("/proc/self/maps").read_text().splitlines():
            lib = line.split(maxsplit=5)[-1]
            if lib.startswith(prefix):
                mapped.add(lib[len(prefix):])
    out: dict[str, bytes] = {}
    for path in root.glob("*/*.so"):
        rel = path.relative_to(root).as_posix()
        if not KERNEL.fullmatch(rel) or path.is_symlink():
            continue
        with contextlib.suppress(OSError):
            if rel in mapped or path.stat().st_mtime >= started:
                out[rel] = path.read_bytes()
    return out


def _place_kernels(kernels: dict[str, bytes]) -> int:
    """Put each library where Inductor looks for it, unless one is there: written atomically, in
    folders of Inductor's cache itself (never through a symlink out of it). Returns how many were put."""
    root = inductor_folder()
    placed = 0
    for rel, lib in kernels.items():
        dest = root / rel
        if dest.exists() or dest.is_symlink():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.parent.is_symlink() or dest.parent.resolve() != root.resolve() / dest.parent.name:
            continue
        atomic_write_bytes(dest, lib, mode=0o755)
        placed += 1
    return placed


def _record_again(data: bytes) -> None:
    """torch records an artifact when it compiles one, not when a loaded one hits: without this a
    run that loaded the cache and compiled one graph more would save that graph alone."""
    from torch.compiler._cache import CacheArtifactManager  # private: any failure only leaves the file smaller

    artifacts = CacheArtifactManager.deserialize(data) or {}
    for kind, items in artifacts.items():
        for artifact in items:
            CacheArtifactManager.record_artifact(kind, artifact.key, artifact.content)
