"""The plan: what `envkit setup` will do, computed from facts and the request without touching
anything (pure). Shown to the user before acting; `--json` prints `InstallPlan.to_dict()`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from envkit.install.act.execute import which_uv
from envkit.install.choice.model import Choice, Request
from envkit.install.index.pages import wheel_folder

if TYPE_CHECKING:
    from envkit.facts.model import Channel

PLANNED = ("torch", "torchvision", "torchaudio")
Installer = Literal["pip", "uv"]  # what installs into the venv (setup --installer, auto decided)


@dataclass
class InstallPlan:
    machine: str
    profile: str
    request: str
    choice: Choice
    venv: str
    python: str  # the venv's interpreter
    base_python: str  # what creates the venv
    create_venv: bool
    installer: Installer
    versions: dict[str, str] | None  # exact versions to install; None when unresolved (replay without an index)
    index_url: str | None  # None: pip's configured sources
    sources: list[str] = field(default_factory=list)
    installed: dict[str, str | None] = field(default_factory=dict)
    changes: list[dict] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wanted: list[str] = field(default_factory=lambda: ["torch"])
    pip_sources: list[str] = field(default_factory=list)  # index_url None: every source pip is configured with

    @property
    def nothing_to_do(self) -> bool:
        return self.versions is not None and not self.create_venv and not self.changes

    def to_dict(self) -> dict:
        return {
            "machine": self.machine, "profile": self.profile, "request": self.request,
            "device": self.choice.device, "backend": self.choice.backend, "channel": self.choice.channel,
            "index_url": self.index_url, "index_why": self.choice.index_why if self.index_url == self.choice.index_url else
            ("pip's configured sources" if self.index_url is None else self.choice.index_why),
            "sources": self.sources, "pip_sources": self.pip_sources or self.sources,
            "limit": str(self.choice.limit) or None, "limit_why": self.choice.limit_why,
            "required_local_label": self.choice.local,
            "resolved": self.versions is not None, "versions": self.versions,
            "spec": None if self.versions is not None else self.unresolved_spec(),
            "venv": self.venv, "python": self.python, "create_venv": self.create_venv, "installer": self.installer,
            "installed": self.installed, "changes": self.changes, "nothing_to_do": self.nothing_to_do,
            "commands": [" ".join(c) for c in self.commands], "notes": self.notes + self.choice.notes,
        }

    def unresolved_spec(self) -> str:
        spec = {"stable": "newest stable", "nightly": "newest nightly (X.Y.Z.devYYYYMMDD)",
                "test": "newest release candidate"}.get(
            self.request, f"torch{self.request}" if self.request[:1] in "<>=!~" else f"torch=={self.request}")
        if str(self.choice.limit):
            spec += f", limited to {self.choice.limit}"
        if self.choice.local:
            spec += f", +{self.choice.local} builds only"
        return spec


# BYTECODE: the installers write no bytecode for the 5,200 modules of torch and its dependencies (pip's
# byte-compiling took 18 of the 27 s of `pip install torch` on a 2-core box); the verification that
# follows every install imports torch and writes it for the 800 modules that import loads, and
# where the machine compiles by default (CUDA) for torch.compile's too (execute.verify). A module
# imported later (torch.distributed, onnx, ...) is compiled once, at its first import.


def requirements(versions: dict[str, str], wheels: dict[str, str] | None = None) -> list[str]:
    """`torch==2.13.0+cpu` pins (the full version with its local label, so that no other build can
    win), or the cached wheel file for a nightly."""
    wheels = wheels or {}
    return [wheels.get(name) or f"{name}=={version}" for name, version in versions.items()]


def index_args(index_url: str | None) -> list[str]:
    """How an installer is pointed at the index, the same for pip and uv: a URL as `--index-url`
    (never `--extra-index-url`: another index's torch could win); a plain folder of wheels as
    `--no-index --find-links DIR` (both reject a folder as `--index-url`); a simple index on disk
    as its file:// URL."""
    if not index_url:
        return []
    from pathlib import Path

    folder = wheel_folder(index_url)
    if folder:
        return ["--no-index", "--find-links", folder]
    if "://" not in index_url:
        return ["--index-url", Path(index_url).resolve().as_uri()]
    return ["--index-url", index_url]


def install_command(installer: Installer, python: str, versions: dict[str, str], index_url: str | None, channel: Channel,
                    report: str | None = None, wheels: dict[str, str] | None = None) -> list[str]:
    reqs = requirements(versions, wheels)
    if installer == "uv":
        # uv has no --report (the lock takes the hashes from the index entries the resolver pinned)
        # and no --pre: `--prerelease allow` admits nightlies and release candidates. No bytecode, as
        # with pip below (BYTECODE).
        cmd = [_uv(), "pip", "install", "--python", python] + index_args(index_url)
        if channel != "stable":
            cmd += ["--prerelease", "allow"]
        return cmd + reqs
    cmd = [python, "-m", "pip", "install", "--no-compile"]  # BYTECODE
    if report:
        cmd += ["--report", report]
    cmd += index_args(index_url)
    if channel != "stable":
        cmd += ["--pre"]
    return cmd + reqs


def _uv() -> str:
    return which_uv() or "uv"


def venv_command(installer: Installer, base_python: str, venv: str) -> list[str]:
    """`python -m venv` for both installers: it seeds pip from the interpreter's own ensurepip,
    offline, whereas `uv venv --seed` downloads pip from PyPI (no mirror, no offline), and the venv
    needs pip for `envkit setup --lock` and for the user."""
    return [base_python, "-m", "venv", venv]


def make_plan(*, machine: str, profile: str, request: Request, choice: Choice, venv: str, python: str,
              base_python: str, create_venv: bool, installer: Installer, versions: dict[str, str] | None,
              index_url: str | None, sources: list[str], installed: dict[str, str], notes: list[str],
              wanted: list[str], report: str | None = None, pip_sources: list[str] | tuple[str, ...] = ()) -> InstallPlan:
    plan = InstallPlan(machine=machine, profile=profile, request=request.text, choice=choice, venv=venv, python=python,
                base_python=base_python, create_venv=create_venv, installer=installer, versions=versions,
                index_url=index_url, sources=sources, notes=list(notes), wanted=wanted, pip_sources=list(pip_sources))
    plan.installed = {n: installed.get(n) for n in wanted}
    if versions is not None:
        plan.changes = [{"name": n, "from": installed.get(n), "to": v} for n, v in versions.items() if installed.get(n) != v]
    if create_venv:
        plan.commands.append(venv_command(installer, base_python, venv))
    if versions is None or plan.changes or create_venv:
        shown = versions or {n: "<resolved at install>" for n in wanted}
        plan.commands.append(install_command(installer, python, shown, index_url, choice.channel, report))
    return plan
