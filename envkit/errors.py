"""The one error type users see.

Anything the user can fix (a bad file, a bad option, an unreachable index) is raised as
`EnvkitError`; the CLI turns it into one line on stderr and exit code 2. A traceback is
shown only with `--debug`.
"""

from __future__ import annotations


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
        text = " ".join(text.split())  # one line, whatever the message held
        if self.fix:
            text += f" (fix: {' '.join(self.fix.split())})"
        from envkit.redact import strip_userinfo

        return strip_userinfo(f"envkit: error: {text}")  # an index URL named in an error keeps no password


class NoBuildError(EnvkitError):
    """No torch build fits this machine (its driver, its GPU): a fact about the machine, not bad
    input, so the exit code is 1 like a failed doctor check. Raised before anything changes."""

    exit_code = 1
