"""Where the wheel (URL and sha256) of an installed distribution is learnt, cheapest first:

1. its `direct_url.json` (PEP 610): pip writes the file's URL and, when it was given one, its hash
   for a wheel installed from a URL or a file (`envkit setup --lock` installs that way);
2. a lock that already names this version: the managed environment's (`envkit setup`) and an
   pylock.machine.toml (or envkit.lock, its name before) or pylock.toml in the current folder;
3. the package indexes the interpreter's pip is configured with (and the managed lock's), read by
   envkit's own index client (install/index/pages.py): the file of this version whose wheel tags are
   the installed distribution's own (its WHEEL file), with the sha256 the index publishes (a folder
   of wheels, pip's find-links, is hashed on disk).

The indexes are read within a time budget (ENVKIT_RECORD_INDEX_SECONDS, 10 s by default; 0 reads
none), in parallel, so an unreachable or slow index never holds a run's start longer than that: what
is not found in time is recorded as missing, by name. A distribution's RECORD file lists the
hashes of the files it installed, not of the wheel, so it cannot give the wheel's sha256."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.install.index import pages
from envkit.install.lock.index_hashes import local_sha256
from envkit.install.lock.read import read

DEFAULT_BUDGET_S = 10.0


def budget_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get("ENVKIT_RECORD_INDEX_SECONDS", DEFAULT_BUDGET_S)))
    except ValueError:
        return DEFAULT_BUDGET_S


def direct_url(dist_path: str | None) -> dict | None:
    """The distribution's direct_url.json (PEP 610), or None (installed from an index)."""
    if not dist_path:
        return None
    try:
        data = json.loads((Path(dist_path) / "direct_url.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def from_direct_url(info: dict | None) -> dict | None:
    """{url, sha256} of a wheel installed from a URL or a file with its hash known."""
    if not info or not str(info.get("url", "")).endswith(".whl"):
        return None
    archive = info.get("archive_info") or {}
    sha = (archive.get("hashes") or {}).get("sha256")
    if not sha and str(archive.get("hash", "")).startswith("sha256="):
        sha = archive["hash"].split("=", 1)[1]
    if not sha:
        sha = local_sha256(info["url"])
    return {"url": info["url"], "sha256": sha} if sha else None


def known_locks(paths: list[Path]) -> dict[tuple[str, str], dict]:
    """(name, version) -> {url, sha256} from locks of one machine that exist among `paths`."""
    out: dict[tuple[str, str], dict] = {}
    for path in paths:
        try:
            lock = read(Path(path))
        except (EnvkitError, OSError):
            continue
        if not lock.single:
            continue
        for p in lock.picks():
            where = p.url or (Path(p.path).resolve().as_uri() if p.path else None)
            if p.sha256 and where:
                out.setdefault((p.name, p.version), {"url": where, "sha256": p.sha256})
    return out


def known_lock_indexes(paths: list[Path]) -> list[str]:
    """The indexes the locks among `paths` name (the managed environment's was installed from them)."""
    out: list[str] = []
    for path in paths:
        try:
            out += read(Path(path)).index_urls
        except (EnvkitError, OSError):
            continue
    return out


def wheel_tags(dist_path: str | None) -> frozenset:
    if dist_path is None:
        return frozenset()
    try:
        text = (Path(dist_path) / "WHEEL").read_text(errors="replace")
    except (OSError, TypeError):
        return frozenset()
    return frozenset(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:"))


def _lookup(index: str, name: str, version: str, tags: frozenset, session=None) -> dict | None:
    from packaging.version import InvalidVersion, Version

    try:
        want = Version(version)
    except InvalidVersion:
        return None
    for cand in pages.fetch(index, name, session=session, version=want):
        if cand.version == want and set(cand.tags) == set(tags):
            digest = cand.sha256 or local_sha256(cand.url)
            if digest:
                return {"url": cand.url, "sha256": digest, "index": index}
    return None


def from_indexes(wanted: dict[str, dict], indexes: list[str], budget: float) -> tuple[dict[str, dict], dict[str, str]]:
    """name -> {url, sha256, index} for the distributions `wanted` (name -> {version, path}), looked
    up on `indexes` in order, within `budget` seconds; and index -> why it could not be read."""
    found: dict[str, dict] = {}
    failed: dict[str, str] = {}
    if budget <= 0 or not indexes or not wanted:
        return found, failed
    lock = threading.Lock()

    def work(name: str, d: dict, session) -> None:
        tags = wheel_tags(d.get("path"))
        if not tags:
            return
        for index in indexes:
            if index in failed:
                continue
            try:
                hit = _lookup(index, name, d["version"], tags, session)
            except EnvkitError as exc:
                with lock:
                    failed[index] = exc.message
                continue
            except Exception as exc:  # noqa: BLE001 - a lookup never stops a run
                with lock:
                    failed[index] = f"{type(exc).__name__}: {exc}"
                continue
            if hit:
                with lock:
                    found[name] = hit
                return

    # Daemon threads: one still waiting for a slow index when the budget is spent is left behind
    # (the run goes on; the process that started it ends with the run).
    # Each thread keeps one requests.Session for its packages: a connection per index host, reused,
    # where a session per lookup made a TLS handshake (and loaded the CA bundle) for every package.
    todo = list(wanted.items())
    threads = []

    def work_through(chunk: list) -> None:
        import requests

        with requests.Session() as session:
            for n, d in chunk:
                work(n, d, session)

    for i in range(min(8, len(todo))):
        chunk = todo[i::8]
        t = threading.Thread(target=work_through, args=(chunk,), daemon=True)
        t.start()
        threads.append(t)
    deadline = time.monotonic() + budget
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    with lock:  # what is kept names no credential (an index URL of pip's configuration may hold one)
        return ({n: {**h, "index": safe_url(h["index"])} for n, h in found.items()},
                {safe_url(i): why.replace(i, safe_url(i)) for i, why in failed.items()})


def safe_url(url: str) -> str:
    """scheme://host[:port]/path of an index URL: no userinfo, whatever characters a password holds
    (one that holds a quote or an '@' can defeat a pattern; urlsplit's host cannot hold them)."""
    from urllib.parse import urlsplit

    if "://" not in url:
        return url
    try:
        u = urlsplit(url)
        port = f":{u.port}" if u.port else ""
    except ValueError:
        return "(an index URL that does not parse)"
    return f"{u.scheme}://{u.hostname or ''}{port}{u.path if '@' not in u.path else ''}"
