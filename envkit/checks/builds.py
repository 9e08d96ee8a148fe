"""Which torch builds exist and which GPUs each one runs on: questions about
envkit/data/torch_variants.toml (no rule lives here). `envkit setup` chooses from these answers
(install/choice/variants.py); `envkit doctor` judges an installed build by them (checks/gpus.py, checks/system.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from envkit.checks.gates import min_driver_for_cuda, older_than
from envkit.resources import data_file, load_toml
from envkit.facts.torch_build import TorchBuild

if TYPE_CHECKING:
    from envkit.facts.model import Channel


@lru_cache(maxsize=1)
def table() -> dict:
    return load_toml(data_file("torch_variants.toml"))


@dataclass(frozen=True)
class Build:
    """One CUDA build of one release line (or of today's nightlies)."""

    backend: TorchBuild  # cu126
    sm: tuple[str, ...]  # compute capabilities it holds kernels for: ("5.0", "6.0", ...)
    ptx: str | None  # PTX it carries for JIT on newer GPUs ("12.0"), or None
    source: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend", TorchBuild(self.backend))  # the table's text becomes the value type here

    @property
    def cuda(self) -> str | None:
        return self.backend.cuda

    def arch_text(self) -> str:
        return ", ".join(f"sm_{c.replace('.', '')}" for c in self.sm) + (f" (+PTX {self.ptx})" if self.ptx else "")



def _v(text) -> Version | None:
    try:
        return Version(str(text))
    except (InvalidVersion, TypeError):
        return None


def releases() -> list[dict]:
    return list(table()["release"])


def release_row(version: Version | str | None) -> tuple[dict, bool]:
    """The row of a release line, and whether it was assumed (a release newer than the table, or
    no version named: the newest row)."""
    v = _v(version) if not isinstance(version, Version) else version
    rows = releases()
    if v is not None:
        for row in rows:
            rv = Version(row["torch"])  # the table's: it parses
            if (rv.major, rv.minor) == (v.major, v.minor):
                return row, False
        first = Version(rows[0]["torch"])
        if (v.major, v.minor) < (first.major, first.minor):
            return rows[0], True
    return rows[-1], v is not None


def nightly_row() -> dict:
    return dict(table()["nightly"])


def cuda_builds(row: dict) -> list[Build]:
    """The CUDA builds of a release row (or the nightly row), oldest CUDA first."""
    sets = table()["arch_sets"]
    out = []
    for backend, set_name in row.get("cuda", {}).items():
        s = sets[set_name]
        out.append(Build(backend=TorchBuild(backend), sm=tuple(s["sm"]), ptx=s.get("ptx"), source=s["source"]))
    return sorted(out, key=lambda b: _v(b.cuda) or Version("0"))


def build_of(torch_version: str | None, local: str | None) -> Build | None:
    """The build an installed torch is (`2.8.0+cu128` -> the cu128 build of 2.8), or None when the
    table does not know it (a release newer than the table is not guessed at: doctor judges it by
    the runtime's own arch list, or by the capability gates)."""
    v = _v(torch_version)
    if v is None or not local:
        return None
    if v.is_devrelease:
        row = nightly_row()
    else:
        row, assumed = release_row(Version(v.public))
        if assumed:
            return None
    return next((b for b in cuda_builds(row) if b.backend == local), None)


def runs_on(build: Build, capability: str | None) -> bool | None:
    """Whether a build holds kernels this GPU can run; None when the capability is unknown."""
    return arch_list_runs(list(build.sm), list(build.ptx and [build.ptx] or []), capability)


def arch_list_runs(sm: list[str], ptx: list[str], capability: str | None) -> bool | None:
    """Cubins run on the same major at an equal or higher minor (sm_60 code on an sm_61 card);
    PTX is JIT-compiled for any newer GPU."""
    cc = _cap(capability)
    if cc is None:
        return None
    for c in sm:
        k = _cap(c)
        if k and k[0] == cc[0] and k[1] <= cc[1]:
            return True
    return any((_cap(p) or (99, 0)) <= cc for p in ptx)


def parse_arch_list(arch_list: list[str]) -> tuple[list[str], list[str]]:
    """torch.cuda.get_arch_list() (['sm_70', 'sm_90a', 'compute_120']) -> (["7.0"], ["12.0"]).
    Arch-specific cubins (sm_90a) run only on their own GPU and count as that exact capability."""
    sm, ptx = [], []
    for a in arch_list or []:
        m = re.fullmatch(r"(sm|compute)_(\d+?)(\d)([af]?)", str(a))
        if not m:
            continue
        cap = f"{m.group(2)}.{m.group(3)}"
        (sm if m.group(1) == "sm" else ptx).append(cap)
    return sm, ptx


def _cap(text: str | None) -> tuple[int, int] | None:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(text or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def sm_name(capability: str | None) -> str:
    return "sm_" + str(capability or "?").replace(".", "")


def python_floor(torch_version: Version | str | None) -> tuple[str, str]:
    """The oldest Python a torch release has wheels for, and the source; the newest row's floor
    when no version is named."""
    row, _ = release_row(torch_version)
    return row["python"], f"torch {row['torch']}: RELEASE.md 'Release Compatibility Matrix' (checked {table()['checked']})"


def has_xpu(row: dict) -> bool:
    return bool(row.get("xpu"))


def newest_fit(capability: str | None, driver: str | None) -> tuple[str, str] | None:
    """(release, backend) of the newest build that holds kernels for this GPU and runs on this
    driver, e.g. ("2.14", "cu126") for a Pascal card on driver 580."""
    for row in reversed(releases()):
        for b in reversed(cuda_builds(row)):
            need = min_driver_for_cuda(b.cuda)
            if need and older_than(driver, need):
                continue
            if runs_on(b, capability) is not False:
                return row["torch"], b.backend
    return None


def available(torch_version: str | None, channel: Channel = "stable") -> list[dict]:
    """The one question other modules ask: for a release ("2.13", "2.13.0") or today's nightlies,
    which CUDA builds exist, the driver each needs, the architectures each holds, oldest CUDA first:
    [{"backend": "cu126", "cuda": "12.6", "min_driver": "525.60.13", "sm": [...], "ptx": None,
    "assumed": False, "source": ...}]. `assumed`: a release newer than the table (its newest row's builds)."""
    if channel == "nightly":
        row, assumed = nightly_row(), False
    else:
        row, assumed = release_row(torch_version)
    return [{"backend": b.backend, "cuda": b.cuda, "min_driver": min_driver_for_cuda(b.cuda), "sm": list(b.sm),
             "ptx": b.ptx, "assumed": assumed, "source": b.source} for b in cuda_builds(row)]
