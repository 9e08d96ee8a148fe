"""What was asked for (--torch: a Request) and what was chosen for it (a Choice: the build, its
index, the versions the gates allow), and where each PyTorch build lives. Pure, from the tables:
envkit/data/torch_variants.toml for the builds, envkit/data/gates.toml for the limits."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envkit.checks import builds
from envkit.errors import EnvkitError
from envkit.facts.torch_build import TorchBuild

if TYPE_CHECKING:
    from envkit.facts.model import Channel, TorchDevice


def variants_data() -> dict:
    return builds.table()


@dataclass(frozen=True)
class Request:
    """What the user asked for with --torch."""

    text: str
    kind: Channel | Literal["spec"]  # a channel, or a version specifier (`spec`)
    spec: SpecifierSet | None = None

    @property
    def channel(self) -> Channel:
        if self.kind in ("nightly", "test"):
            return self.kind
        if self.spec is not None:
            for s in self.spec:
                v = Version(s.version.rstrip(".*")) if s.version.rstrip(".*") else None
                if v is not None and v.is_devrelease:
                    return "nightly"
                if v is not None and v.is_prerelease:
                    return "test"
        return "stable"

    @property
    def prereleases(self) -> bool:
        return self.kind in ("nightly", "test") or bool(self.spec is not None and self.spec.prereleases)

    def admits(self, version: Version) -> bool:
        public = Version(version.public)
        if self.kind == "stable":
            return not public.is_prerelease
        if self.kind == "nightly":
            return public.is_devrelease
        if self.kind == "test":
            return public.is_prerelease and not public.is_devrelease
        assert self.spec is not None  # kind "spec" is a request that holds one
        return self.spec.contains(public, prereleases=self.prereleases)


def parse_request(text: str | None) -> Request:
    t = (text or "stable").strip()
    low = t.lower()
    if low in ("stable", "latest", "release"):
        return Request(t, "stable")
    if low == "nightly":
        return Request(t, "nightly")
    if low in ("test", "rc"):
        return Request(t, "test")
    spec_text = t
    if re.fullmatch(r"\d+(\.\d+)*([a-z0-9.+]*)", low):
        try:
            v = Version(t)
        except InvalidVersion:
            v = None
        if v is not None:
            spec_text = f"=={t}.*" if len(v.release) == 2 and not v.pre and not v.dev and not v.local else f"=={t}"
    try:
        spec = SpecifierSet(spec_text)
        if not str(spec):
            raise InvalidSpecifier(t)
    except InvalidSpecifier:
        raise EnvkitError(f"--torch {t!r} is not a version, a specifier or a channel",
                          fix="use stable, nightly, test, a version like 2.5.1, or a specifier like '>=2.5,<2.7'")
    return Request(t, "spec", spec)


@dataclass
class Choice:
    """Where torch comes from for this machine and request."""

    device: TorchDevice
    backend: TorchBuild  # cpu, cu128, or pypi (macOS wheels with MPS)
    channel: Channel
    index_url: str
    index_why: str
    limit: SpecifierSet = field(default_factory=SpecifierSet)  # what the gates allow
    limit_why: list[str] = field(default_factory=list)
    local: str | None = None  # the local label every torch must carry ("cpu" on Linux x86_64 without GPU)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.backend = TorchBuild(self.backend)  # the table's text becomes the value type here

    def to_dict(self) -> dict:
        return {"device": self.device, "backend": self.backend, "channel": self.channel, "index_url": self.index_url,
                "index_why": self.index_why, "limit": str(self.limit) or None, "limit_why": self.limit_why,
                "required_local_label": self.local, "notes": self.notes}


def index_for(backend: str, channel: Channel) -> str:
    """PyTorch's index of one build: BASE/cu126, BASE/nightly/cu130. BASE is ENVKIT_PYTORCH_INDEX
    when set (a mirror laid out like download.pytorch.org/whl), else the table's."""
    import os

    d = variants_data()["index"]
    if backend == "pypi":
        return d["pypi"]
    sub = d[channel]
    base = os.environ.get("ENVKIT_PYTORCH_INDEX", "").rstrip("/") or d["base"]
    return "/".join(p for p in (base, sub, backend) if p)



def spec_pins_minor(request: Request) -> Version | None:
    """The release line a pinned request names ("2.5.1", "2.9"): None for ranges and channels."""
    if request.spec is None:
        return None
    for s in request.spec:
        if s.operator in ("==", "==="):
            try:
                return Version(s.version.rstrip(".*"))
            except InvalidVersion:
                return None
    return None
