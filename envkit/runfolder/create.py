"""The one name check for every run folder name a user gives (`--run-id` of `envkit run`, `--name`
of `envkit exec`, a sweep's); the folder itself is made by RunFolder.create (folder.py)."""

from __future__ import annotations

import re

from envkit.errors import EnvkitError
from envkit.fsutil import check_name


def folder_name(value: str, where: str, what: str) -> str:
    """One folder name of letters, digits, '.', '_' and '-', never '.', '..' or empty."""
    check_name(value, where, what)
    if not re.fullmatch(r"[\w.-]+", value):
        raise EnvkitError(f"{what} {value!r} may hold letters, digits, '.', '_' and '-' only", where=where)
    return value
