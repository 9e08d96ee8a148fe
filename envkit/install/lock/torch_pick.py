"""torch and its companions for every target of `envkit lock`: the same public version on every
target, each from its build's own PyTorch index page (read by envkit, index/pages.py); a target
whose build lacks that version is one line naming the versions its build has."""

from __future__ import annotations

from packaging.version import Version

from envkit.errors import EnvkitError
from envkit.install.index import pages
from envkit.install.lock.targets import Target, build_index, known_cuda_builds
from envkit.redact import strip_userinfo

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


def torch_source(target: Target, channel: str, rest: list[str]) -> str:
    """Where a target's torch lives: PyPI-style indexes for macOS stable (its wheels there are the
    MPS builds), else the build's page of PyTorch's index (macOS nightlies under /cpu)."""
    if target.build == "mps":
        return rest[0] if channel == "stable" else build_index("cpu", channel)
    return build_index(target.build, channel)


def _fetch_all(source: str, name: str) -> list[pages.Candidate]:
    return pages.fetch(source, name)


def expand_cuda(target: Target, request, python: str, channel: str) -> Target:
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


def pick_torch(targets: list[Target], request, python: str, channel: str, rest: list[str],
               companions: list[str]) -> dict[Target, dict[str, pages.Candidate]]:
    """{target: {"torch": wheel, "torchvision": wheel, ...}}, the same public versions everywhere:
    the newest public torch that every target's build has. A target whose build lacks it is one
    line naming the versions that have it."""
    fits = {t: _fitting(_fetch_all(torch_source(t, channel, rest), "torch"), t, python, request) for t in targets}
    common = None
    for t, cands in fits.items():
        have = {c.version.public for c in cands}
        common = have if common is None else common & have
    if not common:
        _explain_missing(fits, request, python, channel, rest)
    public = max(common, key=Version)
    out: dict[Target, dict[str, pages.Candidate]] = {}
    for t in targets:
        out[t] = {"torch": _best([c for c in fits[t] if c.version.public == public], t, python)}
    for name in companions:
        _pick_companion(out, name, python, channel, rest)
    return out


def _explain_missing(fits, request, python, channel, rest) -> None:
    """One line: the targets that lack the version, and the versions their build exists for."""
    lacking = [t for t, cands in fits.items() if not cands] or list(fits)
    parts = []
    for t in lacking:
        versions = _versions_with_build(t, python, channel, rest)
        src = strip_userinfo(torch_source(t, channel, rest))
        parts.append(f"{t.name} has no torch {request.text} for Python {python} on {src} "
                     + (f"(its build exists for {', '.join(versions[-8:])})" if versions else "(no torch there at all)"))
    raise MissingBuild("; ".join(parts), where="--target", fix="ask for a --torch that every target has, or drop the target")


def _versions_with_build(t: Target, python: str, channel: str, rest: list[str]) -> list[str]:
    cands = _fitting(_fetch_all(torch_source(t, channel, rest), "torch"), t, python)
    return sorted({c.version.public for c in cands}, key=Version)


def _pick_companion(out, name: str, python: str, channel: str, rest: list[str]) -> None:
    from envkit.install.choice.resolve import select_companion

    per = {}
    for t, picked in out.items():
        cands = _fetch_all(torch_source(t, channel, rest), name)
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


