"""Resolve a request to exact wheels by reading the index (index/pages.py): pick the newest stable,
nightly, release candidate or specifier match among the wheels whose tags fit the target."""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.version import Version

from envkit.checks import gates
from envkit.errors import EnvkitError
from envkit.install.index import pages, sources
from envkit.install.choice.model import Choice, Request, parse_request
from envkit.facts.torch_build import TorchBuild


class NoMatchingTorch(EnvkitError):
    """The index answered, and holds no torch for this request (not: the index is unreachable)."""


@dataclass
class Resolved:
    torch: pages.Candidate
    companions: dict[str, pages.Candidate] = field(default_factory=dict)
    extras: dict[str, pages.Candidate] = field(default_factory=dict)  # numpy: not paired, newest that fits
    index_url: str | None = None  # None: pip's configured sources (the offline fallback)
    sources: list[str] = field(default_factory=list)  # those that hold the torch picked
    notes: list[str] = field(default_factory=list)
    configured: list[str] = field(default_factory=list)  # pip's configured sources, all of them: pip installs from each

    def versions(self) -> dict[str, str]:
        out = {"torch": str(self.torch.version)}
        out.update({n: str(c.version) for n, c in self.companions.items()})
        out.update({n: str(c.version) for n, c in self.extras.items()})
        return out


def select(cands: list[pages.Candidate], request: Request, choice: Choice, tags: frozenset,
           python_version: str) -> pages.Candidate | None:
    """The newest torch wheel the request, the gates and the target's tags allow. Pure."""
    ok = [c for c in cands if not c.yanked and c.fits(tags, python_version) and request.admits(c.version)
          and (choice.local is None or c.version.local == choice.local)
          and _build_label_fits(c.version.local, choice)
          and (not str(choice.limit) or choice.limit.contains(Version(c.version.public), prereleases=True))]
    return max(ok, key=lambda c: (c.version, _tag_rank(c, tags)), default=None)


def _build_label_fits(local: str | None, choice: Choice) -> bool:
    """On a CUDA machine a wheel labelled for another CUDA build (+cu132 where cu126 was chosen, on
    a mirror holding several) is not the build the driver and GPU were judged for."""
    if choice.device != "cuda" or not local or TorchBuild(local).kind != "cuda":
        return True
    return local == choice.backend


def select_companion(cands: list[pages.Candidate], name: str, torch: pages.Candidate, tags: frozenset,
                     python_version: str) -> pages.Candidate | None:
    """torchvision/torchaudio released with this torch: same major.minor pairing, same channel, same local label."""
    pair = (gates.paired_versions(str(torch.version)) or {}).get(name)
    tv = torch.version
    ok = []
    for c in cands:
        if c.yanked or not c.fits(tags, python_version) or c.version.local != tv.local:
            continue
        if pair and f"{c.version.major}.{c.version.minor}" != pair:
            continue
        if name == "torchaudio" and pair == gates.torchaudio_last()[0] and not c.version.is_prerelease:
            pass  # its last release pairs with every later torch, nightlies included (gates.toml)
        elif tv.is_devrelease != c.version.is_devrelease or (not tv.is_prerelease and c.version.is_prerelease):
            continue
        ok.append(c)
    return max(ok, key=lambda c: (c.version, _tag_rank(c, tags)), default=None)


def select_extra(cands: list[pages.Candidate], tags: frozenset, python_version: str) -> pages.Candidate | None:
    """A package installed beside torch but not released with it (numpy): the newest final release
    whose wheel fits the target. Pure."""
    ok = [c for c in cands if not c.yanked and not c.version.is_prerelease and c.version.local is None
          and c.fits(tags, python_version)]
    return max(ok, key=lambda c: (c.version, _tag_rank(c, tags)), default=None)


def _add_extras(res: Resolved, extras: list[str], sources: list[str], tags: frozenset, python_version: str) -> None:
    """An extra the sources lack is left out with a note: torch works without numpy, and the
    user can add it later with pip."""
    for name in extras:
        cands = []
        for src in sources:
            try:
                cands.extend(pages.fetch(src, name))
            except EnvkitError:
                pass
        pick = select_extra(cands, tags, python_version)
        if pick is None:
            res.notes.append(f"{name} is not installed: {', '.join(sources)} has no {name} wheel for this Python "
                             f"(torch works without it; `pip install {name}` adds it later)")
        else:
            res.extras[name] = pick


def _tag_rank(c: pages.Candidate, tags: frozenset) -> int:
    return len(c.tags & tags)


def _have(cands, request: Request, choice: Choice, tags: frozenset, python_version: str) -> list[str] | str:
    """What the sources hold that fits this machine (its tags and Python, the build's label), of
    the request's channel where there is any: the versions worth naming in the error."""
    if not cands:
        return "none of them has any torch wheel"
    fitting = [c for c in cands if not c.yanked and c.fits(tags, python_version)
               and (choice.local is None or c.version.local == choice.local) and _build_label_fits(c.version.local, choice)]
    if not fitting:
        return (f"none of their {len(cands)} torch wheels fits this machine (Python {python_version}"
                + (f", a +{choice.local} build" if choice.local else "") + ")")
    same_channel = [c for c in fitting if parse_request(request.channel).admits(c.version)] or fitting
    return sorted({str(c.version) for c in same_channel}, key=Version)


def resolve(choice: Choice, request: Request, tags: frozenset, python_version: str, companions: list[str],
            *, explicit_index: bool, pip_python: str, extras: list[str] | tuple[str, ...] = ()) -> Resolved:
    """Read the index (index/sources.py says the order). When PyTorch's index cannot be reached
    (offline, firewalled) and the user named no index, a stable/pinned request falls back to pip's
    own configured sources (find-links, mirrors, PyPI) with the same rules: on a CPU-only Linux box
    only a `+cpu` torch. A version on none of them says so, with the versions they have."""
    try:
        cands = pages.fetch(choice.index_url, "torch")
    except EnvkitError as exc:
        if explicit_index or choice.channel != "stable":
            raise
        return _fallback(choice, request, tags, python_version, companions, pip_python, exc, list(extras))
    pick = select(cands, request, choice, tags, python_version)
    if pick is None:
        raise sources.not_found(f"torch {_want(request, choice)}", [choice.index_url], {},
                                _have(cands, request, choice, tags, python_version), fix=NOT_FOUND_FIX, error=NoMatchingTorch)
    res = Resolved(torch=pick, index_url=choice.index_url, sources=[choice.index_url])
    for name in companions:
        comp = select_companion(pages.fetch(choice.index_url, name), name, pick, tags, python_version)
        if comp is None:
            raise EnvkitError(f"the index {choice.index_url} has no {name} released with torch {pick.version} for this Python",
                              fix=f"drop {name} from --with, or ask for another --torch")
        res.companions[name] = comp
    _add_extras(res, list(extras), [choice.index_url], tags, python_version)
    return res


NOT_FOUND_FIX = "ask for one of those with --torch, or point --index-url at an index that has it"


def _want(request: Request, choice: Choice) -> str:
    bits = [request.text]
    if str(choice.limit):
        bits.append(str(choice.limit))
    text = " ".join(bits)
    return text + (f" (a +{choice.local} build)" if choice.local else "")


def _fallback(choice, request, tags, python_version, companions, pip_python, err: EnvkitError,
              extras: list[str]) -> Resolved:
    """PyTorch's index cannot be reached: pip's configured sources, a group at a time (the ones on
    this disk first). Found: one note says so. Not on any that answered: that, with what they have.
    None answered: offline, and both are named."""
    why = sources.reason(err)
    tried, unreachable, everything = [choice.index_url], {choice.index_url: why}, []
    groups = sources.pip_groups(pip_python)
    for group in groups:
        found = sources.look("torch", group)
        tried += group
        unreachable.update(found.unreachable)
        everything += found.candidates
        pick = select(found.candidates, request, choice, tags, python_version)
        if pick is None:
            continue
        used = [s for s in found.used() if any(c.version == pick.version for c in found.answered[s])]
        res = Resolved(torch=pick, index_url=None, sources=found.used(), configured=[s for g in groups for s in g])
        for name in companions:
            comp = select_companion(sources.look(name, group).candidates, name, pick, tags, python_version)
            if comp is None:
                raise EnvkitError(f"{err.message}; pip's configured sources have torch {pick.version} but no {name} for it",
                                  fix=f"drop {name} from --with, or {err.fix}")
            res.companions[name] = comp
        _add_extras(res, extras, group, tags, python_version)
        res.notes.append(sources.fell_back_line(choice.index_url, why, "torch", used))
        return res
    if all(s in unreachable for s in tried):
        raise sources.offline(choice.index_url, why, {s: w for s, w in unreachable.items() if s != choice.index_url},
                              fix=err.fix or pages.FIX)
    # not NoMatchingTorch: another CUDA build's page is as unreachable, and pip's sources the same
    raise sources.not_found(f"torch {_want(request, choice)}", tried, unreachable,
                            _have(everything, request, choice, tags, python_version), fix=NOT_FOUND_FIX)
