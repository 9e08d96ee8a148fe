"""Every value envkit reads from a lock, checked before anything uses it (read.py calls this once,
so `setup --lock`, `check --lock`, `lock --from` and whatever reads a lock later get checked data).

A lock is shared between people and machines, and what it names reaches pip's requirements file,
pip's command line, envkit's downloads and its wheel cache. Unchecked, a version written as
`1.17.0\\n/path/to/dir` made pip build and install that folder (its setup.py ran), and
`\\n--extra-index-url http://...` made pip read another index. So, in every format envkit reads
(pylock.toml, pylock.machine.toml or envkit.lock, an envkit.lock of lock_version = 1):

  names     PEP 508 project names (what PEP 503 normalizes), extras alike
  versions  PEP 440 (packaging.version.Version), without any whitespace
  hashes    an algorithm of hashlib.algorithms_guaranteed, hex digits of its digest's length
  URLs      http, https or file, as fetch_wheel and pip take them, with no space or control
            character; an index may also be an absolute folder (`envkit setup --index-url DIR`)
  paths     no control character, no leading '-' (nothing pip could read as an option)
  files     a wheel's file name as PEP 427 writes it (it names a file in envkit's cache: no folder)
  markers   PEP 508 markers (packaging.markers); requires-python a PEP 440 specifier set

The first problem is one line naming the file, the entry and the value; nothing else is read.
packaging's own PEP 751 validation (read.py) runs after this, for the rest of the format."""

from __future__ import annotations

import hashlib
import os
import re
from urllib.parse import urlsplit

from envkit.errors import EnvkitError
from envkit.install.lock.model import wheel_filename
from envkit.profiles.schema import NAME_RE

NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)  # PEP 508's name
URL_SCHEMES = ("http", "https", "file")
_SPACE_OR_CONTROL = re.compile(r"[\x00-\x20\x7f]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CACHED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")  # a file name in envkit's wheel cache
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CUDA_BUILD = re.compile(r"^cu\d+$")

FIX = {"name": "a project name: letters, digits, '.', '_' and '-'", "version": "a PEP 440 version, e.g. 1.26.4 or 2.13.0+cpu",
       "hash": "the hex digest of the file", "url": "an https:// (or http://, file://) URL", "path": "a path to the file",
       "marker": "a PEP 508 marker, e.g. sys_platform == 'linux'", "table": "see PEP 751 for the lock's shape"}


class Bad(ValueError):
    """One value that is not what the lock's format says; `kind` picks the fix."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:156] + "...'"


def _str(value, field: str, kind: str) -> str:
    if not isinstance(value, str):
        raise Bad(f"{field} {_show(value)} is {type(value).__name__}, not a string", kind)
    return value


def name(value, field: str = "name") -> str:
    if not NAME.match(_str(value, field, "name")):
        raise Bad(f"{field} {_show(value)} is not a project name", "name")
    return value


def version(value, field: str = "version") -> None:
    from packaging.version import InvalidVersion, Version

    text = _str(value, field, "version")
    try:
        if re.search(r"\s", text):  # Version() takes surrounding whitespace, pip's requirement lines do not
            raise InvalidVersion(text)
        Version(text)
    except InvalidVersion:
        raise Bad(f"{field} {_show(value)} is not a PEP 440 version", "version") from None


def digest(algorithm, value, field: str = "hashes") -> None:
    algo = str(algorithm).lower()
    if algo not in hashlib.algorithms_guaranteed or algo.startswith("shake"):
        raise Bad(f"{field} names the algorithm {_show(algorithm)}, not one envkit can check (sha256, sha512, ...)", "hash")
    n = hashlib.new(algo).digest_size * 2
    if not re.fullmatch(rf"[0-9a-fA-F]{{{n}}}", _str(value, f"{field} {algo}", "hash")):
        raise Bad(f"{field} {algo} {_show(value)} is not {n} hexadecimal digits", "hash")


def url(value, field: str = "url", folder: bool = False) -> None:
    """An http, https or file URL; with `folder`, an absolute folder too (an index on this disk)."""
    text = _str(value, field, "url")
    if _SPACE_OR_CONTROL.search(text):
        raise Bad(f"{field} {_show(value)} holds a space or a control character", "url")
    if folder and "://" not in text and (os.path.isabs(text) or re.match(r"^[A-Za-z]:[\\/]", text)):
        return
    try:
        u = urlsplit(text)
        u.port  # noqa: B018 - reading it is the check: a port that is no number raises
    except ValueError:
        raise Bad(f"{field} {_show(value)} is not a URL", "url") from None
    if "://" not in text or u.scheme.lower() not in URL_SCHEMES or (u.scheme.lower() != "file" and not u.hostname):
        raise Bad(f"{field} {_show(value)} is not an http, https or file URL"
                  + (" nor an absolute folder" if folder else ""), "url")


def path(value, field: str = "path") -> None:
    text = _str(value, field, "path")
    if not text or _CONTROL.search(text) or text.startswith("-"):
        raise Bad(f"{field} {_show(value)} is not a path (empty, a control character, or a leading '-')", "path")


def marker(value, field: str = "marker") -> None:
    from packaging.markers import InvalidMarker, Marker

    try:
        Marker(_str(value, field, "marker"))
    except InvalidMarker:
        raise Bad(f"{field} {_show(value)} is not a PEP 508 marker", "marker") from None


def specifiers(value, field: str = "requires-python") -> None:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        SpecifierSet(_str(value, field, "version"))
    except InvalidSpecifier:
        raise Bad(f"{field} {_show(value)} is not a PEP 440 specifier set", "version") from None


def table(value, field: str) -> dict:
    if not isinstance(value, dict):
        raise Bad(f"{field} is {type(value).__name__} {_show(value)}, not a table", "table")
    return value


def tables(value, field: str) -> list[dict]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise Bad(f"{field} is {type(value).__name__} {_show(value)}, not a list of tables", "table")
    return value


def strings(value, field: str) -> list[str]:
    if not isinstance(value, list):
        raise Bad(f"{field} is {type(value).__name__} {_show(value)}, not a list", "table")
    return value


def _no_space(value, field: str) -> None:
    if _SPACE_OR_CONTROL.search(_str(value, field, "url")):
        raise Bad(f"{field} {_show(value)} holds a space or a control character", "url")


def _file_name(value, field: str, wheel: bool) -> None:
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    text = _str(value, field, "path")
    try:
        if "/" in text or "\\" in text or _SPACE_OR_CONTROL.search(text):
            raise InvalidWheelFilename(text)
        if wheel:
            parse_wheel_filename(text)
    except InvalidWheelFilename:
        raise Bad(f"{field} {_show(value)} is not a {'wheel' if wheel else 'file'}'s file name", "path") from None


# ---------------------------------------------------------------- the lock, entry by entry

class _At(Exception):
    def __init__(self, entry: str, bad: Bad):
        super().__init__(entry)
        self.entry, self.bad = entry, bad


class _entry:
    """`with _entry("[[packages]] entry 2 (torch)"):` a Bad inside is reported as that entry's."""

    def __init__(self, label: str):
        self.label = label

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if isinstance(exc, Bad):
            raise _At(self.label, exc) from None
        return False


def _label(array: str, i: int, entry: dict) -> str:
    n = entry.get("name")
    return f"{array} entry {i}" + (f" ({n})" if isinstance(n, str) and NAME.match(n) else "")


def check(data: dict, where: str, fix: str, old: bool = False) -> None:
    """Every value of a lock's TOML (`old`: an envkit.lock of lock_version = 1), or one line naming
    the file, the entry and the value, with what was expected and `fix`."""
    try:
        (_old if old else _pylock)(data)
    except _At as at:
        raise EnvkitError(f"{at.entry + ': ' if at.entry else ''}{at.bad}", where=where,
                          fix=f"{FIX[at.bad.kind]}; {fix}; do not install a lock you do not trust") from None


def _required(entry: dict, *keys: str) -> None:
    for key in keys:
        if key not in entry:
            raise Bad(f"has no {key}", "version" if key == "version" else "name")


def _pylock(data: dict) -> None:
    with _entry(""):
        if "requires-python" in data:
            specifiers(data["requires-python"])
        for i, m in enumerate(strings(data.get("environments") or [], "environments"), 1):
            marker(m, f"environments[{i}]")
        packages = tables(data.get("packages", []), "packages")
        tool = table(table(data.get("tool", {}), "[tool]").get("envkit", {}), "[tool.envkit]")
    for i, p in enumerate(packages, 1):
        with _entry(_label("[[packages]]", i, p)):
            _package(p)
    with _entry(""):
        single = isinstance(tool.get("platform"), dict)
        for i, v in enumerate(tables(tool.get("versions-only", []), "[[tool.envkit.versions-only]]"), 1):
            with _entry(_label("[[tool.envkit.versions-only]]", i, v)):
                _pin(v)
        with _entry("[tool.envkit]"):
            for i, u in enumerate(strings(tool.get("indexes", []), "indexes"), 1):
                url(u, f"indexes[{i}]", folder=True)
        _tables(tool, "tool.envkit.")
        for n, t in table(tool.get("targets", {}), "[tool.envkit.targets]").items():
            with _entry(f"[tool.envkit.targets.{n}]"):
                _target(table(t, f"[tool.envkit.targets.{n}]"), single)
        with _entry("[tool.envkit.project]"):
            project = table(tool.get("project", {}), "[tool.envkit.project]")
            if "name" in project:
                name(project["name"])
            for e in strings(project.get("extras", []), "extras"):
                name(e, "extra")


def _package(p: dict) -> None:
    """One [[packages]] entry: every field envkit or an installer reads."""
    _required(p, "name")
    name(p["name"])
    if "version" in p:  # PEP 751: optional (a directory or VCS package); envkit installs wheels only
        version(p["version"])
    if "marker" in p:
        marker(p["marker"])
    if "requires-python" in p:
        specifiers(p["requires-python"])
    if "index" in p:
        url(p["index"], "index", folder=True)
    for j, w in enumerate(tables(p.get("wheels", []), "wheels"), 1):
        _file(w, f"wheel {j}", wheel=True)
    for key in ("sdist", "archive"):
        if key in p:
            _file(table(p[key], key), key, wheel=False)
    vcs = table(p.get("vcs", {}), "vcs")
    if "url" in vcs:
        _no_space(vcs["url"], "vcs url")
    for key, t in (("vcs", vcs), ("directory", table(p.get("directory", {}), "directory"))):
        if "path" in t:
            path(t["path"], f"{key} path")
    own = p.get("tool", {}).get("envkit", {}) if isinstance(p.get("tool"), dict) else {}
    if isinstance(own, dict) and "cached" in own and not _CACHED.match(_str(own["cached"], "tool.envkit.cached", "path")):
        raise Bad(f"tool.envkit.cached {_show(own['cached'])} is not a file name", "path")


def _file(f: dict, label: str, wheel: bool) -> None:
    """A wheel, sdist or archive: where it is, its hashes and size, its file name."""
    if "url" not in f and "path" not in f:
        raise Bad(f"{label} has neither url nor path", "url")
    if "url" in f:
        url(f["url"], f"{label} url")
    if "path" in f:
        path(f["path"], f"{label} path")
    size = f.get("size", 0)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise Bad(f"{label} size {_show(size)} is not a number of bytes", "table")
    for algo, value in table(f.get("hashes", {}), f"{label} hashes").items():
        digest(algo, value, f"{label} hashes")
    if "name" in f or wheel:
        _file_name(f.get("name") or wheel_filename(f.get("url") or f["path"]), f"{label} name", wheel)


def _pin(v: dict) -> None:
    """A package pinned by version only ([[tool.envkit.versions-only]], an old [[package]]): its
    name and version become a line of pip's requirements file."""
    _required(v, "name", "version")
    name(v["name"])
    version(v["version"])
    if "sha256" in v:
        digest("sha256", v["sha256"], "sha256")


def _tables(tool: dict, prefix: str) -> None:
    """[source], [profile], [env] and [platform]: under [tool.envkit.] in a pylock, at the top of an
    old envkit.lock."""
    with _entry(f"[{prefix}source]"):
        source = table(tool.get("source", {}), f"[{prefix}source]")
        for i, u in enumerate(strings(source.get("index_urls", []), "index_urls"), 1):
            url(u, f"index_urls[{i}]", folder=True)
        for key in ("torch", "channel", "installer"):
            if key in source:
                _str(source[key], key, "table")
    with _entry(f"[{prefix}profile]"):
        profile = table(tool.get("profile", {}), f"[{prefix}profile]")
        if "name" in profile and not NAME_RE.match(_str(profile["name"], "name", "table")):
            raise Bad(f"name {_show(profile['name'])} is not a profile name", "table")
    with _entry(f"[{prefix}env]"):
        for k, v in table(tool.get("env", {}), f"[{prefix}env]").items():
            if not _ENV_NAME.match(k) or not isinstance(v, (str, int, float, bool)):
                raise Bad(f"{_show(k)} = {_show(v)} is not an environment variable", "table")
    with _entry(f"[{prefix}platform]"):
        table(tool.get("platform", {}), f"[{prefix}platform]")


def _target(t: dict, single: bool) -> None:
    for key in ("platform", "build", "device", "torch", "group", "profile"):
        if key in t:
            _str(t[key], key, "table")
    if t.get("marker") is not None:
        marker(t["marker"])
    if "min-driver" in t:
        version(t["min-driver"], "min-driver")
    if not single and t.get("device") == "cuda" and not _CUDA_BUILD.match(str(t.get("build", ""))):
        raise Bad(f"build {_show(t.get('build'))} is not a CUDA build (cuXXX)", "table")


def _old(data: dict) -> None:
    """An envkit.lock of lock_version = 1: [[package]] entries, then the tables."""
    with _entry(""):
        packages = tables(data.get("package", []), "[[package]]")
    for i, p in enumerate(packages, 1):
        with _entry(_label("[[package]]", i, p)):
            _pin(p)
            if "url" in p:
                url(p["url"])
            if "cached" in p and not _CACHED.match(_str(p["cached"], "cached", "path")):
                raise Bad(f"cached {_show(p['cached'])} is not a file name", "path")
    _tables(data, "")
