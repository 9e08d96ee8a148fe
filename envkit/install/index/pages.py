"""Read a package index the way pip does, with requests: PEP 691 JSON where the index serves it,
PEP 503 HTML otherwise; `file://` indexes and plain directories of wheels (pip's find-links) too.

Everything the network can do wrong (refused, unresolvable, slow, garbage) becomes one
EnvkitError naming the URL, after a few short retries.
"""

from __future__ import annotations

import html.parser
import json
import os
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envkit.errors import EnvkitError

ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
FIX = "check the network, or point --index-url (or ENVKIT_INDEX_URL) at a reachable mirror"


def timeouts() -> tuple[float, float]:
    """(connect, read) seconds; ENVKIT_INDEX_TIMEOUT sets both."""
    env = os.environ.get("ENVKIT_INDEX_TIMEOUT")
    if env:
        try:
            t = float(env)
            return t, t
        except ValueError:
            pass
    return 5.0, 15.0


RETRIES = 2  # attempts after the first, with 0.3 s and 0.9 s pauses


@dataclass(frozen=True)
class Candidate:
    """One wheel file on an index."""

    name: str  # canonical project name
    version: Version
    filename: str
    url: str
    tags: frozenset
    sha256: str | None = None
    requires_python: str | None = None
    yanked: bool = False
    size: int | None = None  # PEP 700 (JSON pages); None where the index gives none
    metadata: bool = False  # PEP 658/714: the METADATA file is served at url + ".metadata"

    @property
    def public(self) -> str:
        return self.version.public

    def fits(self, tags: frozenset, python_version: str | None = None) -> bool:
        if not (self.tags & tags):
            return False
        if self.requires_python and python_version:
            from packaging.specifiers import InvalidSpecifier, SpecifierSet

            try:
                return SpecifierSet(self.requires_python).contains(python_version, prereleases=True)
            except InvalidSpecifier:
                return True
        return True


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[dict] = []
        self.saw_html = False

    def handle_starttag(self, tag, attrs):
        if tag in ("html", "body", "a", "meta", "head"):
            self.saw_html = True
        if tag == "a":
            self.links.append(dict(attrs))


def _candidates(name: str, files: list[dict], base_url: str, only: Version | None = None) -> list[Candidate]:
    """The page's wheels of `name`; of that version alone where one is given. A project page lists
    every file ever released (torch's on PyPI: thousands), and parsing each name's tags and URL cost
    most of the CPU of a run's first record: a file of another version is skipped by the version
    field of its name (name-version[-build]-python-abi-platform.whl) before any of that."""
    out = []
    want = canonicalize_name(name)
    seen: dict[str, bool] = {}  # a version's text -> whether it is `only` (parsed once per release)
    for f in files:
        filename = f.get("filename") or ""
        if not filename.endswith(".whl"):
            continue
        if only is not None:
            text = filename.split("-", 2)[1] if filename.count("-") >= 4 else ""
            if text not in seen:
                try:
                    seen[text] = Version(text) == only
                except InvalidVersion:
                    seen[text] = False
            if not seen[text]:
                continue
        try:
            pname, version, _build, tags = parse_wheel_filename(filename)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        if canonicalize_name(pname) != want:
            continue
        url = urllib.parse.urljoin(base_url, f.get("url") or filename)
        hashes = dict(f.get("hashes") or {})
        frag = urllib.parse.urlsplit(url).fragment
        if frag.startswith("sha256="):
            hashes.setdefault("sha256", frag.split("=", 1)[1])
        url = urllib.parse.urldefrag(url)[0]
        yanked = f.get("yanked")
        size = f.get("size")
        meta = f.get("core-metadata", f.get("dist-info-metadata"))
        out.append(Candidate(name=want, version=version, filename=filename, url=url, tags=frozenset(str(t) for t in tags),
                             sha256=hashes.get("sha256"), requires_python=f.get("requires-python") or None,
                             yanked=bool(yanked) and yanked is not False,
                             size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                             metadata=bool(meta) and meta not in ("false", False)))
    return out


def parse_json_page(name: str, text: str, url: str, version: Version | None = None) -> list[Candidate]:
    try:
        data = json.loads(text)
        files = data["files"]
        if not isinstance(files, list):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise EnvkitError(f"the index {url} answered with JSON that is not a PEP 691 project page", fix=FIX)
    return _candidates(name, [f for f in files if isinstance(f, dict)], url, version)


def parse_html_page(name: str, text: str, url: str, version: Version | None = None) -> list[Candidate]:
    p = _Links()
    try:
        p.feed(text)
    except Exception:
        p.saw_html = False
    if not p.saw_html:
        raise EnvkitError(f"the index {url} answered with something that is not a package index page", fix=FIX)
    files = []
    for a in p.links:
        href = a.get("href") or ""
        filename = urllib.parse.unquote(urllib.parse.urlsplit(href).path.rsplit("/", 1)[-1])
        files.append({"filename": filename, "url": href, "requires-python": a.get("data-requires-python"),
                      "yanked": "data-yanked" in a,
                      "core-metadata": a.get("data-core-metadata", a.get("data-dist-info-metadata"))})
    return _candidates(name, files, url, version)


def project_url(index_url: str, name: str) -> str:
    return index_url.rstrip("/") + "/" + canonicalize_name(name) + "/"


def fetch(index_url: str, name: str, *, session=None, version: Version | None = None) -> list[Candidate]:
    """Every wheel of project `name` on the index (a URL, file:// URL or directory of wheels), or
    of one version of it. A `session` (requests.Session) reuses its connections: one TLS handshake
    per host, not per project."""
    if index_url.startswith("file://") or "://" not in index_url:
        return _fetch_local(index_url, name, version)
    import requests

    url = project_url(index_url, name)
    sess = session or requests.Session()
    last = None
    for attempt in range(RETRIES + 1):
        if attempt:
            time.sleep(0.3 * 3 ** (attempt - 1))
        try:
            resp = sess.get(url, headers={"Accept": ACCEPT}, timeout=timeouts(), allow_redirects=True)
        except requests.exceptions.Timeout:
            last = f"it did not answer within {timeouts()[1]:g} s"
            continue
        except requests.exceptions.ConnectionError as exc:
            last = _connection_reason(exc)
            continue
        except requests.exceptions.RequestException as exc:
            raise EnvkitError(f"cannot read the package index {index_url}: {exc.__class__.__name__}", fix=FIX)
        if resp.status_code == 404:
            return []
        if resp.status_code >= 500 or resp.status_code == 429:
            last = f"it answered HTTP {resp.status_code}"
            continue
        if resp.status_code != 200:
            raise EnvkitError(f"the package index {index_url} answered HTTP {resp.status_code} for {url}", fix=FIX)
        ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
        try:
            text = resp.text
        except Exception:
            raise EnvkitError(f"the package index {index_url} sent an unreadable answer", fix=FIX)
        if ctype == JSON_TYPE or ctype == "application/json":
            return parse_json_page(name, text, resp.url, version)
        return parse_html_page(name, text, resp.url, version)
    raise EnvkitError(f"cannot reach the package index {index_url}: {last} (tried {RETRIES + 1} times)", fix=FIX)


def _connection_reason(exc) -> str:
    text = str(exc)
    for needle, why in (("Name or service not known", "its host name does not resolve (offline?)"),
                        ("nodename nor servname", "its host name does not resolve (offline?)"),
                        ("Temporary failure in name resolution", "its host name does not resolve (offline?)"),
                        ("Failed to resolve", "its host name does not resolve (offline?)"),
                        ("Connection refused", "the connection was refused"),
                        ("Read timed out", "it did not answer in time"),
                        ("RemoteDisconnected", "it closed the connection without answering"),
                        ("BadStatusLine", "it answered something that is not HTTP"),
                        ("SSL", "the TLS handshake failed")):
        if needle in text:
            return why
    return "the connection failed"


def _fetch_local(index_url: str, name: str, version: Version | None = None) -> list[Candidate]:
    path = Path(urllib.parse.unquote(urllib.parse.urlsplit(index_url).path) if index_url.startswith("file://") else index_url)
    project = path / canonicalize_name(name)
    if (project / "index.html").is_file():  # a file:// simple index
        return parse_html_page(name, (project / "index.html").read_text(errors="replace"), project.as_uri() + "/", version)
    if path.is_dir():  # a find-links directory of wheels
        files = [{"filename": p.name, "url": p.as_uri()} for p in sorted(path.glob("*.whl"))]
        return _candidates(name, files, path.as_uri() + "/", version)
    return []


def wheel_folder(index_url: str | None) -> str | None:
    """The absolute folder when `index_url` (a path or a file:// URL) is a plain folder of wheels,
    pip's find-links, rather than a PEP 503 simple index (which has <project>/index.html pages).
    Installers take such a folder only as `--no-index --find-links DIR`, never as `--index-url`."""
    if not index_url:
        return None
    if index_url.startswith("file://"):
        path = Path(urllib.parse.unquote(urllib.parse.urlsplit(index_url).path))
    elif "://" in index_url:
        return None
    else:
        path = Path(index_url)
    if not path.is_dir():
        return None
    if (path / "index.html").is_file() or any((p / "index.html").is_file() for p in path.iterdir() if p.is_dir()):
        return None
    return str(path.resolve())
