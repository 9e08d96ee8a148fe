"""The sources pip itself is configured with (pip.conf, PIP_* variables), read through the real
pip of an interpreter: where torch comes from when PyTorch's index cannot be reached, and the
indexes `envkit lock` resolves the rest against."""

from __future__ import annotations


def pip_sources(python: str) -> tuple[list[str], list[str]]:
    """(index URLs, find-links) that pip is configured with (config files and PIP_* variables),
    as `pip config list` reports them; PyPI when no index-url is set."""
    import subprocess

    indexes, links = [], []
    try:
        out = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    # pip's precedence: a PIP_* variable (":env:") beats a config file's [install] section, which
    # beats [global]. Multi-line values are printed with literal "\n" between the URLs.
    rank = {":env:": 0, "install": 1, "global": 2}
    chosen: dict[str, tuple[int, str]] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        scope, _, opt = key.rpartition(".")
        if scope not in rank or opt not in ("index-url", "extra-index-url", "find-links"):
            continue
        value = value.strip().strip("'\"").replace("\\n", " ")
        if opt not in chosen or rank[scope] < chosen[opt][0]:
            chosen[opt] = (rank[scope], value)
    index_url = chosen.get("index-url", (0, ""))[1].strip() or None
    indexes.extend(chosen.get("extra-index-url", (0, ""))[1].split())
    links.extend(chosen.get("find-links", (0, ""))[1].split())
    indexes.insert(0, index_url or "https://pypi.org/simple")
    return list(dict.fromkeys(indexes)), list(dict.fromkeys(links))
