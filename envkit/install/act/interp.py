"""The Interpreter envkit installs into (the venv being set up, not envkit's own): its wheel tags
and its installed distributions, read by a stdlib-only script run inside it. (A lock's machine
kinds are lock/targets.py's Target: a platform and a build, not an interpreter.)"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from typing import Literal

from envkit.errors import EnvkitError

# Runs inside the interpreter installed into; it may have neither packaging nor pip.
_PROBE = r"""
import json, os, platform, sys, sysconfig
out = {"version": platform.python_version(), "implementation": sys.implementation.name,
       "machine": platform.machine(), "platform": sysconfig.get_platform(), "executable": sys.executable,
       "prefix": sys.prefix, "in_venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
       "mac_ver": platform.mac_ver()[0] or None, "glibc": None, "tags": None, "tags_from": None}
try:
    out["glibc"] = os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
except Exception:
    pass
tags = None
try:
    from packaging import tags
    out["tags_from"] = "packaging"
except Exception:
    try:
        from pip._vendor.packaging import tags
        out["tags_from"] = "pip"
    except Exception:
        tags = None
if tags is not None:
    try:
        out["tags"] = [str(t) for t in tags.sys_tags()]
    except Exception:
        out["tags"] = None
dists = {}
if "--dists" in sys.argv:
    from importlib import metadata
    for d in metadata.distributions():
        name = d.metadata["Name"]
        if not name:
            continue
        key = name.lower().replace("_", "-").replace(".", "-")
        path = getattr(d, "_path", None)
        editable = False
        try:
            du = d.read_text("direct_url.json")
            editable = bool(du and json.loads(du).get("dir_info", {}).get("editable"))
        except Exception:
            pass
        if key not in dists:
            dists[key] = {"name": name, "version": d.version, "path": str(path) if path else None, "editable": editable,
                          "requires": list(d.requires or [])}
    out["dists"] = dists
    impl = sys.implementation
    iver = "{0.major}.{0.minor}.{0.micro}".format(impl.version)
    if impl.version.releaselevel != "final":
        iver += impl.version.releaselevel[0] + str(impl.version.serial)
    out["markers"] = {"implementation_name": impl.name, "implementation_version": iver, "os_name": os.name,
                      "platform_machine": platform.machine(), "platform_release": platform.release(),
                      "platform_system": platform.system(), "platform_version": platform.version(),
                      "python_full_version": platform.python_version(),
                      "platform_python_implementation": platform.python_implementation(),
                      "python_version": ".".join(platform.python_version_tuple()[:2]), "sys_platform": sys.platform}
print("ENVKIT_PROBE " + json.dumps(out))
"""

BOOTSTRAP = frozenset({"pip", "setuptools", "wheel", "distribute"})


TagsFrom = Literal["packaging", "pip", "computed"]  # where an interpreter's tags came from: its packaging, its pip, or computed here


@dataclass
class Interpreter:
    """What envkit knows about the interpreter it installs into."""

    python: str
    version: str  # "3.11.9"
    implementation: str = "cpython"
    machine: str = ""
    platform: str = ""
    tags: list[str] = field(default_factory=list)
    tags_from: TagsFrom | Literal[""] = ""
    dists: dict[str, dict] = field(default_factory=dict)  # canonical name -> {name, version, path, editable, requires}
    markers: dict[str, str] = field(default_factory=dict)  # PEP 508 marker environment (with --dists)
    in_venv: bool = False
    prefix: str = ""

    @property
    def installed(self) -> dict[str, str]:
        return {k: v["version"] for k, v in self.dists.items()}

    @property
    def tag_set(self) -> frozenset:
        return frozenset(self.tags)


def probe(python: str, *, dists: bool = True, timeout: float = 60) -> Interpreter:
    argv = [python, "-I", "-c", _PROBE] + (["--dists"] if dists else [])
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise EnvkitError(f"the Python interpreter {python} does not exist", fix="pass --python with a working interpreter")
    except subprocess.TimeoutExpired:
        raise EnvkitError(f"the Python interpreter {python} did not answer within {timeout:g} s")
    except OSError as exc:
        raise EnvkitError(f"cannot run the Python interpreter {python}: {exc.strerror}")
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ENVKIT_PROBE ")), None)
    if proc.returncode != 0 or line is None:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvkitError(f"cannot examine the Python interpreter {python}: {last}")
    data = json.loads(line[len("ENVKIT_PROBE "):])
    t = Interpreter(python=python, version=data["version"], implementation=data["implementation"], machine=data["machine"],
               platform=data["platform"], dists=data.get("dists") or {}, in_venv=bool(data.get("in_venv")),
               prefix=data.get("prefix") or "", markers=data.get("markers") or {})
    if data.get("tags"):
        said = data["tags_from"]
        t.tags, t.tags_from = data["tags"], said if said in ("packaging", "pip") else ""  # none other the probe says
    else:  # a venv without pip or packaging: compute the tags here from the values it reported
        t.tags, t.tags_from = computed_tags(t.version, t.implementation, system_of(t.platform), t.machine,
                                           glibc=data.get("glibc"), macos=data.get("mac_ver")), "computed"
    return t


def system_of(sysconfig_platform: str) -> str:
    p = sysconfig_platform.lower()
    return "Darwin" if p.startswith("macosx") else "Windows" if p.startswith("win") else "Linux"


def computed_tags(version: str, implementation: str, system: str, machine: str, *, glibc: str | None = None,
                  macos: str | None = None) -> list[str]:
    """Wheel tags of an interpreter we cannot run packaging in (or a replayed machine), in
    priority order, from its version, OS and architecture. Linux without a known glibc assumes 2.28
    (manylinux_2_28, what current torch wheels need); macOS without a version assumes 11.0."""
    from packaging import tags

    major, minor = (int(x) for x in version.split(".")[:2])
    if system == "Darwin":
        arch = "arm64" if machine in ("arm64", "aarch64") else "x86_64"
        parts = [int(x) for x in (macos or "11.0").split(".")[:2]] + [0]
        mv = (parts[0], parts[1]) if parts[0] < 11 else (parts[0], 0)
        platforms = list(tags.mac_platforms(mv, arch))
    elif system == "Windows":
        platforms = ["win_amd64" if machine.lower() in ("amd64", "x86_64") else "win_arm64"]
    else:
        arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)
        g = [int(x) for x in (glibc or "2.28").split(".")[:2]]
        platforms = [f"manylinux_2_{m}_{arch}" for m in range(g[1], 4, -1)]
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        platforms = [p for m in range(g[1], 4, -1) for p in ([f"manylinux_2_{m}_{arch}"] + ([f"{legacy[m]}_{arch}"] if m in legacy else []))]
        platforms.append(f"linux_{arch}")
    if implementation.lower() in ("cpython", "cp"):
        interp = f"cp{major}{minor}"
        out = list(tags.cpython_tags((major, minor), [interp], platforms)) + list(tags.compatible_tags((major, minor), interp, platforms))
    else:
        out = list(tags.generic_tags(None, None, platforms)) + list(tags.compatible_tags((major, minor), None, platforms))
    return [str(t) for t in out]
