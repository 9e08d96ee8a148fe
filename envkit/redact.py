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

# scheme://userinfo@ : the userinfo runs to the LAST '@' before the host's end ('/', '?', '#',
# whitespace or a quote), so a raw '@' inside a password is removed with the rest.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s\"'<>@]*(?:@[^/?#\s\"'<>@]*)*)@")
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
    out = _URL_USERINFO.sub(lambda m: m.group("scheme"), text)
    out = _BARE_USERINFO.sub("", out)
    if "://" in out:
        out = _SECRET_QUERY.sub(lambda m: m.group("key") + MASK, out)
    return out


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
