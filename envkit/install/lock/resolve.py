"""Resolve each target of `envkit lock` to its full closure of wheels, without being that machine
and without installing anything.

torch and its companions are picked by torch_pick.py (the same public version on every target,
from each build's own PyTorch index page). Their dependencies come from the
wheels' METADATA, read from the index (PEP 658 where offered, else from the downloaded file),
and are resolved by uv (`uv pip compile --python-platform ... --format pylock.toml`) against the
other indexes (`--index-url` or pip's configuration): a real resolver, run for a platform it
is not on."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from envkit.errors import EnvkitError
from envkit.install.act.execute import fetch_wheel, which_uv
from envkit.install.act.plan import index_args
from envkit.install.index import pages
from envkit.install.lock.index_hashes import local_sha256
from envkit.install.lock.model import Locked, TargetLock, Wheel
from envkit.install.lock.targets import Target, build_index
from envkit.install.lock.torch_pick import TORCH_FAMILY, torch_source
from envkit.redact import strip_userinfo
from envkit.resources import load_toml

if TYPE_CHECKING:
    from envkit.facts.model import Channel


# ---- a wheel's metadata, read from the index --------------------------------------------------

def wheel_requirements(cand: pages.Candidate) -> list[str]:
    """The Requires-Dist lines of a wheel: its PEP 658 METADATA file where the index offers one,
    else the METADATA inside the wheel (a local file, or the download kept in envkit's cache)."""
    from email.parser import Parser

    text = None
    if cand.metadata and "://" in cand.url and not cand.url.startswith("file://"):
        text = _get_text(cand.url + ".metadata")
    if text is None:
        text = _metadata_from_wheel(cand)
    return Parser().parsestr(text).get_all("Requires-Dist") or []


def _get_text(url: str) -> str | None:
    import requests

    try:
        resp = requests.get(url, timeout=pages.timeouts())
    except requests.exceptions.RequestException:
        return None
    return resp.text if resp.status_code == 200 else None


def _metadata_from_wheel(cand: pages.Candidate) -> str:
    import zipfile

    path = Path(_local_path(cand.url)) if cand.url.startswith("file://") else fetch_wheel(cand.url, cand.filename, cand.sha256)
    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        return zf.read(name).decode("utf-8", "replace")


def _local_path(url: str) -> str:
    from urllib.parse import unquote, urlsplit

    return unquote(urlsplit(url).path)


def applicable(requirements: list[str], env: dict[str, str], skip: tuple[str, ...] = TORCH_FAMILY) -> list[str]:
    """The requirements that hold on the target (no extras asked), without their markers, leaving
    out the packages envkit resolves itself. Pure."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    out = []
    for line in requirements:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) in skip:
            continue
        if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
            continue
        req.marker = None
        out.append(str(req))
    return out


# ---- the rest: uv resolves for the target's platform -------------------------------------------

def uv_binary() -> str:
    found = which_uv()
    if found:
        return found
    try:
        import uv  # the `uv` wheel (pip install 'envkit[lock]') ships its binary

        return uv.find_uv_bin()
    except Exception:
        raise EnvkitError("envkit lock resolves the dependencies with uv, which is not installed",
                          fix="pip install 'envkit[lock]' (or pip install uv)")


def uv_compile(requirements: list[str], target: Target, python: str, rest: list[str], find_links: list[str],
               extra_index: str | None = None, constraints: list[str] | None = None) -> list[Locked]:
    """`uv pip compile` for the target's platform; the packages it chose, each with the one wheel
    that fits the target best."""
    from packaging.pylock import Pylock

    if not requirements:
        return []
    uv = uv_binary()
    with tempfile.TemporaryDirectory(prefix="envkit-lock-") as tmp:
        req = Path(tmp) / "requirements.in"
        req.write_text("\n".join(requirements) + "\n")
        out = Path(tmp) / "pylock.toml"
        cmd = [uv, "pip", "compile", str(req), "-o", str(out), "--format", "pylock.toml", "--no-header", "--no-config",
               "--no-build", "--python-version", python, "--python-platform", target.uv_platform, "--quiet"]
        cmd += _index_args(rest, find_links, extra_index)
        if constraints:  # torch's family at the versions envkit picked, for a project's package that needs torch
            pins = Path(tmp) / "constraints.txt"
            pins.write_text("\n".join(constraints) + "\n")
            cmd += ["-c", str(pins)]
        # uv's own settings (UV_INDEX_URL, UV_TORCH_BACKEND, ...) must not change what is resolved;
        # its cache and TLS settings stay
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("UV_") or k in ("UV_CACHE_DIR", "UV_NATIVE_TLS", "UV_HTTP_TIMEOUT")}
        env["MACOSX_DEPLOYMENT_TARGET"] = "14.0"
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        except subprocess.TimeoutExpired:
            raise EnvkitError(f"uv did not resolve {target.name} within 10 minutes", fix="check the index, or try again")
        if proc.returncode != 0:
            why = " ".join((proc.stderr.strip() or proc.stdout.strip() or f"exit code {proc.returncode}").split())
            raise EnvkitError(f"{target.name}: uv cannot resolve the dependencies ({', '.join(requirements)}): "
                              f"{strip_userinfo(why)[:600]}", where="--target",
                              fix="point --index-url at an index that has them for this platform")
        lock = Pylock.from_dict(load_toml(out))
    tags = target.tags(python)
    order = {t: i for i, t in enumerate(tags)}
    picked = []
    for p in lock.packages:
        wheels = []
        for w in p.wheels or []:
            from packaging.utils import parse_wheel_filename

            wtags = {str(t) for t in parse_wheel_filename(w.filename)[-1]}
            rank = min((order[t] for t in wtags if t in order), default=None)
            if rank is not None and w.url and w.hashes.get("sha256"):
                wheels.append((rank, w))
        if not wheels:
            raise EnvkitError(f"{target.name}: uv chose {p.name} {p.version}, which has no wheel (with a sha256) for this platform",
                              where="--target", fix="point --index-url at an index with wheels for it")
        w = min(wheels, key=lambda x: x[0])[1]
        picked.append(Locked(name=str(p.name), version=str(p.version), index="",
                             wheel=Wheel(url=w.url, sha256=w.hashes["sha256"], size=w.size, filename=w.filename)))
    return picked


def _index_args(rest: list[str], find_links: list[str], extra_index: str | None) -> list[str]:
    args = index_args(rest[0])
    for url in rest[1:]:
        args += ["--extra-index-url", url if "://" in url else Path(url).resolve().as_uri()]
    for link in find_links:
        args += ["--find-links", link]
    if extra_index:  # packages only PyTorch's index has (pytorch-triton-rocm): after the others
        args += ["--extra-index-url", extra_index]
    if len(rest) > 1 or extra_index:
        args += ["--index-strategy", "unsafe-best-match"]  # like pip: every index counts
    return args


_PAGES: dict[tuple[str, str], dict[str, pages.Candidate]] = {}  # (index, project) -> its files, for this process


def _page(src: str, name: str, session=None) -> dict[str, pages.Candidate]:
    key = (src, name)
    if key not in _PAGES:
        try:
            _PAGES[key] = {c.filename: c for c in pages.fetch(src, name, session=session)}
        except EnvkitError:
            _PAGES[key] = {}
    return _PAGES[key]


def prefetch_pages(names: list[str], indexes: list[str]) -> None:
    """Every (index, project) page the lock will look at, fetched at once over one session per
    thread (a page is a TLS round trip: 20 of them one after the other were 4 s of an 8 s lock)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import requests

    todo = [(src, n) for n in dict.fromkeys(names) for src in indexes if (src, n) not in _PAGES]
    local = threading.local()

    def one(item: tuple[str, str]) -> None:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        _page(item[0], item[1], local.session)

    if todo:
        with ThreadPoolExecutor(max_workers=min(8, len(todo))) as pool:
            list(pool.map(one, todo))


def _index_of(name: str, filename: str, indexes: list[str], must_look: bool = False) -> tuple[str, pages.Candidate | None]:
    """(the index whose page for `name` lists this file (uv's pylock names none), that page's entry
    for it). One index is taken as it is unless `must_look` (the wheel came from elsewhere)."""
    if len(indexes) == 1 and not must_look:
        return indexes[0], None
    for src in indexes:
        files = _page(src, name)
        if filename in files:
            return src, files[filename]
    return indexes[0], None


def portable(p: Locked, cand: pages.Candidate | None) -> bool:
    """A wheel uv took from this machine (a file:// URL: pip's find-links, a local mirror) gets the URL
    of the index that serves the same file (the same sha256), so the lock installs elsewhere; False
    where no index does (the lock installs only here)."""
    if not p.wheel.url.startswith("file://"):
        return True
    if cand is None or "://" not in cand.url or cand.url.startswith("file://"):
        return False
    if cand.sha256 and cand.sha256 != p.wheel.sha256:
        return False  # another file of the same name: this machine's copy is not the index's
    p.wheel.url = cand.url
    p.wheel.size = p.wheel.size or cand.size
    return True


def index_url_of(source: str) -> str:
    """A source as a lock names it: a URL (a folder of wheels, pip's find-links, as its file:// URL)."""
    return source if not source or "://" in source else Path(source).resolve().as_uri()


def size_of(url: str) -> int | None:
    """A file's size where the index gave none (download.pytorch.org's pages): a HEAD request, or
    the file itself."""
    if url.startswith("file://"):
        p = Path(_local_path(url))
        return p.stat().st_size if p.is_file() else None
    import requests

    try:
        resp = requests.head(url, timeout=pages.timeouts(), allow_redirects=True)
    except requests.exceptions.RequestException:
        return None
    length = resp.headers.get("Content-Length")
    return int(length) if resp.status_code == 200 and length and length.isdigit() else None


# ---- one target, whole ---------------------------------------------------------------------------

def resolve_target(target: Target, family: dict[str, pages.Candidate], python: str, channel: Channel, rest: list[str],
                   find_links: list[str], extras: list[str], torch_index: str | None = None,
                   project: list[str] | None = None) -> TargetLock:
    """`torch_index`: where torch_pick found the family (the build's page, or the source pip's
    configuration gave when that page could not be reached). `project`: the project's own
    requirements (project.py), resolved with torch's, torch's family held at the picked builds."""
    env = target.marker_environment(python)
    reqs: list[str] = []
    for cand in family.values():
        reqs += applicable(wheel_requirements(cand), env)
    reqs += list(extras) + list(project or [])
    reqs = list(dict.fromkeys(reqs))
    src = index_url_of(torch_index or torch_source(target, channel, rest))
    extra_index = build_index(target.build, channel) if target.device in ("rocm", "xpu") else None
    constraints = None
    if project:  # a project's package that requires torch resolves against the build picked, from its index
        constraints = [f"{name}=={cand.version}" for name, cand in family.items()]
        extra_index = extra_index or (src if src not in rest else None)
    out = TargetLock(target=target, torch_index=src)
    for name, cand in family.items():
        out.packages[name] = Locked(name=name, version=str(cand.version), index=src,
                                    wheel=Wheel(url=cand.url, sha256=cand.sha256 or local_sha256(cand.url) or "", size=cand.size,
                                                filename=cand.filename))  # a folder's wheels: hashed on disk
    chosen = [p for p in uv_compile(reqs, target, python, rest, find_links, extra_index, constraints) if p.name not in out.packages]
    indexes = rest + ([extra_index] if extra_index else [])
    if len(indexes) > 1 or any(p.wheel.url.startswith("file://") for p in chosen):
        prefetch_pages([p.name for p in chosen], indexes)
    for p in chosen:
        p.index, cand = _index_of(p.name, p.wheel.filename, indexes, must_look=p.wheel.url.startswith("file://"))
        if not portable(p, cand):
            out.local_only.append(p.wheel.filename)
        out.packages[p.name] = p
    for p in out.packages.values():
        if p.wheel.size is None:
            p.wheel.size = size_of(p.wheel.url)
        if not p.wheel.sha256:
            raise EnvkitError(f"{target.name}: the index gives no sha256 for {p.wheel.filename}", where=strip_userinfo(p.index),
                              fix="use an index that publishes hashes (PEP 503 #sha256= or PEP 691 hashes)")
    torch = family["torch"]
    out.how = (f"torch {torch.version} from {strip_userinfo(src)} (read by envkit"
               + (", PEP 658 metadata" if torch.metadata else ", metadata from the wheel") + "); "
               f"its dependencies resolved by uv for {target.uv_platform}, Python {python}")
    return out
