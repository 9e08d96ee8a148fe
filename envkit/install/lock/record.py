"""pylock.machine.toml from an `envkit setup`: the packages the interpreter holds now, with the wheel (URL
and sha256) each came from where the installer reported it (pip's `install --report`, or the
index's own entries for uv: index_hashes.py), or where the previous lock recorded it for the same
version. Written as a pylock of this one machine (single.py) by the one TOML writer (toml.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from envkit.install.act.interp import BOOTSTRAP, Interpreter
from envkit.install.lock import single, toml
from envkit.install.lock.index_hashes import local_sha256
from envkit.install.lock.read import LockFile


def write(path: Path, doc: dict) -> bool:
    """Atomically; False (and nothing touched) when the file already says the same."""
    return toml.write(path, doc, single.header(path, doc))


def profile_hash(resolved: dict) -> str:
    return hashlib.sha256(json.dumps(resolved, sort_keys=True, default=str).encode()).hexdigest()


def hashes_from_report(report_path: Path | None) -> dict[str, dict]:
    """name -> {"version", "sha256", "url"} from pip's `install --report` JSON."""
    out: dict[str, dict] = {}
    if report_path is None or not report_path.is_file():
        return out
    try:
        data = json.loads(report_path.read_text())
    except (OSError, ValueError):
        return out
    for item in data.get("install", []):
        meta, info = item.get("metadata", {}), item.get("download_info", {})
        name = meta.get("name")
        if not name:
            continue
        archive = info.get("archive_info") or {}
        sha = (archive.get("hashes") or {}).get("sha256")
        if not sha and str(archive.get("hash", "")).startswith("sha256="):
            sha = archive["hash"].split("=", 1)[1]
        url = info.get("url")
        if not sha and url and url.startswith("file://") and url.endswith(".whl"):
            sha = local_sha256(url)
        out[single.canon(name)] = {"version": meta.get("version"), "sha256": sha, "url": url}
    return out


def required_bootstrap(dists: dict[str, dict], markers: dict[str, str]) -> set[str]:
    """The bootstrap packages (pip, setuptools, wheel) that the installed set needs: reached from any
    other distribution through its Requires-Dist lines that hold here (markers evaluated in the
    interpreter's environment, no extras). torch requires setuptools: left out, pip 26.1+ refuses
    the lock as incomplete. Those nothing requires came with the venv and stay out. Pure."""
    from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = [k for k in dists if k not in BOOTSTRAP]
    while todo:
        key = todo.pop()
        if key in seen:
            continue
        seen.add(key)
        for line in dists.get(key, {}).get("requires") or []:
            try:
                req = Requirement(line)
                if req.marker is not None and not req.marker.evaluate({**markers, "extra": ""}):
                    continue
            except (InvalidRequirement, InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
                continue
            dep = canonicalize_name(req.name)
            if dep in dists and dep not in seen:
                todo.append(dep)
    return seen & BOOTSTRAP


def build(interpreter: Interpreter, *, platform: dict, profile: dict, source: dict, env: dict[str, str],
          report: dict[str, dict], previous: LockFile | None, cached: dict[str, str], envkit_version: str,
          project: dict | None = None) -> dict:
    """The lock of what `interpreter` holds now. Hashes come from this run's report, or from the
    previous lock for packages this run did not touch (the same version)."""
    prev = {single.canon(p.name): p for p in (previous.picks() if previous is not None and previous.single else [])}
    entries = []
    needed = required_bootstrap(interpreter.dists, interpreter.markers)
    for key, d in sorted(interpreter.dists.items()):
        if (key in BOOTSTRAP and key not in needed) or d.get("editable"):
            continue
        e = {"name": d["name"], "version": d["version"]}
        r, old = report.get(key), prev.get(key)
        same_as_before = old is not None and old.version == d["version"]
        if r and r.get("version") == d["version"]:
            e["sha256"], e["url"] = r.get("sha256"), r.get("url")
        elif old is not None and same_as_before:
            e["sha256"], e["url"] = old.sha256, old.url or (Path(old.path).resolve().as_uri() if old.path else None)
        if key in cached:
            e["cached"] = cached[key]
        elif old is not None and same_as_before and old.cached:
            e["cached"] = old.cached
        entries.append({k: v for k, v in e.items() if v})
    return single.doc(platform=platform, profile=profile, source=source, env=dict(env), entries=entries,
                      envkit_version=envkit_version, project=project)
