"""Shell env scripts: a profile's [env] for bash, zsh, fish, .env files and direnv.

Rendered from the templates in top-level `templates/env/` (shipped as envkit._templates/env).
Every value is quoted for its shell, names are checked, newlines refused: a value such as
`$(touch pwned)` stays text. `write_env_scripts()` writes `activate`, `activate.fish`, `.env` and
`.envrc` atomically and records their hashes in `.envkit-manifest`, so a file the user edited
is never overwritten without `force`.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path
from typing import Literal

from envkit.errors import EnvkitError
from envkit.fsutil import atomic_write_text
from envkit.profiles import load_profile
from envkit.resources import shipped_dir

Shell = Literal["bash", "zsh", "fish", "dotenv", "direnv"]
SHELLS: tuple[Shell, ...] = ("bash", "zsh", "fish", "dotenv", "direnv")
TEMPLATE_FOR = {"bash": "activate.sh", "zsh": "activate.sh", "fish": "activate.fish", "dotenv": "dotenv", "direnv": "envrc"}
FILES: dict[str, Shell] = {"activate": "bash", "activate.fish": "fish", ".env": "dotenv", ".envrc": "direnv"}
MANIFEST = ".envkit-manifest"
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --------------------------------------------------------------------------- quoting


def check_env(env: dict[str, str]) -> dict[str, str]:
    """Refuse what no shell can carry safely: bad names, newlines, NUL."""
    out = {}
    for name, value in env.items():
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise EnvkitError("not a valid environment variable name", where=str(name),
                              fix="use letters, digits and _ (not starting with a digit)")
        if name.startswith("_ENVKIT_"):
            raise EnvkitError("names starting with _ENVKIT_ are envkit's own", where=name, fix="rename the variable")
        value = str(value)
        if "\n" in value or "\r" in value or "\0" in value:
            raise EnvkitError("a value with a newline (or NUL) cannot be written to a shell script", where=name,
                              fix="put the value on one line")
        out[name] = value
    return out


def quote_posix(value: str) -> str:
    return shlex.quote(value)


def quote_fish(value: str) -> str:
    """fish single quotes: only \\ and \' are special inside them."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_dotenv(value: str, name: str = "") -> str:
    """Double quotes when nothing in the value can be expanded or unescaped; single quotes (literal
    for python-dotenv, docker compose and a shell sourcing the file) when it holds $ ` \\ or ";
    when it also holds ' : double quotes with \\ \\" \\$ \\` escaped, exact for a POSIX shell or
    direnv's dotenv (python-dotenv keeps such a value inert but reads \\$ as written)."""
    if not any(c in value for c in "$`\\\""):
        return f'"{value}"'
    if "'" not in value:
        return f"'{value}'"
    escaped = "".join("\\" + c if c in "\\\"$`" else c for c in value)
    return f'"{escaped}"'


# --------------------------------------------------------------------------- rendering


def _template(name: str) -> str:
    path = shipped_dir("templates") / "env" / name
    try:
        return path.read_text()
    except OSError as exc:
        raise EnvkitError(f"cannot read the env script template: {exc.strerror}", where=str(path),
                          fix="reinstall envkit (the wheel ships templates/env)")


def _header(profile_name: str, description: str, shell: Shell) -> str:
    desc = " ".join(str(description).split())
    return "\n".join([
        f"# envkit env script ({shell}) for profile {profile_name}: {desc}",
        "# Written by `envkit env --write` / `envkit setup`. Once you edit this file, envkit will not",
        "# overwrite it unless you pass --force. See `envkit profile show " + profile_name + "` for the reasons.",
    ])


def render(shell: Shell, env: dict[str, str], *, profile_name: str, description: str = "",
           venv: Path | None = None) -> str:
    """The script for `shell` (bash, zsh, fish, dotenv, direnv) setting `env`."""
    if shell not in SHELLS:
        raise EnvkitError(f"unknown shell {shell!r}", fix=f"use one of {', '.join(SHELLS)}")
    env = check_env(env)
    if not re.match(r"^[A-Za-z0-9._-]+$", profile_name or ""):
        raise EnvkitError(f"odd profile name {profile_name!r}", where=str(profile_name))
    venv_s = str(Path(venv).absolute()) if venv else None
    if venv_s and ("\n" in venv_s or "\r" in venv_s):
        raise EnvkitError("the venv path holds a newline", where=venv_s)
    parts = {"HEADER": _header(profile_name, description, shell)}
    if shell in ("bash", "zsh"):
        parts.update(_posix_parts(env, profile_name, venv_s))
    elif shell == "fish":
        parts.update(_fish_parts(env, profile_name, venv_s))
    elif shell == "dotenv":
        parts["SET"] = "\n".join(f"{k}={quote_dotenv(v, k)}" for k, v in env.items())
    else:  # direnv: bash syntax; direnv restores everything itself on leaving the folder
        parts["SET"] = "\n".join(f"export {k}={quote_posix(v)}" for k, v in env.items())
        parts["VENV_ACTIVATE"] = "" if not venv_s else (
            f"if [ -d {quote_posix(venv_s)} ]; then\n"
            f"    export VIRTUAL_ENV={quote_posix(venv_s)}\n"
            f"    PATH_add {quote_posix(venv_s + '/bin')}\n"
            f"fi\n")
    text = _template(TEMPLATE_FOR[shell])
    # A placeholder alone on its line that renders empty takes its line with it.
    text = re.sub(r"^[ \t]*@([A-Z_]+)@[ \t]*\n", lambda m: "" if not parts.get(m.group(1)) else m.group(0), text, flags=re.M)
    text = re.sub(r"@([A-Z_]+)@", lambda m: parts.get(m.group(1), ""), text)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip("\n") + "\n"


def _posix_parts(env: dict[str, str], profile: str, venv: str | None) -> dict[str, str]:
    set_lines, restore = [], []
    for k, v in env.items():
        set_lines += [
            f'if [ -n "${{{k}+x}}" ]; then _ENVKIT_OLD_{k}=${k}; _ENVKIT_HAD_{k}=1; '
            f"else unset _ENVKIT_OLD_{k} _ENVKIT_HAD_{k}; fi",
            f"export {k}={quote_posix(v)}",
        ]
        restore += [
            f'    if [ -n "${{_ENVKIT_HAD_{k}:-}}" ]; then export {k}="$_ENVKIT_OLD_{k}"; else unset {k}; fi',
            f"    unset _ENVKIT_OLD_{k} _ENVKIT_HAD_{k}",
        ]
    parts = {"SET": "\n".join(set_lines), "RESTORE": "\n".join(restore) or "    :", "PROFILE": quote_posix(profile),
             "VENV_ACTIVATE": "", "VENV_DEACTIVATE": ""}
    if venv:
        q = quote_posix(venv)
        qa = quote_posix(venv + "/bin/activate")
        parts["VENV_ACTIVATE"] = (
            f'if [ "${{VIRTUAL_ENV:-}}" != {q} ] && [ -f {qa} ]; then\n'
            f"    . {qa}\n"
            f"    _ENVKIT_VENV=1\n"
            f"fi\n")
        parts["VENV_DEACTIVATE"] = (
            '    if [ -n "${_ENVKIT_VENV:-}" ]; then\n'
            "        if command -v deactivate >/dev/null 2>&1; then deactivate; fi\n"
            "        unset _ENVKIT_VENV\n"
            "    fi")
    return parts


def _fish_parts(env: dict[str, str], profile: str, venv: str | None) -> dict[str, str]:
    set_lines, restore = [], []
    for k, v in env.items():
        set_lines += [
            f"if set -q {k}",
            f"    set -g _ENVKIT_OLD_{k} ${k}",
            f"    set -g _ENVKIT_HAD_{k} 1",
            "else",
            f"    set -e -g _ENVKIT_OLD_{k}",
            f"    set -e -g _ENVKIT_HAD_{k}",
            "end",
            f"set -gx {k} {quote_fish(v)}",
        ]
        restore += [
            f"    if set -q _ENVKIT_HAD_{k}",
            f"        set -gx {k} $_ENVKIT_OLD_{k}",
            "    else",
            f"        set -e -g {k}",
            "    end",
            f"    set -e -g _ENVKIT_OLD_{k}",
            f"    set -e -g _ENVKIT_HAD_{k}",
        ]
    parts = {"SET": "\n".join(set_lines), "RESTORE": "\n".join(restore), "PROFILE": quote_fish(profile),
             "VENV_ACTIVATE": "", "VENV_DEACTIVATE": ""}
    if venv:
        q = quote_fish(venv)
        qa = quote_fish(venv + "/bin/activate.fish")
        parts["VENV_ACTIVATE"] = (
            f'if test "$VIRTUAL_ENV" != {q}; and test -f {qa}\n'
            f"    source {qa}\n"
            f"    set -g _ENVKIT_VENV 1\n"
            f"end\n")
        parts["VENV_DEACTIVATE"] = (
            "    if set -q _ENVKIT_VENV\n"
            "        functions -q deactivate; and deactivate\n"
            "        set -e -g _ENVKIT_VENV\n"
            "    end")
    return parts


# --------------------------------------------------------------------------- writing


def _sha(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def _read_manifest(directory: Path) -> dict:
    try:
        data = json.loads((directory / MANIFEST).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, json.JSONDecodeError):
        return {}


def write_env_scripts(directory: Path, profile, venv: Path | None, force: bool) -> list[Path]:
    """Write activate, activate.fish, .env and .envrc for `profile` (a Profile or a name) into
    `directory`; return their paths. A file changed since envkit wrote it (or not written by
    envkit) is left alone and raises EnvkitError naming it, unless `force`."""
    if isinstance(profile, str):
        profile = load_profile(profile)
    directory = Path(directory)
    manifest = _read_manifest(directory)
    known = manifest.get("files", {}) if isinstance(manifest.get("files"), dict) else {}
    rendered = {name: render(shell, profile.env, profile_name=profile.name, description=profile.description, venv=venv)
                for name, shell in FILES.items()}
    # Check every file before writing any, so a refusal leaves the folder as it was.
    for name, text in rendered.items():
        path = directory / name
        if force or not path.exists():
            continue
        try:
            current = path.read_bytes()
        except OSError as exc:
            raise EnvkitError(f"cannot read: {exc.strerror}", where=str(path))
        if current == text.encode() or known.get(name) == _sha(current):
            continue
        why = "was edited since envkit wrote it" if name in known else "was not written by envkit"
        raise EnvkitError(f"{why}: not overwriting it", where=str(path),
                          fix="move your changes elsewhere, or pass --force to overwrite")
    written = []
    for name, text in rendered.items():
        path = directory / name
        if not (path.exists() and path.read_bytes() == text.encode()):
            atomic_write_text(path, text)
        written.append(path)
    new_manifest = {"profile": profile.name, "files": {name: _sha(text) for name, text in rendered.items()}}
    atomic_write_text(directory / MANIFEST, json.dumps(new_manifest, indent=2) + "\n")
    return written
