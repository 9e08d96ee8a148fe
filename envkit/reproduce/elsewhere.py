"""A run recorded on another kind of machine (a Mac; the CPU box reproduced on a CUDA box): its
lock cannot be installed here as it is (`envkit setup --lock` refuses it, and stays strict), so
reproduce makes a lock for this machine from it:

- torch, torchvision and torchaudio at the recorded base version, in this machine's build: the
  build and index `envkit setup` chooses here (install/choice: variants.choose, then resolve),
  e.g. 2.13.0 from PyPI on a Mac becomes 2.13.0+cpu from PyTorch's CPU index on a CPU box;
- every other package at its recorded version; a wheel whose recorded file fits this interpreter
  (its tags) keeps its URL and sha256, one recorded for the other machine (a macOS arm64 build) is
  installed by version, from the file this machine's indexes have of that version, and named;
- the recorded build's own runtime (nvidia-*, triton: RUNTIME) is left out, and this build's is
  added as pip resolves it here (`pip install --dry-run --report`, the recorded versions pinned).

The lock is written into envkit's cache and installed by the same install as any other
(install/lock/install.py), so every file is checked against the sha256 written here."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from envkit import __version__
from envkit.errors import EnvkitError
from envkit.fsutil import atomic_write_text
from envkit.fsutil import cache_dir
from envkit.install.act.interp import probe
from envkit.install.choice.model import parse_request
from envkit.install.choice.resolve import resolve
from envkit.install.choice.variants import choose
from envkit.install.index.pip_config import pip_sources
from envkit.install.lock import toml
from envkit.install.lock.machine import machine_device, platform_differences, platform_of
from envkit.install.lock.record import hashes_from_report
from envkit.install.lock.single import canon, doc
from envkit.reproduce.check import CannotReproduce

from envkit.reproduce.builds import RUNTIME, TORCH_FAMILY


@dataclass
class Elsewhere:
    recorded: dict  # the platform the run's lock names
    here: dict  # this machine's
    differences: list[str]
    torch_recorded: str
    torch_here: str
    index: str  # where this machine's torch comes from
    lock: Path  # the lock made for this machine
    kept: list[str] = field(default_factory=list)  # recorded files that fit here: their sha256 kept
    by_version: list[str] = field(default_factory=list)  # "name version": the other machine's file, this machine's of that version
    added: list[str] = field(default_factory=list)  # this build's runtime
    dropped: list[str] = field(default_factory=list)  # the recorded build's runtime

    @staticmethod
    def _kind(p: dict) -> str:
        system = {"Darwin": "macOS"}.get(str(p.get("system")), str(p.get("system") or "?"))
        return f"{system} {p.get('arch') or '?'} {p.get('device') or '?'}"

    def line(self, judged: dict | None = None) -> str:
        """The one line that says it; with the verdict (session.py), the tolerance it was held to."""
        text = (f"another machine: recorded on {self._kind(self.recorded)} (torch {self.torch_recorded}), reproduced here on "
                f"{self._kind(self.here)} with torch {self.torch_here} from {self.index}")
        if self.by_version:
            text += f"; installed by version (the recorded files are the other machine's): {', '.join(self.by_version)}"
        if self.dropped or self.added:
            text += f"; the torch build's runtime: {', '.join(self.dropped) or 'none'} left out, {', '.join(self.added) or 'none'} added"
        if judged is not None:
            tol = ", ".join(f"{k} {v:.2g}" for k, v in sorted((judged.get("tolerance") or {}).items()))
            text += f"; compared within tolerance {tol or 'none'} ({judged.get('tolerance_from')})"
        return text

    def to_dict(self) -> dict:
        return {"recorded": self.recorded, "here": self.here, "differences": self.differences,
                "torch_recorded": self.torch_recorded, "torch_here": self.torch_here, "index": self.index, "lock": str(self.lock),
                "kept": self.kept, "by_version": self.by_version, "added": self.added, "dropped": self.dropped,
                "line": self.line()}


def differences(lock, facts) -> list[str]:
    """How the machine the lock names differs from this one (OS, architecture, Python, accelerator)."""
    return platform_differences(lock.platform, platform_of(facts, device=machine_device(facts)))


def _fits(filename: str, tags: set[str]) -> bool:
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        return any(str(t) in tags for t in parse_wheel_filename(filename)[3])
    except InvalidWheelFilename:
        return False


def _torch_here(lock, facts, python_version: str, tags: list[str]):
    """(this machine's choice, the resolved torch family) at the recorded torch's base version."""
    from packaging.version import Version

    public = Version(lock.versions["torch"]).public
    request = parse_request(public)
    companions = [n for n in TORCH_FAMILY[1:] if n in lock.versions]
    try:
        choice = choose(facts, request, companions=companions)
        res = resolve(choice, request, frozenset(tags), python_version, companions, explicit_index=False, pip_python=sys.executable)
    except EnvkitError as exc:
        raise CannotReproduce(f"the run was recorded on another machine, and this machine's build of torch {public} cannot be "
                              f"found: {exc.message}", where=str(lock.path), fix=exc.fix or "check the network or pip's indexes")
    return choice, res


def _pip_resolve(pins: list[str], extra_index: str | None) -> dict[str, dict]:
    """name -> {version, sha256, url} of what pip installs here for `pins` (dependencies included),
    read from `pip install --dry-run --report`, with pip's own sources and this build's index."""
    env = dict(os.environ)
    indexes, _links = pip_sources(sys.executable)
    if extra_index and extra_index not in indexes:
        env["PIP_EXTRA_INDEX_URL"] = " ".join([*indexes[1:], extra_index])
    with tempfile.TemporaryDirectory(prefix="envkit-elsewhere-") as tmp:
        (Path(tmp) / "requirements.txt").write_text("\n".join(pins) + "\n")
        report = Path(tmp) / "report.json"
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--only-binary", ":all:",
                               "--quiet", "--report", str(report), "-r", str(Path(tmp) / "requirements.txt")],
                              capture_output=True, text=True, env=env, timeout=1800, check=False)
        if proc.returncode != 0:
            why = ((proc.stderr or proc.stdout).strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
            raise CannotReproduce(f"the run's packages at their recorded versions cannot be installed on this machine: pip: {why}",
                                  where="pip install --dry-run", fix="make those versions reachable through pip's indexes")
        return hashes_from_report(report)


def adapt(lock, facts) -> Elsewhere | None:
    """The lock for this machine (None: the run was recorded on a machine like this one)."""
    diffs = differences(lock, facts)
    if not diffs:
        return None
    found = probe(sys.executable, dists=False)
    tags = set(found.tags)
    choice, res = _torch_here(lock, facts, found.version, found.tags)
    family = {"torch": res.torch, **res.companions}
    picks = {canon(p.name): p for p in lock.picks()}
    rest = {n: p for n, p in picks.items() if n not in TORCH_FAMILY and not RUNTIME.match(n)}
    pins = [f"{n}=={c.version}" for n, c in family.items()] + [f"{n}=={p.version}" for n, p in rest.items()]
    resolved = _pip_resolve(pins, res.index_url)
    out = Elsewhere(recorded=dict(lock.platform), here=platform_of(facts, device=machine_device(facts), backend=choice.backend),
                    differences=diffs, torch_recorded=lock.versions["torch"], torch_here=str(res.torch.version),
                    index=res.index_url or ", ".join(res.sources) or "pip's configured sources", lock=Path())
    out.dropped = sorted(n for n in picks if RUNTIME.match(n))
    entries = []
    for name, hit in sorted(resolved.items()):
        p = picks.get(name) if name not in TORCH_FAMILY else None
        if p is not None and p.has_file and p.sha256 and _fits(p.filename, tags):
            entries.append({"name": name, "version": p.version, "url": p.url or Path(p.path).resolve().as_uri(), "sha256": p.sha256})
            out.kept.append(name)
            continue
        entries.append({"name": name, "version": hit["version"], "url": hit.get("url"), "sha256": hit.get("sha256")})
        if p is not None:
            out.by_version.append(f"{name} {p.version}")
        elif name not in family:
            out.added.append(name)
    out.lock = _write(lock, out, entries, [res.index_url] if res.index_url else list(res.sources))
    return out


def _write(lock, out: Elsewhere, entries: list[dict], indexes: list[str]) -> Path:
    """The lock for this machine, in envkit's cache (named by the run's lock and this machine)."""
    d = doc(platform=out.here, profile={}, source={"index_urls": indexes}, env={}, entries=entries,
            envkit_version=__version__)
    d["tool"]["envkit"]["reproduce"] = {"recorded-platform": out.recorded, "recorded-torch": out.torch_recorded,
                                       "by-version": out.by_version, "added": out.added, "dropped": out.dropped}
    text = toml.dumps(d, ["The lock of a run recorded on another machine, made for this one by `envkit reproduce`",
                          "(envkit/reproduce/elsewhere.py): the same versions, this machine's torch build."])
    key = hashlib.sha256(Path(lock.path).read_bytes() + json.dumps(out.here, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir() / "reproduce" / "locks" / key / "pylock.toml"
    atomic_write_text(path, text)
    return path
