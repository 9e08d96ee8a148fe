"""Read the version-gate data file and answer questions about it. No rule lives here."""

from __future__ import annotations

from functools import lru_cache

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from envkit.resources import data_file, load_toml


@lru_cache(maxsize=1)
def gates() -> dict:
    return load_toml(data_file("gates.toml"))


def V(text: str | None) -> Version | None:
    if text is None:
        return None
    try:
        return Version(str(text))
    except InvalidVersion:
        return None


def known(text: str) -> Version:
    """A version from envkit's own tables (gates.toml, builds.toml), which always parses (an
    InvalidVersion here is a broken table); V is for what a machine reports, which may not."""
    return Version(str(text))


def older_than(version: str | None, floor: str) -> bool:
    """Whether `version` (a machine's: a driver, a macOS) is older than `floor` (a table's); False
    when it is missing or does not parse."""
    v = V(version)
    return v is not None and v < known(floor)


def macos_floor_for_mps(torch_version: str | None) -> tuple[Version, str]:
    """The lowest macOS on which this torch's MPS works, and the rule's source."""
    g = gates()["mps"]
    floor, source = known(g["min_macos"]), g["source"]
    tv = V(torch_version)
    if tv is None:
        return floor, source
    for rule in g.get("macos_floor", []):
        if SpecifierSet(rule["torch"], prereleases=True).contains(tv, prereleases=True) and known(rule["macos"]) > floor:
            floor, source = known(rule["macos"]), rule["source"]
    return floor, source


def newest_torch_spec_for_macos(macos: Version) -> str | None:
    """A specifier for torch whose MPS still works on this macOS, e.g. "<2.9" on macOS 13."""
    g = gates()["mps"]
    if macos < known(g["min_macos"]):
        return None  # no torch has MPS on this macOS
    limits = []
    for rule in g.get("macos_floor", []):
        if known(rule["macos"]) > macos:
            lower = str(rule["torch"]).lstrip(">=").split(",")[0].strip()
            limits.append(V(lower))
    if not limits:
        return None
    low = min(v for v in limits if v is not None)
    return f"<{low.major}.{low.minor}"


def min_driver_for_cuda(cuda: str | None) -> str | None:
    cv = V(cuda)
    if cv is None:
        return None
    for rule in gates()["cuda"]["driver"]:
        if SpecifierSet(rule["cuda"]).contains(cv):
            return rule["linux_driver"]
    return None


def capability_problem(capability: str | None, cuda: str | None) -> str | None:
    """Why a CUDA build cannot run on a GPU of this compute capability, or None."""
    cc, cv = V(capability), V(cuda)
    if cc is None or cv is None:
        return None
    for rule in gates()["cuda"]["capability"]:
        if "min_capability" in rule and cc >= known(rule["min_capability"]) and cv < known(rule["min_cuda"]):
            return f"{rule['rule']} ({rule['source']})"
        if "max_capability_below" in rule and cc < known(rule["max_capability_below"]) and cv > known(rule["max_cuda"]):
            return f"{rule['rule']} ({rule['source']})"
    return None


def paired_versions(torch_version: str | None) -> dict[str, str] | None:
    """{"torchvision": "0.28", "torchaudio": "2.11"} (major.minor) for a torch version."""
    tv = V(torch_version)
    if tv is None:
        return None
    key = f"{tv.major}.{tv.minor}"
    pairing = gates()["pairing"]
    for row in pairing["known"]:
        if row["torch"] == key:
            return {"torchvision": row["torchvision"], "torchaudio": row["torchaudio"]}
    if tv.major == 2:  # a release newer than the table: torchvision's lock-step rule still holds
        last = known(pairing["torchaudio_last"])
        audio = pairing["torchaudio_last"] if (tv.major, tv.minor) >= (last.major, last.minor) else key
        return {"torchvision": f"0.{tv.minor + pairing['torchvision_minor_offset']}", "torchaudio": audio}
    return None


def torchaudio_last() -> tuple[str, str]:
    """torchaudio's last release line ("2.11") and the source."""
    p = gates()["pairing"]
    return p["torchaudio_last"], p["torchaudio_source"]
