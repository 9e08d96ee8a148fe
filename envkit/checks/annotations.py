"""GitHub Actions workflow commands for `envkit check --format github`: one annotation per gate
that did not hold (`::error`) or holds with a warning (`::warning`), pointing at the line it was
read from (`file=`, `line=`: the `require` entry in pyproject.toml) where it came from a file.
Every value is escaped as GitHub's runner parses them: in the message `%`, CR and LF; in a
property (title, file) also `:` and `,`. A value cannot start a second command or end this one
(a gate named `X%0A::error::...` stays one line)."""

from __future__ import annotations

from pathlib import Path

LEVELS = {"fail": "error", "warn": "warning", "notice": "notice"}


def _data(text: str) -> str:
    return str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(status: str, title: str, message: str, file: str | None = None, line: int | None = None) -> str:
    """`::error file=F,line=N,title=T::message` for `status` (fail, warn or notice)."""
    props = [f"file={_property(file)}"] if file else []
    props += [f"line={line}"] if file and line else []
    props.append(f"title={_property(title)}")
    return f"::{LEVELS[status]} {','.join(props)}::{_data(message)}"


def line_of(path: str | Path, text: str) -> int | None:
    """The first line of `path` that holds `text` quoted (a gate in `require = [...]`), 1-based."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for quote in ('"', "'"):
        for i, ln in enumerate(lines, 1):
            if f"{quote}{text}{quote}" in ln:
                return i
    return None
