"""Write the tuned profile: a user profile that extends the machine's shipped one, each value
with the measurement that chose it and a source naming the date, envkit, torch and the machine.

The file is written atomically (envkit/fsutil.py), and never over a file the user wrote: the first
line holds a checksum of the rest; a file without it, or whose content no longer matches it (the
user edited it), is left alone with an error naming it.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from envkit import __version__
from envkit.errors import EnvkitError
from envkit.facts import machine_label
from envkit.fsutil import atomic_write_text

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice

MARKER = "# envkit tune sha256="


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a TOML basic string is a JSON string for this text


def render_profile(name: str, base: str, decisions, source: str, torch_version: str | None, description: str) -> str:
    lines = [f"description = {_toml_value(description)}", f"extends = {_toml_value(base)}", ""]
    for d in decisions:
        lines += [f"[{d.section}.{d.key}]", f"value = {_toml_value(d.value)}", f"reason = {_toml_value(d.reason)}",
                  f"source = {_toml_value(source)}", ""]
    if torch_version:
        lines += ["[requires.torch]", f"value = {_toml_value('==' + torch_version)}",
                  f"reason = {_toml_value(f'measured with torch {torch_version}: run envkit tune again after changing torch')}",
                  f"source = {_toml_value(source)}", ""]
    body = "\n".join(lines)
    return f"{MARKER}{hashlib.sha256(body.encode()).hexdigest()}\n{body}"


def written_by_envkit(path: Path) -> bool:
    """True when `path` is a tuned profile exactly as envkit wrote it."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return False
    first, _, body = text.partition("\n")
    return first.startswith(MARKER) and first[len(MARKER):].strip() == hashlib.sha256(body.encode()).hexdigest()


def source_line(facts, model: str, device: TrainDevice) -> str:
    torch_v = getattr(facts.torch, "version", None) or "?"
    return (f"measured: envkit tune {time.strftime('%Y-%m-%d')}, envkit {__version__}, torch {torch_v}, "
            f"{machine_label(facts)}, model {model} on {device}")


def write_profile(path: Path, text: str) -> Path:
    path = Path(path)
    if path.exists() and not written_by_envkit(path):
        raise EnvkitError("this profile was written or edited by you: envkit tune leaves it alone", where=str(path),
                          fix="rename or delete it to let envkit tune write a new one")
    atomic_write_text(path, text)
    return path
