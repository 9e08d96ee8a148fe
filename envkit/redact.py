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

# Where a URL starts (its scheme), and the host that must follow a userinfo's '@' for it to be one:
# a name or [IPv6], an optional port, then what ends a host: '/', '?', '#' or the end of the text
# (a strong end), or a space, a quote, '<', '>', ',', ';', ')' (a weak end: text that goes on).
_SCHEME = re.compile(r"\b(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)")
_HOST = re.compile(r"(?:[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*|\[[0-9A-Fa-f:.]+\])(?::\d*)?(?P<end>[/?#]|$|[\s\"'<>,;)\]}])")
_STRONG_END = ("/", "?", "#", "")
# user:pass@host:port without a scheme (a proxy written the short way), as a whole value only
_BARE_USERINFO = re.compile(r"^(?!.*://)[^/\s:@]+:.*@(?=[^/\s@]+$)", re.DOTALL)
_SECRET_QUERY = re.compile(r"(?P<key>[?&;](?:[\w.-]*(?:token|key|secret|password|passwd|sig|signature|auth|credential)[\w.-]*)=)[^&#\s]*",
                           re.IGNORECASE)
MASK = "***"


def is_secret(name: str) -> bool:
    """The name rule: TOKEN, KEY, SECRET, PASSWORD, CREDENTIAL, ... anywhere in the name."""
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def strip_userinfo(text: str) -> str:
    """Every URL in `text` without its credentials; a secret-named query value masked.

    By structure, not by character class: a URL's userinfo is everything between `scheme://` and
    the '@' that a host follows (RFC 3986 section 3.2.1), so a password may hold any character a
    user pastes: quotes, spaces, '<', '/', '#', '?', '@', percent-escapes. See `_userinfo_end`."""
    if not text or ("@" not in text and "=" not in text):
        return text
    out, pos = [], 0
    for m in _SCHEME.finditer(text):
        if m.start() < pos:
            continue  # inside a userinfo already removed
        out.append(text[pos:m.end()])
        pos = m.end()
        cut = _userinfo_end(text, pos)
        if cut is not None:
            pos = cut + 1  # drop the userinfo and its '@'
    out.append(text[pos:])
    out = "".join(out)
    out = _BARE_USERINFO.sub("", out)
    if "://" in out:
        out = _SECRET_QUERY.sub(lambda m: m.group("key") + MASK, out)
    return out


def _userinfo_end(text: str, start: int) -> int | None:
    """The index of the '@' that ends the userinfo of the URL whose authority starts at `start`
    (just after `scheme://`), or None. The candidates are the '@'s a host follows, on the same line
    and before the next `scheme://`. Users paste passwords unencoded, so two readings, the strict
    one first:
    - RFC 3986: the userinfo holds none of '/?#' and ends at its LAST '@' (a raw '@', a quote or a
      space in the password go with it); a candidate whose host ends the URL ('/', '?', '#' or the
      end of the text) wins over one that text follows;
    - an unencoded `user:password` (a ':' before the first '/?#', not a port): the first candidate
      whose host ends the URL, else the first one.
    Anything else (an '@' in a path or a query: npm's /@scope/, ?email=a@b.c) is left alone."""
    stop = len(text)
    nl = text.find("\n", start)
    if nl != -1:
        stop = nl
    nxt = _SCHEME.search(text, start, stop)
    if nxt is not None:
        stop = nxt.start()
    rest = text[start:stop]
    cands = []
    for i, c in enumerate(rest):
        if c == "@":
            h = _HOST.match(rest, i + 1)
            if h:
                cands.append((i, h.group("end") in _STRONG_END))
    if not cands:
        return None
    strict = [(i, strong) for i, strong in cands if not any(c in rest[:i] for c in "/?#") and _plausible(rest[:i])]
    strong = [i for i, ended in strict if ended]
    if strong:
        return start + strong[-1]
    if strict:
        return start + strict[0][0]
    for i, strong in sorted(cands, key=lambda c: (not c[1], c[0])):
        userinfo = rest[:i]
        cuts = [userinfo.find(c) for c in "/?#" if c in userinfo]
        head = userinfo[:min(cuts)] if cuts else userinfo
        user, colon, pw = head.partition(":")
        if colon and not pw.isdigit() and _plausible(userinfo):
            return start + i
    return None


def _odd(text: str) -> bool:
    return any(ch.isspace() or ch in "\"'<>" for ch in text)


def _plausible(userinfo: str) -> bool:
    """A space, a quote or '<' belongs to a userinfo only inside a password, after `user:`: text
    such as "https://host and mail me@x.com" holds no userinfo."""
    if not _odd(userinfo):
        return True
    user, colon, _ = userinfo.partition(":")
    return bool(colon) and not _odd(user) and "@" not in user


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


# ---------------------------------------------------------------- command lines

# A flag or a KEY=VALUE whose name holds one of these words is a secret (`--token X`,
# `--hf-token=X`, `--password X`, `--api-key X`, `--aws-secret X`, `WANDB_API_KEY=X`): split on
# '-', '_' and '.', so `--keep-last` or `--monkey-patch` are not.
_ARG_WORDS = frozenset({"token", "tokens", "key", "apikey", "secret", "secrets", "password", "passwd",
                        "passphrase", "credential", "credentials", "auth", "cookie", "signature"})
_ARG_SUFFIXES = ("token", "password", "passwd", "secret", "apikey")
_KEY_VALUE = re.compile(r"^(?P<key>[A-Za-z_][\w.-]*)=(?P<value>.*)$", re.DOTALL)


def is_secret_arg(name: str) -> bool:
    """Whether a flag (`--hf-token`) or a key (`HF_TOKEN`, `wandb.api_key`) names a secret."""
    words = [w for w in re.split(r"[-_.]+", name.lstrip("-").lower()) if w]
    return any(w in _ARG_WORDS or w.endswith(_ARG_SUFFIXES) for w in words)


def redact_argv(argv) -> list[str]:
    """A command line as envkit records it (config.json, environment.json, train.log): the value of
    a secret-named flag (`--token X`, `--token=X`) or KEY=VALUE argument masked, and every URL
    without its credentials. What runs is the real command line; only what is written is masked."""
    out: list[str] = []
    mask_next = False
    for arg in map(str, argv):
        if mask_next and not arg.startswith("--"):
            out.append(MASK)
            mask_next = False
            continue
        mask_next = False
        if arg.startswith("-") and len(arg) > 1:
            name, eq, _ = arg.partition("=")
            if is_secret_arg(name):
                if eq:
                    out.append(f"{name}={MASK}")
                else:
                    out.append(arg)
                    mask_next = True
                continue
        else:
            m = _KEY_VALUE.match(arg)
            if m and is_secret_arg(m.group("key")):
                out.append(f"{m.group('key')}={MASK}")
                continue
        out.append(strip_userinfo(arg))
    return out
