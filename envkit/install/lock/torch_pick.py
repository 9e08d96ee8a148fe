"""torch and its companions for every target of `envkit lock`: the same public version on every
target, each from its build's own PyTorch index page (read by envkit, index/pages.py); a target
whose build lacks that version is one line naming the versions its build has."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

from packaging.version import Version

from envkit.errors import EnvkitError
from envkit.install.choice.model import parse_request
from envkit.install.choice.resolve import select_companion
from envkit.install.index import pages, sources
from envkit.install.lock.targets import Target, build_index, known_cuda_builds
from envkit.redact import strip_userinfo

if TYPE_CHECKING:
    from envkit.facts.model import Channel

TORCH_FAMILY = ("torch", "torchvision", "torchaudio")


class MissingBuild(EnvkitError):
    """A target whose build does not exist for the requested version: exit 1 (not bad input)."""

    exit_code = 1


def _fitting(cands, target: Target, python: str, request=None) -> list[pages.Candidate]:
    tags = frozenset(target.tags(python))
    return [c for c in cands if not c.yanked and c.fits(tags, python) and c.version.local == target.local_label
            and (request is None or request.admits(c.version))]


def _best(cands, target: Target, python: str) -> pages.Candidate:
    order = {t: i for i, t in enumerate(target.tags(python))}
    return min(cands, key=lambda c: min(order.get(t, 10**6) for t in c.tags))


def torch_source(target: Target, channel: Channel, rest: list[str]) -> str:
    """Where a target's torch lives: PyPI-style indexes for macOS stable (its wheels there are the
    MPS builds), else the build's page of PyTorch's index (macOS nightlies under /cpu)."""
    if target.build == "mps":
        return rest[0] if channel == "stable" else build_index("cpu", channel)
    return build_index(target.build, channel)


def _fetch_all(source: str, name: str) -> list[pages.Candidate]:
    return pages.fetch(source, name)


def expand_cuda(target: Target, request, python: str, channel: Channel) -> Target:
    """`linux-x86_64-cuda`: the newest CUDA build whose index page has a torch the request admits."""
    if target.build != "cuda":
        return target
    tried = []
    for build in reversed(known_cuda_builds()):
        t = Target(target.platform, build, target.asked)
        if _fitting(_fetch_all(build_index(build, channel), "torch"), t, python, request):
            return t
        tried.append(build)
    raise MissingBuild(f"{target.asked}: no CUDA build of torch {request.text} for {target.platform}, Python {python} "
                       f"on {build_index('', channel)} (tried {', '.join(tried)})", where="--target",
                       fix="ask for another --torch, or name the build (linux-x86_64-cu130)")


@dataclass
class Located:
    """Where one target's torch is read (index/sources.py: its build's page, else, when that cannot
    be reached, pip's configured sources or --index-url), and the wheels there that fit the target."""

    group: list[str]  # the sources read: torch and its companions come from here
    fitting: list[pages.Candidate]  # every torch wheel there that fits the target (any version)
    tried: list[str] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)
    note: str | None = None  # the one line that says it fell back, and why

    @property
    def index(self) -> str:
        """The source the lock names for this target's torch."""
        return self.group[0] if self.group else ""


def locate(t: Target, request, python: str, channel: Channel, rest: list[str], links: list[str],
           label: str = sources.PIP_SOURCES) -> Located:
    primary = torch_source(t, channel, rest)
    try:
        cands = _fetch_all(primary, "torch")
    except EnvkitError as exc:
        if channel != "stable" or primary in rest:  # nightlies live on PyTorch's index alone; macOS reads rest already
            raise
        return _fall_back(t, request, python, rest, links, primary, exc, label)
    return Located([primary], _fitting(cands, t, python), [primary])


def _fall_back(t: Target, request, python: str, rest: list[str], links: list[str], primary: str, err: EnvkitError,
               label: str) -> Located:
    """The build's page cannot be reached: the lock's other sources, a group at a time (those on
    this disk first), as `envkit setup` does."""
    why = sources.reason(err)
    out = Located([], [], [primary], {primary: why})
    for group in sources.fallback_groups(rest, links):
        found = sources.look("torch", group)
        out.tried += group
        out.unreachable.update(found.unreachable)
        fit = _fitting(found.candidates, t, python)
        out.fitting += fit
        if any(request.admits(c.version) for c in fit):
            used = [s for s in found.used() if _fitting(found.answered[s], t, python, request)]
            return Located(group, fit, out.tried, out.unreachable, sources.fell_back_line(primary, why, "torch", used, label))
    if all(s in out.unreachable for s in out.tried):
        raise sources.offline(primary, why, {s: w for s, w in out.unreachable.items() if s != primary},
                              fix=err.fix or pages.FIX, label=label)
    return out


Families = dict[Target, dict[str, pages.Candidate]]


def pick_torch(targets: list[Target], request, python: str, channel: Channel, rest: list[str], companions: list[str],
               links: list[str] | tuple[str, ...] = (), label: str = sources.PIP_SOURCES) -> tuple[Families, dict[Target, Located]]:
    """({target: {"torch": wheel, "torchvision": wheel, ...}}, {target: where its torch is read}),
    the same public versions everywhere: the newest public torch that every target's build has.
    A version no target has is on none of their sources (exit 2, naming what they have); one that
    some targets lack is one line naming the versions their builds have (exit 1)."""
    located = {t: locate(t, request, python, channel, rest, list(links), label) for t in targets}
    fits = {t: [c for c in loc.fitting if request.admits(c.version)] for t, loc in located.items()}
    common = None
    for cands in fits.values():
        have = {c.version.public for c in cands}
        common = have if common is None else common & have
    if not common:
        _explain_missing(fits, located, request, python)
    public = max(common, key=Version)
    out: dict[Target, dict[str, pages.Candidate]] = {}
    for t in targets:
        out[t] = {"torch": _best([c for c in fits[t] if c.version.public == public], t, python)}
    for name in companions:
        _pick_companion(out, located, name, python)
    return out, located


def _what(request, t: Target) -> str:
    return f"torch {request.text} (" + (f"a +{t.local_label} build for " if t.local_label else "for ") + f"{t.name})"


def _explain_missing(fits, located, request, python) -> NoReturn:
    """One line. No target has the version: it is on none of their sources, with the versions
    they have. Some lack it: those targets, and the versions their build exists for."""
    if not any(fits.values()):
        parts = [sources.not_found(_what(request, t), loc.tried, loc.unreachable, _versions(loc.fitting, request),
                                   fix="").message for t, loc in located.items()]
        some = any(_versions(loc.fitting, request) for loc in located.values())
        unreachable = any(loc.unreachable for loc in located.values())
        fix = ("ask for one of those with --torch, or point ENVKIT_PYTORCH_INDEX at an index that has it" if some
               else "reach PyTorch's index for that build (the network, or ENVKIT_PYTORCH_INDEX at a mirror of it), then lock again"
               if unreachable else "point ENVKIT_PYTORCH_INDEX at an index that has that build, or lock a target whose build these sources have")
        raise EnvkitError("; ".join(strip_userinfo(p) for p in parts), where="--torch", fix=fix)
    parts = []
    for t in [t for t, cands in fits.items() if not cands]:
        versions = sorted({c.version.public for c in located[t].fitting}, key=Version)
        src = strip_userinfo(", ".join(located[t].group or located[t].tried))
        parts.append(f"{t.name} has no torch {request.text} for Python {python} on {src} "
                     + (f"(its build exists for {', '.join(versions[-8:])})" if versions else "(no torch there at all)"))
    raise MissingBuild("; ".join(parts), where="--target", fix="ask for a --torch that every target has, or drop the target")


def _versions(cands, request) -> list[str]:
    """The versions worth naming: of the request's channel where there are any."""
    same = [c for c in cands if parse_request(request.channel).admits(c.version)] or cands
    return sorted({str(c.version) for c in same}, key=Version)


def _pick_companion(out, located: dict[Target, Located], name: str, python: str) -> None:
    per = {}
    for t, picked in out.items():
        loc = located[t]  # the build's page (an error there is said), or the group the fallback read
        cands = _fetch_all(loc.index, name) if loc.note is None else sources.look(name, loc.group).candidates
        torch = picked["torch"]
        per[t] = [c for c in _fitting(cands, t, python)
                  if select_companion([c], name, torch, frozenset(t.tags(python)), python) is not None]
    common = None
    for cands in per.values():
        have = {c.version.public for c in cands}
        common = have if common is None else common & have
    if not common:
        raise MissingBuild(f"no {name} released with torch {next(iter(out.values()))['torch'].version.public} exists "
                           f"on every target's index ({', '.join(t.name for t, c in per.items() if not c) or 'versions differ'})",
                           where="--with", fix=f"drop {name} from --with, or ask for another --torch")
    public = max(common, key=Version)
    for t in out:
        out[t][name] = _best([c for c in per[t] if c.version.public == public], t, python)


