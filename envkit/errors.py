"""The one error type users see.

Anything the user can fix (a bad file, a bad option, an unreachable index) is raised as
`EnvkitError`; the CLI turns it into one line on stderr and exit code 2. A traceback is
shown only with `--debug`.
"""

from __future__ import annotations

import unicodedata

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Cc: C0 and C1 controls (ESC, BEL, CSI, DEL); Cf: format characters (bidi overrides, zero-width
# joiners); Zl/Zp: line and paragraph separators; Cs/Co/Cn: surrogates, private use, unassigned
_UNSHOWN = ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn")


def escaped(text: str) -> str:
    """`text` with every control and format character shown as an escape (`\\r`, `\\x1b`,
    `\\u202e`), never interpreted by a terminal: a value from a file someone else wrote cannot
    redraw the screen it is shown on."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch in _NAMED:
            out.append(_NAMED[ch])
        elif unicodedata.category(ch) in _UNSHOWN:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


class EnvkitError(Exception):
    """A problem the user can fix. `where` names the file (and key); `fix` says what to do."""

    exit_code = 2

    def __init__(self, message: str, *, fix: str | None = None, where: str | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.where = where

    def one_line(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        text = escaped(" ".join(text.split()))  # one line, whatever the message held, and no control character
        if self.fix:
            text += f" (fix: {escaped(' '.join(self.fix.split()))})"
        from envkit.redact import strip_userinfo

        return strip_userinfo(f"envkit: error: {text}")  # an index URL named in an error keeps no password


class NoBuildError(EnvkitError):
    """No torch build fits this machine (its driver, its GPU): a fact about the machine, not bad
    input, so the exit code is 1 like a failed doctor check. Raised before anything changes."""

    exit_code = 1
