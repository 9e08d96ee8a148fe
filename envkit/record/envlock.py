"""The training interpreter's environment as a PEP 751 lock of one target (the shape of
pylock.machine.toml, install/lock/single.py, so `envkit setup --lock` and `envkit reproduce` install it):
every installed distribution with its version and, where it is known (record/hashes.py), the wheel's
URL and sha256. Distributions installed from a local folder or in editable mode cannot be
downloaded again: they are listed in [tool.envkit.record] `local`, with their folder (their code
state is recorded per run, record/code.py), and the names without a hash in `missing-hashes`.

Made once per state of the environment (record/envstate.py) and kept in envkit's cache, so a run's
start pays a directory listing, not a lock. A lock with missing hashes is kept for an hour only:
the next run after that asks the indexes again (they may be back, or credentials given)."""

from __future__ import annotations

import json
import os
import platform as _platform
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from envkit import __version__
from envkit.fsutil import atomic_write_text
from envkit.install.act.interp import BOOTSTRAP, probe
from envkit.install.index.pip_config import pip_sources
from envkit.install.lock import single, toml
from envkit.install.lock.record import required_bootstrap
from envkit.install.lock.single import canon, doc
from envkit.install.setup.managed import find_managed
from envkit.record import hashes
from envkit.record.envstate import cache_root, state_key
from envkit.facts.torch_build import TorchBuild
from envkit.runfolder.folder import RunFolder

HEADER = ["pylock.toml of the interpreter that trained this run, written by envkit when the run started (PEP 751,",
          "one target). `envkit reproduce RUN_DIR` builds a fresh venv from it; `envkit setup --lock` installs it too.",
          "[tool.envkit.record] names the local or editable installs and the packages whose wheel hash is unknown."]
RETRY_MISSING_S = 3600.0


@dataclass
class EnvLock:
    key: str
    text: str  # the pylock.toml
    packages: int
    missing: list[str] = field(default_factory=list)  # names recorded by version only (no wheel hash)
    local: list[dict] = field(default_factory=list)  # {name, version, folder, editable}
    unreachable: dict[str, str] = field(default_factory=dict)  # index -> why it could not be read
    from_cache: bool = False

    def summary(self) -> dict:
        return {"file": "pylock.toml", "state_key": self.key, "packages": self.packages, "missing_hashes": self.missing,
                "local": self.local, "unreachable_indexes": self.unreachable, "from_cache": self.from_cache}


def environment_lock(python: str, *, device: str | None = None, profile: str | None = None) -> EnvLock:
    """The lock of `python`'s environment: from the cache when its state is unchanged, else made now."""
    key = state_key(python)
    path = cache_root() / "locks" / f"{key}.json"
    try:
        data = json.loads(path.read_text())
        fresh = not data["missing"] or time.time() - data["created"] < RETRY_MISSING_S
        if fresh and data.get("device") == device:
            return EnvLock(key, data["text"], data["packages"], data["missing"], data["local"], data.get("unreachable") or {},
                           from_cache=True)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    lock = build(python, key, device=device, profile=profile)
    try:
        atomic_write_text(path, json.dumps({"text": lock.text, "packages": lock.packages, "missing": lock.missing,
                                            "local": lock.local, "unreachable": lock.unreachable, "device": device,
                                            "created": time.time()}))
    except OSError:
        pass  # a read-only cache: made again next time
    return lock


def _folder_of(info: dict | None) -> str | None:
    """The local folder a distribution was installed from (PEP 610 dir_info), or None."""
    if not info or "dir_info" not in info or not str(info.get("url", "")).startswith("file://"):
        return None
    return unquote(urlsplit(info["url"]).path)


def _indexes(python: str) -> list[str]:
    """The indexes (and find-links folders) the interpreter's pip reads, and the managed lock's."""
    managed = find_managed()
    lock = (managed.state.get("lock") if managed else None) or ""
    out = hashes.known_lock_indexes([Path(lock)] if lock else [])
    indexes, links = pip_sources(python)
    return list(dict.fromkeys(out + indexes + links))


def _lock_paths() -> list[Path]:
    managed = find_managed()
    paths = [Path(managed.state["lock"])] if managed and managed.state.get("lock") else []
    return paths + [p for p in (Path(single.NAME), Path(single.OLD_NAME), Path("pylock.toml")) if p.is_file()]


def _platform_of(found, torch: str | None, device: str | None) -> dict:
    system = found.markers.get("platform_system") or _platform.system()
    backend = torch.split("+", 1)[1] if torch and "+" in torch else ("pypi" if torch else None)
    if device is None:  # without doctor's facts (exec): the machine's accelerator, as setup's locks name it
        if system == "Darwin" and found.machine == "arm64":
            device = "mps"
        elif backend and TorchBuild(backend).kind == "rocm":
            device = "rocm"
        elif backend and TorchBuild(backend).kind == "cuda":
            device = "cuda"
        else:  # a +cpu torch on a GPU box: the machine is still a CUDA one (reproduce and setup --lock compare machines)
            device = "cuda" if shutil.which("nvidia-smi") else "cpu"
    os_name, os_version = os_named(system)
    d = {"system": system, "os": os_name, "os_version": os_version, "kernel": found.markers.get("platform_release"), "arch": found.machine,
         "python": found.version, "python_minor": ".".join(found.version.split(".")[:2]),
         "implementation": found.implementation.lower(), "device": device, "backend": backend}
    return {k: v for k, v in d.items() if v}


def os_named(system: str) -> tuple[str, str | None]:
    """(the OS's name, its version) as doctor names them (facts/collect.py: /etc/os-release's
    PRETTY_NAME on Linux, macOS and its version on a Mac), so a run's lock, pylock.machine.toml and doctor
    say one name; the kernel's release is the lock's `kernel`."""
    if system == "Linux":
        try:
            rel = _platform.freedesktop_os_release()
            return rel.get("PRETTY_NAME") or rel.get("NAME") or system, rel.get("VERSION_ID")
        except OSError:
            return system, None
    if system == "Darwin":
        return "macOS", _platform.mac_ver()[0] or None
    return system, None


def build(python: str, key: str, *, device: str | None = None, profile: str | None = None) -> EnvLock:
    """Probe the interpreter (a child process), find each wheel's hash, write the lock's text."""
    found = probe(python)
    needed = required_bootstrap(found.dists, found.markers)
    entries, local, wanted = [], [], {}
    known = hashes.known_locks(_lock_paths())
    for name, d in sorted(found.dists.items()):
        if name in BOOTSTRAP and name not in needed:
            continue
        info = hashes.direct_url(d.get("path"))
        folder = _folder_of(info)
        if d.get("editable") or folder:
            local.append({"name": canon(d["name"]), "version": d["version"], "folder": folder, "editable": bool(d.get("editable"))})
            continue
        hit = hashes.from_direct_url(info) or known.get((canon(d["name"]), d["version"]))
        e = {"name": d["name"], "version": d["version"], **(hit or {})}
        if not hit:
            wanted[canon(d["name"])] = {"version": d["version"], "path": d.get("path")}
        entries.append(e)
    unreachable, answered = {}, []
    if wanted and hashes.budget_seconds() > 0:
        looked, unreachable = hashes.from_indexes(wanted, _indexes(python), hashes.budget_seconds())
        for e in entries:
            hit = looked.get(canon(e["name"]))
            if hit:
                e.update(url=hit["url"], sha256=hit["sha256"])
                answered.append(hit["index"])
    torch = (found.dists.get("torch") or {}).get("version")
    plat = _platform_of(found, torch, device)
    lock_doc = doc(platform=plat, profile={"name": profile} if profile else {},
                   source={"index_urls": sorted({i for i in answered if "://" in i and not i.startswith("file:")})},
                   env={}, entries=[{k: v for k, v in e.items() if v} for e in entries], envkit_version=__version__)
    missing = sorted(v["name"] for v in lock_doc["tool"]["envkit"].get("versions-only") or [])
    lock_doc["tool"]["envkit"]["record"] = {"python": os.path.abspath(python), "state-key": key,
                                            "missing-hashes": missing, "local": local}
    text = toml.dumps(lock_doc, HEADER)
    toml.validate(text, "pylock.toml")  # packaging's own PEP 751 check, where it has one
    return EnvLock(key, text, len(entries), missing, local, unreachable)


def write(run_dir: Path, lock: EnvLock) -> Path:
    path = RunFolder(run_dir).lock_file
    atomic_write_text(path, lock.text)
    return path
