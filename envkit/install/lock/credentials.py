"""The one rule by which a private index's credential reaches what envkit fetches for a lock, for
both lock formats: the wheels it downloads itself and the indexes it hands to pip.

Locks never hold credentials (envkit/redact.py strips them when writing). At install time the
user's index URL with its user and password, in ENVKIT_INDEX_URL, PIP_INDEX_URL or UV_INDEX_URL,
is the credential of the index it names. It is used for a request when:
  - the index the request belongs to lies under the credential's URL: the same scheme, host and
    port, and a path equal to the credential's path or below it at a '/' (`/simple` covers
    `/simple/torch/`, never `/simple-evil/`; `/org-a/simple` never covers `/org-b/simple`);
  - and the request goes to that index's own scheme, host and port (a file an index serves from
    another host, a CDN, never gets the index's password).
A file belongs to the index the lock names for its package (PEP 751 `packages.index`), else to the
lock's index on the file's own scheme, host and port, else to nothing but its own URL. Registries
that host many indexes per host give each its own token under its own path (GitLab's
/api/v4/projects/<id>/packages/pypi/simple, Artifactory's /api/pypi/<repo>/simple), and serve
the files beside the index rather than under it: the host alone would hand one project's token
to every other; the file's own path alone would never match. Nothing matching: requests reads
~/.netrc (or $NETRC), as pip does."""

from __future__ import annotations

import os
from urllib.parse import SplitResult, urlsplit, urlunsplit

VARIABLES = ("ENVKIT_INDEX_URL", "PIP_INDEX_URL", "UV_INDEX_URL")
DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(u: SplitResult) -> tuple[str, str, int | None]:
    scheme = u.scheme.lower()
    try:
        port = u.port
    except ValueError:  # a port that is no number: no origin to match
        return scheme, "", None
    return scheme, (u.hostname or "").lower(), port or DEFAULT_PORTS.get(scheme)


def _bare(u: SplitResult) -> SplitResult:
    return u._replace(netloc=u.netloc.rpartition("@")[2])


def under(url: str, index: str) -> bool:
    """`url` lies under `index`: the same scheme, host and port, and a path at or below the
    index's path, at a '/' boundary. Pure."""
    a, b = _bare(urlsplit(url)), _bare(urlsplit(index))
    if not b.hostname or _origin(a) != _origin(b):
        return False
    base = b.path.rstrip("/")
    return a.path.rstrip("/") == base or a.path.startswith(base + "/")


def userinfo_for(index: str) -> str | None:
    """The 'user:password' (as written, percent-encoding kept) of the first variable whose URL
    covers `index`."""
    for name in VARIABLES:
        value = urlsplit(os.environ.get(name, "").strip())
        if "@" in value.netloc and value.hostname and under(index, urlunsplit(_bare(value))):
            return value.netloc.rpartition("@")[0]
    return None


def index_of(url: str, named: str | None, lock_indexes: list[str]) -> str:
    """The index a file belongs to: the one the lock names for its package, else the lock's index
    on the file's scheme, host and port, else the file's own URL."""
    if named:
        return named
    origin = _origin(urlsplit(url))
    return next((i for i in lock_indexes if "://" in i and _origin(urlsplit(i)) == origin), url)


def with_credentials(url: str, index: str | None = None) -> str:
    """`url` carrying the credential of the index it belongs to (default: `url` is an index).
    Never printed: every message passes through strip_userinfo."""
    target = urlsplit(url)
    if "@" in target.netloc or not target.hostname:  # already has one, or a local file
        return url
    index = index or url
    if _origin(target) != _origin(urlsplit(index)):
        return url
    userinfo = userinfo_for(index)
    return urlunsplit(target._replace(netloc=f"{userinfo}@{target.netloc}")) if userinfo else url
