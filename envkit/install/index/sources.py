"""Where envkit looks for a package: one order for `envkit setup` and `envkit lock`.

1. The index named for it: PyTorch's index of the build (`BASE/cpu`, `BASE/cu130`; BASE is
   ENVKIT_PYTORCH_INDEX), the index a lock recorded, or the one the user named (--index-url).
2. Else pip's configured sources (pip.conf, PIP_* variables; PyPI where no index is set): its
   find-links and file:// indexes first, then its remote indexes. For torch's builds only when the
   first cannot be reached (a build page that answers is the answer; a named index is never
   overruled); for any other package also when the first lacks it.

Every lookup ends one of three ways, and each is said as such: found (from pip's sources: one
line naming the unreachable index and the sources used), not there (`torch 9.9 is on none of: A,
B; they have 2.12.0, 2.13.0`: the version is wrong, exit 2), or nothing answered (`cannot reach
...`: offline?)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from envkit.errors import EnvkitError
from envkit.install.index import pages, pip_config

PIP_SOURCES = "pip's configured sources"


def fallback_groups(indexes: list[str], links: list[str]) -> list[list[str]]:
    """pip's sources in the order they are tried: find-links and file:// indexes (on this disk),
    then the remote indexes. A group that holds a match is used whole (torch, its companions and
    numpy from one place)."""
    local = [s for s in links + indexes if "://" not in s or s.startswith("file://")]
    remote = [s for s in indexes if s not in local]
    return [g for g in (local, remote) if g]


def pip_groups(python: str) -> list[list[str]]:
    """The fallback groups of pip's configuration as the interpreter `python`'s pip reads it."""
    return fallback_groups(*pip_config.pip_sources(python))


def reason(err: EnvkitError) -> str:
    """Why an index could not be read, without the URL and the retry count."""
    text = re.sub(r"^cannot (reach|read) the package index \S+?: ", "", err.message)
    return re.sub(r" \(tried \d+ times\)$", "", text)


@dataclass
class Lookup:
    """What each source answered for one project: its wheels, or why it could not be read."""

    name: str
    answered: dict[str, list[pages.Candidate]] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)  # source -> reason

    @property
    def candidates(self) -> list[pages.Candidate]:
        return [c for cands in self.answered.values() for c in cands]

    def used(self) -> list[str]:
        """The sources that hold any wheel of the project."""
        return [s for s, cands in self.answered.items() if cands]


def look(name: str, sources: list[str]) -> Lookup:
    out = Lookup(name)
    for src in sources:
        try:
            out.answered[src] = pages.fetch(src, name)
        except EnvkitError as exc:
            out.unreachable[src] = reason(exc)
    return out


def fell_back_line(primary: str, why: str, what: str, used: list[str], label: str = PIP_SOURCES) -> str:
    """The one line that says a lookup went to pip's sources (`label`: or --index-url), and why."""
    return f"{primary} is unreachable ({why}): {what} from {label} ({', '.join(used)})"


def tried_text(tried: list[str], unreachable: dict[str, str]) -> str:
    return ", ".join(f"{s} (unreachable: {unreachable[s]})" if s in unreachable else s for s in tried)


def not_found(what: str, tried: list[str], unreachable: dict[str, str], have: list[str] | str, fix: str,
              error: type[EnvkitError] = EnvkitError) -> EnvkitError:
    """`torch 9.9 is on none of: A (unreachable: ...), B; they have 2.12.0, 2.13.0`: the sources
    answered, and none has it. `have`: the versions they do have (the newest 8 are named), or a
    sentence where none fits."""
    if isinstance(have, str):
        there = have
    else:
        there = f"they have {', '.join(have[-8:])}" if have else "none of them has any"
    return error(f"{what} is on none of: {tried_text(tried, unreachable)}; {there}", fix=fix)


def offline(primary: str, why: str, pip_unreachable: dict[str, str], fix: str, label: str = PIP_SOURCES) -> EnvkitError:
    """Nothing answered: the primary index and pip's sources (`label`: or --index-url) alike (offline?)."""
    text = f"cannot reach the package index {primary}: {why}"
    if pip_unreachable:
        text += f"; nor {label} (" + ", ".join(f"{s}: {w}" for s, w in pip_unreachable.items()) + ")"
    return EnvkitError(text, fix=fix)
