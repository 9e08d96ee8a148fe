"""envkit.lock: TOML, written by hand (a tiny writer), read with tomllib.

    lock_version = 1
    envkit = "0.1.0"
    [platform]  system, os, os_version, arch, python, implementation, chip, gpus, driver, device, backend
    [profile]   name, sha256 of its resolved values
    [source]    torch request, channel, index_urls ([] = pip's configured sources)
    [env]       the profile's environment variables (never names holding TOKEN, KEY, SECRET, ...)
                No URL in the lock holds credentials (envkit/redact.py).
    [[package]] name, version, sha256 (where the installer reported it), url, cached (nightly wheel kept
                in envkit's cache, used when the index has dropped it)

`envkit setup --lock FILE` rebuilds exactly this set on a machine of the same platform;
`envkit check --lock FILE` reports drift.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.fsutil import atomic_write_text
from envkit.install.act.interp import BOOTSTRAP, Interpreter
from envkit.redact import redact, safe_env

LOCK_VERSION = 1
FIX_CORRUPT = "write it again with `envkit setup` (without --lock), or restore it from version control"


@dataclass
class Lock:
    platform: dict
    profile: dict
    source: dict
    env: dict[str, str]
    packages: list[dict]
    envkit: str = ""
    lock_version: int = LOCK_VERSION

    @property
    def versions(self) -> dict[str, str]:
        return {canon(p["name"]): p["version"] for p in self.packages}

    @property
    def index_urls(self) -> list[str]:
        return list(self.source.get("index_urls") or [])


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ---- writing -----------------------------------------------------------------------------------

def _q(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_q(v) for v in value) + "]"
    s = str(value)
    return json.dumps(s, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def _table(name: str, values: dict) -> list[str]:
    lines = [f"[{name}]"]
    lines += [f"{_key(k)} = {_q(v)}" for k, v in values.items() if v is not None]
    return lines + [""]


def dumps(lock: Lock) -> str:
    lines = ["# envkit.lock: written by `envkit setup`. Rebuild this environment with",
             "#   envkit setup --lock envkit.lock     (same platform only)",
             "# and check an environment against it with `envkit check --lock envkit.lock`.",
             f"lock_version = {lock.lock_version}", f"envkit = {_q(lock.envkit)}", ""]
    # Never a credential in a lock (it is committed): index and package URLs lose their userinfo
    # (pip and uv take it from netrc, keyring or PIP_INDEX_URL at install time), the [env] table
    # loses names holding TOKEN, KEY, SECRET, ... (envkit/redact.py).
    lines += _table("platform", redact(lock.platform))
    lines += _table("profile", redact(lock.profile))
    lines += _table("source", redact(lock.source))
    lines += _table("env", safe_env(lock.env))
    for p in sorted(lock.packages, key=lambda p: canon(p["name"])):
        lines += _table("[package]", redact(p))
    return "\n".join(lines).rstrip() + "\n"


def write(path: Path, lock: Lock) -> bool:
    """Write atomically; False (and nothing touched) when the file already says the same."""
    text = dumps(lock)
    if path.is_file() and path.read_text(errors="replace") == text:
        return False
    atomic_write_text(path, text)
    return True


def profile_hash(resolved: dict) -> str:
    return hashlib.sha256(json.dumps(resolved, sort_keys=True, default=str).encode()).hexdigest()


def hashes_from_report(report_path: Path | None) -> dict[str, dict]:
    """name -> {"sha256", "url"} from pip's `install --report` JSON."""
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
            from urllib.parse import unquote, urlsplit

            from envkit.install.act.execute import sha256_file

            local = Path(unquote(urlsplit(url).path))
            if local.is_file():
                sha = sha256_file(local)
        out[canon(name)] = {"version": meta.get("version"), "sha256": sha, "url": url}
    return out


def build(target: Interpreter, *, platform: dict, profile: dict, source: dict, env: dict[str, str],
          report: dict[str, dict], previous: Lock | None, cached: dict[str, str], envkit_version: str) -> Lock:
    """The lock of what is installed in `target` now. Hashes come from this run's pip report, or
    from the previous lock for packages this run did not touch (same version)."""
    prev = {canon(p["name"]): p for p in (previous.packages if previous else [])}
    packages = []
    for key, d in sorted(target.dists.items()):
        if key in BOOTSTRAP or d.get("editable"):
            continue
        p = {"name": d["name"], "version": d["version"]}
        r = report.get(key)
        if r and r.get("version") == d["version"]:
            p["sha256"], p["url"] = r.get("sha256"), r.get("url")
        elif key in prev and prev[key].get("version") == d["version"]:
            p["sha256"], p["url"] = prev[key].get("sha256"), prev[key].get("url")
        if key in cached:
            p["cached"] = cached[key]
        elif key in prev and prev[key].get("version") == d["version"] and prev[key].get("cached"):
            p["cached"] = prev[key]["cached"]
        packages.append({k: v for k, v in p.items() if v})
    return Lock(platform=platform, profile=profile, source=source, env=dict(env), packages=packages,
                envkit=envkit_version)


# ---- reading -----------------------------------------------------------------------------------

def read_lock_toml(path: Path, write_with: str, fix_corrupt: str = FIX_CORRUPT) -> dict:
    """A lock file's TOML (envkit.lock or pylock.toml); every problem is one line naming the file."""
    from envkit.resources import load_toml

    where = str(path)
    if path.is_dir():
        raise EnvkitError("is a folder, not a lock file", where=where)
    try:
        return load_toml(path)
    except FileNotFoundError:
        raise EnvkitError("lock file not found", where=where, fix=f"write one with `{write_with}`")
    except OSError as exc:
        raise EnvkitError(f"cannot read the lock: {exc.strerror}", where=where)
    except Exception as exc:  # tomllib.TOMLDecodeError
        raise EnvkitError(f"not a valid lock (TOML: {exc})", where=where, fix=fix_corrupt)


def read(path: Path) -> Lock:
    where = str(path)
    data = read_lock_toml(path, "envkit setup")
    if data.get("lock_version") != LOCK_VERSION:
        raise EnvkitError(f"not an envkit lock of version {LOCK_VERSION} (lock_version = {data.get('lock_version')!r})",
                          where=where, fix=FIX_CORRUPT)
    pkgs = data.get("package", [])
    if not isinstance(pkgs, list) or not all(isinstance(p, dict) and isinstance(p.get("name"), str) and isinstance(p.get("version"), str) for p in pkgs):
        raise EnvkitError("every [[package]] needs a name and a version", where=where, fix=FIX_CORRUPT)
    for key in ("platform", "profile", "source", "env"):
        if not isinstance(data.get(key, {}), dict):
            raise EnvkitError(f"[{key}] must be a table", where=where, fix=FIX_CORRUPT)
    if not any(canon(p["name"]) == "torch" for p in pkgs):
        raise EnvkitError("the lock names no torch", where=where, fix=FIX_CORRUPT)
    return Lock(platform=data.get("platform", {}), profile=data.get("profile", {}), source=data.get("source", {}),
                env={str(k): str(v) for k, v in data.get("env", {}).items()}, packages=pkgs,
                envkit=str(data.get("envkit", "")), lock_version=data["lock_version"])


PLATFORM_KEYS = (("system", "OS"), ("arch", "architecture"), ("python_minor", "Python"), ("implementation", "Python implementation"),
                 ("device", "accelerator"))


def platform_differences(lock_platform: dict, here: dict) -> list[str]:
    out = []
    for key, label in PLATFORM_KEYS:
        a, b = lock_platform.get(key), here.get(key)
        if a is not None and b is not None and str(a) != str(b):
            out.append(f"{label} {a} in the lock, {b} here")
    return out


def requirements_text(lock: Lock) -> tuple[str, bool]:
    """A requirements file pinning every package; with --hash lines when every package has one."""
    hashed = all(p.get("sha256") for p in lock.packages)
    lines = []
    for p in sorted(lock.packages, key=lambda p: canon(p["name"])):
        line = f"{p['name']}=={p['version']}"
        if hashed:
            line += f" --hash=sha256:{p['sha256']}"
        lines.append(line)
    return "\n".join(lines) + "\n", hashed


# ---- drift -------------------------------------------------------------------------------------

def compare(lock: Lock, installed: dict[str, str]) -> dict:
    want = {k: v for k, v in lock.versions.items() if k not in BOOTSTRAP}
    have = {k: v for k, v in installed.items() if k not in BOOTSTRAP}
    added = {k: have[k] for k in sorted(set(have) - set(want))}
    removed = {k: want[k] for k in sorted(set(want) - set(have))}
    changed = {k: {"lock": want[k], "installed": have[k]} for k in sorted(set(want) & set(have)) if want[k] != have[k]}
    lines = [f"{k}: {v['lock']} in the lock, {v['installed']} installed" for k, v in changed.items()]
    lines += [f"{k} {v} is installed but not in the lock" for k, v in added.items()]
    lines += [f"{k} {v} is in the lock but not installed" for k, v in removed.items()]
    return {"changed": bool(added or removed or changed), "lines": lines, "added": added, "removed": removed,
            "changed_versions": changed}


def drift_report(path: Path, facts) -> dict:
    """Drift between a lock and the interpreter `envkit check` examines (its whole installed set)."""
    import os
    import sys

    from envkit.install.act.interp import probe

    lock = read(Path(path))
    exe = getattr(facts.python, "executable", None) or sys.executable
    if exe and os.path.exists(exe):
        target = probe(exe)
        installed = {k: d["version"] for k, d in target.dists.items() if not d.get("editable")}
        report = compare(lock, installed)
    else:  # a replayed snapshot: only the packages it recorded can be compared
        installed = {canon(k): v for k, v in (facts.packages or {}).items() if v}
        lock_sub = Lock(platform=lock.platform, profile=lock.profile, source=lock.source, env=lock.env,
                        packages=[p for p in lock.packages if canon(p["name"]) in {canon(k) for k in facts.packages}])
        report = compare(lock_sub, installed)
        report["partial"] = True
    diffs = platform_differences(lock.platform, platform_of(facts))
    report["platform"] = diffs
    return report


def platform_of(facts, device: str | None = None, backend: str | None = None) -> dict:
    other = list(getattr(facts, "other_gpus", None) or [])  # AMD/Intel GPUs (facts from before them have none)
    if device == "cuda" and not facts.gpus and any(g.vendor == "amd" for g in other):
        device = "rocm"  # torch calls a ROCm GPU "cuda", but a ROCm lock cannot rebuild on an NVIDIA box
    py = facts.python.version or ""
    d = {"system": facts.os.system, "os": facts.os.name, "os_version": facts.os.version, "arch": facts.python.machine,
         "python": py, "python_minor": ".".join(py.split(".")[:2]) if py else None,
         "implementation": (facts.python.implementation or "").lower() or None, "chip": facts.chip.name,
         "gpus": [g.name for g in list(facts.gpus) + other] or None, "driver": facts.gpus[0].driver if facts.gpus else None,
         "device": device, "backend": backend}
    return {k: v for k, v in d.items() if v is not None}
