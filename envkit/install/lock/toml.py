"""The one TOML writer of envkit's locks. pylock.machine.toml and pylock.toml have one shape, PEP 751's
(https://peps.python.org/pep-0751/): top-level keys, then [[packages]] (a package's wheels one per
line), then the [tool.*] tables. Written by hand for exactly this shape (the standard library
reads TOML but does not write it); tomllib reads it back, and packaging.pylock validates it where
it is installed (packaging 26.1+) before anything is written."""

from __future__ import annotations

import json
import re
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.fsutil import atomic_write_text


def _v(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_k(k)} = {_v(v)}" for k, v in value.items() if v is not None) + " }"
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, dict) for v in value):  # a list of tables: one per line
            return "[\n" + "".join(f"  {_v(v)},\n" for v in value) + "]"
        return "[" + ", ".join(_v(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a TOML basic string


def _k(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _table(prefix: str, d: dict, lines: list[str]) -> None:
    scalars = {k: v for k, v in d.items() if not isinstance(v, dict) and v is not None}
    if scalars or not d:
        lines.append(f"[{prefix}]")
        lines += [f"{_k(k)} = {_v(v)}" for k, v in scalars.items()]
        lines.append("")
    for k, v in d.items():
        if isinstance(v, dict):
            _table(f"{prefix}.{_k(k)}", v, lines)


def dumps(doc: dict, header: list[str]) -> str:
    """`header`: comment lines (without '#') saying what wrote the file and how it is used."""
    lines = [f"# {h}".rstrip() for h in header] + [""]
    lines += [f"{_k(k)} = {_v(v)}" for k, v in doc.items() if k not in ("packages", "tool") and v is not None]
    if not doc.get("packages"):  # PEP 751 requires the key: a lock whose every package is pinned by version only
        lines.append("packages = []")
    lines.append("")
    for p in doc.get("packages", []):
        lines.append("[[packages]]")
        lines += [f"{_k(k)} = {_v(v)}" for k, v in p.items() if v is not None]
        lines.append("")
    for k, v in (doc.get("tool") or {}).items():
        _table(f"tool.{_k(k)}", v, lines)
    return "\n".join(lines).rstrip() + "\n"


def validate(text: str, where: str) -> None:
    """packaging.pylock's own validation, where packaging has it (an envkit bug if it fails: say
    so plainly). Without it (packaging < 26.1), pylock.machine.toml is still written: its shape is fixed."""
    try:
        from packaging.pylock import Pylock, PylockValidationError
    except ImportError:
        return
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # pyright: ignore[reportMissingImports] - tomli is installed on Python 3.10 only (its marker in pyproject)
    try:
        Pylock.from_dict(tomllib.loads(text))
    except (PylockValidationError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise EnvkitError(f"the lock envkit made is not valid PEP 751 ({exc}); nothing was written", where=where,
                          fix="report this as an envkit bug")


def write(path: Path, doc: dict, header: list[str]) -> bool:
    """Atomically; False (nothing touched) when the file already says the same."""
    text = dumps(doc, header)
    validate(text, str(path))
    if path.is_file() and path.read_text(errors="replace") == text:
        return False
    atomic_write_text(path, text)
    return True
