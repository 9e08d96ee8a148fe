"""The lock's hashes where the installer reports none (uv has no `--report`): taken from the index's
own entries for the wheels that were installed."""

from __future__ import annotations

from pathlib import Path

from envkit.errors import EnvkitError
from envkit.install.act import interp
from envkit.install.act.execute import sha256_file
from envkit.install.index import pages


def index_hashes(venv_python: str, picked: list, deps_index: str | None = None,
                  before: dict[str, str] | None = None) -> dict[str, dict]:
    """name -> {version, sha256, url} from the index's own hashes (PEP 691 `hashes`, PEP 503
    `#sha256=`; a folder's wheels are hashed on disk): the lock's hashes where the installer
    reports none (uv has no `--report`). First the wheels the resolver pinned; with `deps_index`,
    also the dependencies this install added or changed, looked up on that index. A hash is kept
    only where the installed distribution carries the same wheel tags as the file it names."""
    dists = interp.probe(venv_python).dists
    out = {}

    def take(name: str, cand) -> bool:
        d = dists.get(name)
        if not d or d.get("version") != str(cand.version) or not d.get("path"):
            return False
        try:
            wheel = (Path(d["path"]) / "WHEEL").read_text(errors="replace")
        except OSError:
            return False
        tags = {line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")}
        if not tags or tags != set(cand.tags):
            return False
        digest = cand.sha256 or local_sha256(cand.url)
        if digest:
            out[name] = {"version": str(cand.version), "sha256": digest, "url": cand.url}
        return bool(digest)

    for name, cand in picked:
        take(name, cand)
    if deps_index:
        before = before or {}
        for name, d in dists.items():
            if name in out or d.get("editable") or before.get(name) == d.get("version"):
                continue
            try:
                cands = pages.fetch(deps_index, name)
            except EnvkitError:
                continue
            for cand in cands:
                if str(cand.version) == d.get("version") and take(name, cand):
                    break
    return out


def local_sha256(url: str) -> str | None:
    if not url.startswith("file://"):
        return None
    from urllib.parse import unquote, urlsplit

    path = Path(unquote(urlsplit(url).path))
    return sha256_file(path) if path.is_file() else None
