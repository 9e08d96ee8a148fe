"""The machines a pylock.toml is written for (`envkit lock --target T`): a platform (OS and
architecture) and a torch build (cpu, cu130, rocm6.4, xpu), with what each needs to be resolved
and selected without being that machine: PEP 508 marker environment, wheel tags, uv's
`--python-platform`, the PyTorch index page of the build.

The build tables (which CUDA builds exist, a build's minimum driver) belong to
envkit/data/torch_variants.toml and gates.toml: they are read only through `known_cuda_builds` and
`min_driver`, so that a new table needs only these two functions changed."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envkit.checks import gates
from envkit.errors import EnvkitError
from envkit.install.act.interp import computed_tags
from envkit.install.choice.model import variants_data
from envkit.install.choice.variants import choose
from envkit.facts.torch_build import TorchBuild

if TYPE_CHECKING:
    from envkit.facts.model import Channel

DEFAULT_PYTORCH_INDEX = "https://download.pytorch.org/whl"
TARGET_FIX = ("use this, macos-arm64, linux-x86_64-cpu, linux-x86_64-cuXXX (e.g. cu130), linux-x86_64-cuda (the newest "
              "CUDA build), linux-aarch64-cuXXX, linux-x86_64-rocmX.Y or linux-x86_64-xpu")

# platform -> (sys_platform, platform_system, platform_machine, uv's --python-platform)
PLATFORMS = {
    "macos-arm64": ("darwin", "Darwin", "arm64", "aarch64-apple-darwin"),
    "linux-x86_64": ("linux", "Linux", "x86_64", "x86_64-manylinux_2_28"),
    "linux-aarch64": ("linux", "Linux", "aarch64", "aarch64-manylinux_2_28"),
}
# What the lock assumes of a machine it was not made on: glibc 2.28 (torch's own manylinux floor)
# and macOS 14 (MPS in current torch); the tags and uv's platform are computed from these.
ASSUMED_GLIBC = "2.28"
ASSUMED_MACOS = "14.0"
PROFILE_OF_DEVICE = {"mps": "apple-silicon", "cuda": "cuda", "cpu": "cpu", "rocm": "conservative", "xpu": "conservative"}


@dataclass(frozen=True)
class Target:
    """One machine kind of the lock: `linux-x86_64-cu130` = platform linux-x86_64, build cu130."""

    platform: str  # a key of PLATFORMS
    build: str  # "cpu", "cu130", "rocm6.4", "xpu"; "mps" on macOS (PyPI's wheels)
    asked: str = ""  # what the user wrote ("linux-x86_64-cuda", "this")

    @property
    def name(self) -> str:
        return self.platform if self.platform == "macos-arm64" else f"{self.platform}-{self.build}"

    @property
    def device(self) -> str:
        if self.build == "mps":
            return "mps"
        kind = TorchBuild(self.build).kind
        return kind if kind in ("cuda", "rocm") else self.build  # cpu, xpu

    @property
    def local_label(self) -> str | None:
        """The local version label every torch of this build carries: none on macOS and for
        aarch64's CPU build (pytorch#110791), else the build's name (2.13.0+cpu, 2.13.0+cu130)."""
        if self.build == "mps" or (self.build == "cpu" and self.platform != "linux-x86_64"):
            return None
        return self.build

    def marker_environment(self, python: str) -> dict[str, str]:
        """PEP 508 marker values of a CPython `python` (X.Y) on this platform."""
        sys_platform, system, machine, _ = PLATFORMS[self.platform]
        full = f"{python}.0" if python.count(".") == 1 else python
        return {"implementation_name": "cpython", "implementation_version": full, "os_name": "posix",
                "platform_machine": machine, "platform_release": "", "platform_system": system, "platform_version": "",
                "python_full_version": full, "python_version": ".".join(full.split(".")[:2]),
                "platform_python_implementation": "CPython", "sys_platform": sys_platform}

    def tags(self, python: str) -> list[str]:
        _, system, machine, _ = PLATFORMS[self.platform]
        return computed_tags(python, "cpython", system, machine, glibc=ASSUMED_GLIBC, macos=ASSUMED_MACOS)

    @property
    def uv_platform(self) -> str:
        return PLATFORMS[self.platform][3]

    def platform_marker(self) -> str:
        sys_platform, _, machine, _ = PLATFORMS[self.platform]
        return f"sys_platform == '{sys_platform}' and platform_machine == '{machine}'"


def pytorch_index() -> str:
    """PyTorch's per-build index pages, or a mirror with the same layout (BASE/cpu/, BASE/cu130/,
    BASE/nightly/cu130/)."""
    return (os.environ.get("ENVKIT_PYTORCH_INDEX") or DEFAULT_PYTORCH_INDEX).rstrip("/")


def build_index(build: str, channel: Channel) -> str:
    sub = {"stable": "", "nightly": "nightly", "test": "test"}[channel]
    return "/".join(p for p in (pytorch_index(), sub, build) if p)


_TARGET = re.compile(r"(?P<platform>linux-x86_64|linux-aarch64)-(?P<build>cpu|cuda|cu\d{3,}|rocm\d+(?:\.\d+)*|xpu)")


def parse_target(text: str) -> Target:
    """A --target value (`this` is resolved by the caller, which knows the machine)."""
    t = text.strip().lower()
    if t in ("macos-arm64", "macos-arm64-mps"):
        return Target("macos-arm64", "mps", text)
    m = _TARGET.fullmatch(t)
    if not m:
        raise EnvkitError(f"--target {text!r} is not a target envkit knows", where="--target", fix=TARGET_FIX)
    if m["platform"] == "linux-aarch64" and TorchBuild(m["build"]).kind in ("rocm", "xpu"):
        raise EnvkitError(f"--target {text!r}: PyTorch publishes {m['build']} builds for Linux x86_64 only",
                          where="--target", fix=TARGET_FIX)
    return Target(m["platform"], m["build"], text)


def platform_of_machine(system: str, machine: str) -> str | None:
    """The lock platform of a machine (facts' OS and Python architecture), None when the lock
    format has none (Windows, Intel Macs)."""
    machine = {"amd64": "x86_64", "arm64": "aarch64" if system == "Linux" else "arm64"}.get(machine.lower(), machine.lower())
    key = {"Darwin": "macos", "Linux": "linux"}.get(system, "")
    name = f"{key}-{machine}"
    return name if name in PLATFORMS else None


def this_target(facts, request) -> Target:
    """`--target this`: the build `envkit setup` would install here (variants.choose)."""
    platform = platform_of_machine(facts.os.system or "", facts.python.machine or "")
    if platform is None:
        raise EnvkitError(f"--target this: a lock for {facts.os.system} {facts.python.machine} is not supported",
                          where="--target", fix="name the targets: " + TARGET_FIX)
    if platform == "macos-arm64":
        return Target(platform, "mps", "this")
    choice = choose(facts, request)
    return Target(platform, choice.backend if choice.backend != "pypi" else "cpu", "this")


# ---- the build tables, behind two functions (envkit/data/torch_variants.toml, gates.toml) --------

def known_cuda_builds() -> list[str]:
    """Every CUDA build the table knows of, oldest first: `linux-x86_64-cuda` tries them newest
    first on the index."""
    data = variants_data()
    names = {b for row in data.get("release", []) for b in row.get("cuda", [])} | set(data.get("nightly", {}).get("cuda", []))
    return sorted(names, key=lambda b: int(b[2:]))


def min_driver(build: str) -> str | None:
    """The oldest NVIDIA Linux driver that runs a CUDA build (None for other builds)."""
    cuda = TorchBuild(build).cuda
    return gates.min_driver_for_cuda(cuda) if cuda else None
