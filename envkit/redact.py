"""Secrets are never written: one rule for every writer (doctor snapshots and --json, run folders,
envkit.lock, logs, error lines).

Three layers, each enough on its own for the common case:
1. an allow-list: only the environment variables that matter to PyTorch are recorded
   (envkit/data/recorded_env.toml, after torch/utils/collect_env.py);
2. the name rule: a variable whose name holds TOKEN, KEY, SECRET, PASSWORD, CREDENTIAL, ... is
   never recorded, even when its prefix is allowed (HF_TOKEN, PIP_PASSWORD);
3. values: every URL inside any written string loses its userinfo (`scheme://user:pass@host`,
   `scheme://user@host`; http(s), postgres, redis, socks5, git+https, ...) and query parameters
   named like a secret lose their value (`?token=...`).

Needs only the standard library: the trainer's child process imports it.
"""

from __future__ import annotations

import re
from functools import lru_cache

# In code, not in the data file: the name rule must hold even where the file cannot be read.
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION",
                "PRIVATE", "SIGNATURE")

# A URL token (scheme:// up to whitespace or a quote) and the host that must follow a userinfo's
# '@' for it to be one: a name or [IPv6], an optional port, then '/', '?', '#' or the end.
_URL_TOKEN = re.compile(r"\b(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<rest>[^\s\"'<>]+)")
_HOST = re.compile(r"(?:[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*|\[[0-9A-Fa-f:.]+\])(?::\d*)?(?=[/?#]|$)")
# user:pass@host:port without a scheme (a proxy written the short way), as a whole value only
_BARE_USERINFO = re.compile(r"^[^/\s:@]+:[^/\s]*@(?=[^/\s@]+$)")
_SECRET_QUERY = re.compile(r"(?P<key>[?&;](?:[\w.-]*(?:token|key|secret|password|passwd|sig|signature|auth|credential)[\w.-]*)=)[^&#\s\"']*",
                           re.IGNORECASE)
MASK = "***"


def is_secret(name: str) -> bool:
    """The name rule: TOKEN, KEY, SECRET, PASSWORD, CREDENTIAL, ... anywhere in the name."""
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def strip_userinfo(text: str) -> str:
    """Every URL in `text` without its credentials; a secret-named query value masked."""
    if not text or ("@" not in text and "=" not in text):
        return text
    out = _URL_TOKEN.sub(lambda m: m.group("scheme") + _without_userinfo(m.group("rest")), text)
    out = _BARE_USERINFO.sub("", out)
    if "://" in out:
        out = _SECRET_QUERY.sub(lambda m: m.group("key") + MASK, out)
    return out


def _without_userinfo(rest: str) -> str:
    """`rest` is what follows `scheme://`. Users paste passwords unencoded, so a userinfo may hold
    '@', '/', '?' or '#'. Two readings, the strict one first:
    - RFC 3986: the userinfo holds none of '/?#' and ends at its last '@' (a raw '@' in the
      password goes with the rest);
    - an unencoded password: `user:pa/ss@host` (a ':' before the first '/?#' that is not a port)
      ends at the first '@' that a host follows.
    Anything else (an '@' in a path or a query: npm's /@scope/, ?email=a@b.c) is left alone."""
    ats = [i for i, c in enumerate(rest) if c == "@" and _HOST.match(rest, i + 1)]
    strict = [i for i in ats if not any(c in rest[:i] for c in "/?#")]
    if strict:
        return rest[strict[-1] + 1:]
    for i in ats:
        userinfo = rest[:i]
        cut = min(userinfo.find(c) for c in "/?#" if c in userinfo)
        head = userinfo[:cut]
        if ":" in head and not head.partition(":")[2].isdigit():
            return rest[i + 1:]
    return rest


def redact(value):
    """Any JSON-like value with every string (and dict key) passed through `strip_userinfo`."""
    if isinstance(value, str):
        return strip_userinfo(value)
    if isinstance(value, dict):
        return {redact(k) if isinstance(k, str) else k: redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value


@lru_cache(maxsize=1)
def _allow_list() -> tuple[tuple[str, ...], frozenset[str]]:
    from envkit.resources import data_file, load_toml

    data = load_toml(data_file("recorded_env.toml"))
    prefixes = tuple(p for group in data.get("prefixes", {}).values() for p in group["value"])
    names = frozenset(n for group in data.get("names", {}).values() for n in group["value"])
    return prefixes, names


def is_recorded(name: str) -> bool:
    """Whether a variable is on the allow-list (and not secret by name)."""
    if is_secret(name):
        return False
    prefixes, names = _allow_list()
    return name in names or name.startswith(prefixes)


def recorded_env(environ: dict[str, str]) -> dict[str, str]:
    """The variables envkit may write: allow-listed, not secret by name, URLs without credentials."""
    return {k: strip_userinfo(str(v)) for k, v in sorted(environ.items()) if is_recorded(k)}


def safe_env(environ: dict[str, str]) -> dict[str, str]:
    """For variables envkit itself sets (a profile's, written into envkit.lock): no allow-list,
    the name rule and the URL rule only."""
    return {k: strip_userinfo(str(v)) for k, v in environ.items() if not is_secret(k)}
