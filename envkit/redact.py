"""Secrets are never written: one rule for every writer (doctor snapshots and --json, run folders,
pylock.machine.toml, logs, error lines).

Three layers, each enough on its own for the common case:
1. an allow-list: only the environment variables that matter to PyTorch are recorded
   (envkit/data/recorded_env.toml, after torch/utils/collect_env.py);
2. the name rule: a variable whose name holds TOKEN, KEY, SECRET, PASSWORD, CREDENTIAL, ... is
   never recorded, even when its prefix is allowed (HF_TOKEN, PIP_PASSWORD);
3. values: every URL inside any written string loses its userinfo (`scheme://user:pass@host`,
   `scheme://user@host`; http(s), postgres, redis, socks5, git+https, ...) and query parameters
   named like a secret lose their value (`?token=...`);
4. command lines (redact_argv, for every record of a command: exec's config.json, environment.json
   and train.log, run's environment.json, a Slurm job's record): a secret-named flag's or KEY's
   value, and secrets found by the shape of an argument: an HTTP header (`Authorization: Bearer
   X`, `-H 'X-Api-Key: X'`, `--header=Cookie: X`), a JSON value or YAML flow mapping with
   secret-named keys (`{"token": X, "nested": {"password": Y}}`), a quoted secret key in code.

Needs only the standard library: the trainer's child process imports it.
"""

from __future__ import annotations

import re
from functools import lru_cache

from envkit.resources import data_file, load_toml

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
    for i, _strong in sorted(cands, key=lambda c: (not c[1], c[0])):
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
    """For variables envkit itself sets (a profile's, written into pylock.machine.toml): no allow-list,
    the name rule and the URL rule only."""
    return {k: strip_userinfo(str(v)) for k, v in environ.items() if not is_secret(k)}


# ---------------------------------------------------------------- command lines

# A flag or a key whose name holds one of these words names a secret (`--token X`, `--hf-token=X`,
# `--api-key X`, `WANDB_API_KEY=X`, an `X-Api-Key:` header, a JSON key "password"). Names are split
# into words on '-', '_' and '.', and a word must BE one of these (or end in one of the suffixes:
# hftoken, accesstoken), not merely hold it: `--keep-last`, `--monkey-patch`, "keyboard" and
# "tokenizer" are not secrets (is_secret's substring rule, right for environment variables, would
# say MONKEY is). The plural "tokens" is a count in training (max_tokens, tokens_per_step,
# --max-new-tokens), not a credential; "secrets" and "credentials" are still credentials.
_ARG_WORDS = frozenset({"token", "key", "apikey", "secret", "secrets", "password", "passwd", "passphrase", "credential",
                        "credentials", "auth", "authorization", "bearer", "cookie", "cookies", "signature"})
_ARG_SUFFIXES = ("token", "password", "passwd", "secret", "apikey")
_KEY_VALUE = re.compile(r"^(?P<key>[A-Za-z_][\w.-]*)=(?P<value>.*)$", re.DOTALL)
# `Name: value` on a line of its own: an HTTP header (curl -H, --header=...), a YAML line
_NAMED_LINE = re.compile(r"^(?P<head>[ \t]*(?P<name>[A-Za-z_][\w.-]*)[ \t]*:[ \t]*)(?P<value>[^\r\n]*?)[ \t]*$", re.MULTILINE)
# a quoted key and its value anywhere in a text that is not one JSON/YAML value (Python code in
# `-c`, a truncated JSON): `"token": "X"`, `'password': X`, `token="X"`
_QUOTED_PAIR = re.compile(r"""(?P<head>(?P<q>["'])(?P<key>[^"'\\\r\n]{1,100})(?P=q)[ \t]*:[ \t]*"""  # "key":
                          r"""|\b(?P<akey>[A-Za-z_][\w.-]*)[ \t]*=[ \t]*(?=["']))"""  # or key= before a quote
                          r"""(?P<value>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|[^\s,}\]]+)""")
# HTTP authentication schemes (the IANA registry, plus Token and AWS's): the scheme is kept, the
# credentials after it are masked (`Authorization: Bearer ***`)
_AUTH_SCHEMES = frozenset({"basic", "bearer", "digest", "hoba", "mutual", "negotiate", "ntlm", "oauth", "scram-sha-1",
                           "scram-sha-256", "vapid", "token", "aws4-hmac-sha256"})
# a whole argument that is a credential as an Authorization header carries it: `Bearer eyJ...`
_BARE_CREDENTIAL = re.compile(r"^(?P<scheme>Bearer|Basic)[ \t]+[A-Za-z0-9._~+/-]{8,}=*$")


def is_secret_arg(name: str) -> bool:
    """Whether a flag (`--hf-token`), a key (`HF_TOKEN`, `wandb.api_key`, a JSON key) or a header
    name (`X-Api-Key`, `Proxy-Authorization`) names a secret."""
    words = [w for w in re.split(r"[-_.]+", name.lstrip("-").lower()) if w]
    return any(w in _ARG_WORDS or w.endswith(_ARG_SUFFIXES) for w in words)


def _masked_header_value(value: str) -> str:
    scheme, space, rest = value.partition(" ")
    return f"{scheme} {MASK}" if space and rest.strip() and scheme.lower() in _AUTH_SCHEMES else MASK


def redact_text(text: str, depth: int = 0) -> str:
    """One argument (or a flag's value) with its secrets masked by their shape: a JSON value or a
    YAML flow collection (`{token: X, nested: {password: Y}}`) loses the values of its
    secret-named keys, whatever they hold; a `Name: value` line whose name is secret (an HTTP
    header: `Authorization: Bearer X`, `X-Api-Key: X`, `Cookie: ...`; a YAML line) loses its value,
    an authentication scheme kept; a quoted secret key's value elsewhere (code, broken JSON) is
    masked; a bare `Bearer X`; then every URL loses its credentials (strip_userinfo)."""
    if depth > 8 or not text:
        return text
    out = _redact_flow(text, depth)
    if out is None:
        out = _QUOTED_PAIR.sub(_masked_pair, text)
        out = _NAMED_LINE.sub(lambda m: m.group("head") + _masked_header_value(m.group("value"))
                              if m.group("value") and is_secret_arg(m.group("name")) else m.group(0), out)
        out = _BARE_CREDENTIAL.sub(lambda m: f"{m.group('scheme')} {MASK}", out)
    return strip_userinfo(out)


def _masked_pair(m: re.Match) -> str:
    key = m.group("key") or m.group("akey")
    if not is_secret_arg(key):
        return m.group(0)
    v = m.group("value")
    return m.group("head") + (v[0] + MASK + v[0] if v[0] in "\"'" else MASK)


def _redact_flow(text: str, depth: int) -> str | None:
    """The text, a JSON value or a YAML flow collection as a whole, with secret-keyed values masked
    and its other strings redacted in turn (a header in a list, a URL); None when it is not one.
    Only the masked spans change: the rest of the text stays as the user wrote it."""
    start = _ws(text, 0)
    if start == len(text) or text[start] not in "{[":
        return None
    spans: list[tuple[int, int, bool]] = []
    try:
        end = _flow_value(text, start, spans, 0)
    except (ValueError, IndexError):
        return None
    if _ws(text, end) != len(text):
        return None
    out, pos = [], 0
    for a, b, secret in sorted(spans):
        part = text[a:b]
        if secret:
            new = part[0] + MASK + part[0] if part[:1] in ("'", '"') else f'"{MASK}"' if _is_json(text) else MASK
        else:
            new = redact_text(part, depth + 1)
        out += [text[pos:a], new]
        pos = b
    return "".join(out) + text[pos:]


def _is_json(text: str) -> bool:
    import json

    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def _ws(t: str, i: int) -> int:
    while i < len(t) and t[i] in " \t\r\n":
        i += 1
    return i


def _flow_value(t: str, i: int, spans: list, depth: int) -> int:
    """The end of the value at t[i] (JSON or YAML flow). Records (start, end, secret) spans: a
    secret-keyed value whole, any other string scalar's content. ValueError: not one."""
    if depth > 64:
        raise ValueError("too deep")
    if t[i] in "{[":
        close, i = "}" if t[i] == "{" else "]", _ws(t, i + 1)
        while t[i] != close:
            if close == "}":
                k0 = i
                i = _scalar(t, i, ":")
                key = t[k0:i].strip().strip("\"'")
                i = _ws(t, i)
                if t[i] != ":":
                    raise ValueError("a key without ':'")
                v0 = i = _ws(t, i + 1)
                i = _flow_value(t, i, [] if is_secret_arg(key) else spans, depth + 1)
                if is_secret_arg(key):
                    spans.append((v0, i, True))
            else:
                i = _flow_value(t, i, spans, depth + 1)
            i = _ws(t, i)
            if t[i] == ",":
                i = _ws(t, i + 1)
            elif t[i] != close:
                raise ValueError("no ',' between items")
        return i + 1
    end = _scalar(t, i, ",]}")
    if t[i] in "\"'":
        spans.append((i + 1, end - 1, False))
    elif end > i:
        spans.append((i, end, False))
    return end


def _scalar(t: str, i: int, stops: str) -> int:
    """The end of a quoted string ("..." with backslash escapes; '...' with '' or backslash) or of
    a plain scalar, which ends before any of `stops` (trailing blanks left out)."""
    q = t[i]
    if q in "\"'":
        j = i + 1
        while True:
            if t[j] == "\\" or (t[j] == q == "'" and t[j + 1:j + 2] == "'"):  # an escape, or YAML's ''
                j += 2
            elif t[j] == q:
                return j + 1
            else:
                j += 1
    j = i
    while j < len(t) and t[j] not in stops and t[j] not in "{[":
        j += 1
    if j == len(t):
        raise ValueError("an unclosed collection")
    while j > i and t[j - 1] in " \t\r\n":
        j -= 1
    return j


def redact_argv(argv) -> list[str]:
    """A command line as envkit records it (config.json, environment.json, train.log, a Slurm job's
    record): the value of a secret-named flag (`--token X`, `--token=X`) or KEY=VALUE argument
    masked, and every other argument, flag value (`--header=V`, `-H V`, `-HV`) and KEY=VALUE value
    redacted by its shape (redact_text). What runs is the real command line; only what is written
    is masked."""
    out: list[str] = []
    mask_next = False
    for arg in map(str, argv):
        if mask_next and not arg.startswith("--"):
            out.append(MASK)
            mask_next = False
            continue
        mask_next = False
        if arg.startswith("-H") and len(arg) > 2 and not arg.startswith("--"):
            out.append("-H" + redact_text(arg[2:]))  # curl's -HName:value, one argv item
            continue
        if arg.startswith("-") and len(arg) > 1:
            name, eq, value = arg.partition("=")
            if is_secret_arg(name):
                if eq:
                    out.append(f"{name}={MASK}")
                else:
                    out.append(arg)
                    mask_next = True
            elif eq:
                out.append(f"{name}={redact_text(value)}")
            else:
                out.append(strip_userinfo(arg))
            continue
        m = _KEY_VALUE.match(arg)
        if m and is_secret_arg(m.group("key")):
            out.append(f"{m.group('key')}={MASK}")
        elif m:
            out.append(f"{m.group('key')}={redact_text(m.group('value'))}")
        else:
            out.append(redact_text(arg))
    return out
