"""pylock.machine.toml's shape: a PEP 751 lock of one target, the machine `envkit setup` ran on. The same
TOML as pylock.toml (toml.py writes both), with the machine, the profile, the sources and the
profile's environment in [tool.envkit] (installers other than envkit ignore tool tables):

    lock-version, environments (this platform), requires-python (this Python's X.Y), created-by
    [[packages]]                 name, version, wheels = [{url, hashes = {sha256}}],
                                 tool.envkit.cached (a nightly's file kept in envkit's cache)
    [tool.envkit]                envkit (its version), versions-only
    [tool.envkit.targets.NAME]   platform, build, device, marker, profile, torch, resolved
    [tool.envkit.platform]       system, os, os_version, arch, python, implementation, chip, gpus,
                                 driver, device, backend
    [tool.envkit.profile]        name, sha256 of its resolved values
    [tool.envkit.source]         torch request, channel, installer, index_urls ([] = pip's sources)
    [tool.envkit.env]            the profile's environment (never names holding TOKEN, KEY, ...)
    [tool.envkit.project]        name, extras: the pyproject.toml beside the lock (lock/project.py);
                                 what is installed for it is not drift

A package whose wheel the installer did not report (already in a venv envkit did not fill) is
pinned by version in `versions-only` only: PEP 751 requires a file for every [[packages]] entry, and
envkit invents no field for one without. envkit installs those from the lock's indexes; pip and uv
read the rest of the file and leave them out (the header says so).

The file is named as PEP 751 names locks (pylock.NAME.toml), so pip and uv read it as one;
pylock.toml itself is `envkit lock`'s, the project's lock of many machines. Before, it was
envkit.lock: a lock of that name is still read, and looked for after this one. No URL in the lock
holds credentials (envkit/redact.py)."""

from __future__ import annotations

import re
from pathlib import Path

from envkit.install.lock.model import wheel_filename
from envkit.install.lock.targets import platform_of_machine
from envkit.redact import redact, safe_env, strip_userinfo

NAME = "pylock.machine.toml"
OLD_NAME = "envkit.lock"
SYS_PLATFORM = {"Linux": "linux", "Darwin": "darwin", "Windows": "win32"}


def default_path(folder: Path | None = None) -> Path | None:
    """The lock of this machine in `folder` (the current one): pylock.machine.toml, else an
    envkit.lock written before the rename; None without either."""
    for name in (NAME, OLD_NAME):
        path = (folder or Path()) / name
        if path.is_file():
            return path
    return None


def header(path: Path, doc: dict) -> list[str]:
    """The comment lines above the lock: what wrote it, how it is used, and, where some packages
    have no wheel, where they are and what pip and uv make of that."""
    name = path.name
    lines = [f"{name}: written by `envkit setup`, a PEP 751 lock of this one machine. Rebuild this environment with",
             f"  envkit setup --lock {name}     (same platform only)",
             f"and check an environment against it with `envkit check --lock {name}`."]
    if name == NAME:  # pip and uv take a file for a lock by its name only (pylock.toml, pylock.NAME.toml)
        lines.append(f"pip (26.1+) and uv install it too: `pip install -r {name}`, `uv pip install -r {name}`.")
    only = ((doc.get("tool") or {}).get("envkit") or {}).get("versions-only") or []
    if only:
        lines += [f"{len(only)} package(s) have no wheel recorded (the installer reported none: already in the venv), and PEP 751",
                  "needs a file for each [[packages]] entry: they are pinned by version under [tool.envkit] versions-only only.",
                  "pip and uv leave them out (pip stops where a locked package requires one); `envkit setup --lock`",
                  f"installs them from the lock's indexes, `envkit lock --from {name}` writes a pylock.toml with their wheels."]
    return lines


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def marker(platform: dict) -> str | None:
    """The PEP 508 marker of the machine (its OS and the architecture Python reports)."""
    sys_platform, machine = SYS_PLATFORM.get(str(platform.get("system"))), platform.get("arch")
    return f"sys_platform == '{sys_platform}' and platform_machine == '{machine}'" if sys_platform and machine else None


def target_of(platform: dict) -> tuple[str, str, str]:
    """(name, platform, build) of the machine, named as `envkit lock` names its targets where it
    has the platform (linux-x86_64-cpu, macos-arm64), else system-arch-build."""
    system, arch = str(platform.get("system") or "unknown"), str(platform.get("arch") or "unknown")
    plat = platform_of_machine(system, arch) or f"{system.lower()}-{arch.lower()}"
    if plat == "macos-arm64":
        return plat, plat, "mps"
    backend = str(platform.get("backend") or "")
    build = backend if backend and backend != "pypi" else str(platform.get("device") or "cpu")
    return f"{plat}-{build}", plat, build


def _wheel_fits(name: str, version: str, url: str) -> bool:
    """A URL whose file is a wheel of this very name and version (PEP 751 checks both)."""
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
    from packaging.version import InvalidVersion, Version

    try:
        wname, wversion, _, _ = parse_wheel_filename(wheel_filename(url))
        return wname == canonicalize_name(name) and wversion == Version(version)
    except (InvalidWheelFilename, InvalidVersion):
        return False


def doc(*, platform: dict, profile: dict, source: dict, env: dict[str, str], entries: list[dict], envkit_version: str,
        project: dict | None = None) -> dict:
    """The lock as a TOML-ready dict. `entries`: {name, version, sha256, url, cached} per package,
    as the installer reported them (sha256 and url may be missing). `project`: the project beside
    the lock (lock/project.py), recorded in [tool.envkit.project]."""
    packages, versions_only = [], []
    for e in sorted(entries, key=lambda e: canon(e["name"])):
        name, version, url, sha = canon(e["name"]), str(e["version"]), strip_userinfo(e.get("url") or ""), e.get("sha256")
        if sha and url and _wheel_fits(name, version, url):
            p = {"name": name, "version": version, "wheels": [{"url": url, "hashes": {"sha256": sha}}]}
            if e.get("cached"):
                p["tool"] = {"envkit": {"cached": e["cached"]}}
            packages.append(p)
        else:  # no wheel recorded (or an sdist's hash): pip finds this version on the lock's indexes
            versions_only.append({k: v for k, v in (("name", name), ("version", version), ("sha256", sha)) if v})
    python = platform.get("python_minor")
    torch = next((p["version"] for p in packages + versions_only if p["name"] == "torch"), None)
    name, plat, build = target_of(platform)
    target = {"platform": plat, "build": build, "device": platform.get("device"), "marker": marker(platform),
              "profile": profile.get("name"), "torch": torch,
              "resolved": "recorded by envkit setup: what the installer put into the environment"}
    tool = {"envkit": envkit_version, "targets": {name: target}, "platform": redact(platform),
            "profile": redact(profile), "source": redact(source), "env": safe_env(env)}
    if versions_only:
        tool["versions-only"] = versions_only
    if project:
        tool["project"] = {"name": project["name"], "extras": list(project["extras"])}
    return {"lock-version": "1.0", "environments": [marker(platform)] if marker(platform) else None,
            "requires-python": f"=={python}.*" if python else None, "created-by": "envkit", "packages": packages,
            "tool": {"envkit": tool}}
