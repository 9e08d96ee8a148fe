"""Finding profile files (project, user, shipped) and parsing one into checked settings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from envkit.errors import EnvkitError
from envkit.profiles.schema import (NAME_RE, ENV_NAME_RE, REQUIRE_KEYS, SCHEMA, SECTIONS, SETTING_KEYS, TOP_KEYS,
                                    did_you_mean)
from envkit.resources import shipped_dir, user_dir
# where a profile file was found: ./profiles, the user's folder, or envkit's own (search_dirs, highest priority first)
ProfileOrigin = Literal["project", "user", "shipped"]


@dataclass
class ProfileInfo:
    name: str
    description: str
    path: Path
    origin: ProfileOrigin
    extends: str | None = None
    overrides: list[Path] = field(default_factory=list)  # lower-priority files of the same name

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "path": str(self.path), "origin": self.origin,
                "extends": self.extends, "overrides": [str(p) for p in self.overrides]}


def search_dirs() -> list[tuple[ProfileOrigin, Path]]:
    """(origin, folder), highest priority first. A folder that is the shipped one counts once."""
    shipped = shipped_dir("profiles")
    out: list[tuple[ProfileOrigin, Path]] = []
    seen: set[Path] = set()
    dirs: tuple[tuple[ProfileOrigin, Path], ...] = (("project", Path.cwd() / "profiles"), ("user", user_dir()), ("shipped", shipped))
    for origin, d in dirs:
        try:
            key = d.resolve()
        except OSError:
            key = d
        if key in seen:
            continue
        if origin != "shipped" and key == safe_resolve(shipped):
            continue  # running inside envkit's own checkout: ./profiles is the shipped folder
        seen.add(key)
        out.append((origin, d))
    return out


def safe_resolve(p: Path) -> Path:
    try:
        return p.resolve()
    except OSError:
        return p


def profile_candidates(name: str) -> list[tuple[ProfileOrigin, Path]]:
    return [(origin, d / f"{name}.toml") for origin, d in search_dirs() if (d / f"{name}.toml").is_file()]


def list_profiles() -> list[ProfileInfo]:
    """Every profile found, one per name (the highest-priority file), sorted by name."""
    found: dict[str, ProfileInfo] = {}
    for origin, d in search_dirs():
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.toml")):
            name = path.stem
            if not NAME_RE.match(name):
                continue
            if name in found:
                found[name].overrides.append(path)
                continue
            try:
                raw = _read(path)
            except EnvkitError as exc:  # one broken file must not hide the others
                found[name] = ProfileInfo(name, f"(broken: {exc.one_line().removeprefix('envkit: error: ')})", path, origin)
                continue
            found[name] = ProfileInfo(name, str(raw.get("description") or ""), path, origin,
                                      raw.get("extends") if isinstance(raw.get("extends"), str) else None)
    # A terse user profile without a description says what it extends.
    for info in found.values():
        if not info.description and info.extends:
            info.description = f"{info.extends}, adjusted ({info.origin} profile)"
    return [found[k] for k in sorted(found, key=_order)]


_FIRST = ("base", "cpu", "cuda", "cuda-hopper", "apple-silicon")
_TIERS = ("", "-pro", "-max", "-ultra")


def _order(name: str) -> tuple:
    """base, cpu, cuda..., then the M chips by generation and tier, then the rest by name."""
    if name in _FIRST:
        return (0, _FIRST.index(name), 0, name)
    m = re.fullmatch(r"m(\d+)(-pro|-max|-ultra)?", name)
    if m:
        return (1, int(m.group(1)), _TIERS.index(m.group(2) or ""), name)
    return (2, 0, 0, name)


def all_profile_names() -> set[str]:
    return {p.stem for _, d in search_dirs() if d.is_dir() for p in d.glob("*.toml")}


_READ_CACHE: dict[tuple[Path, float, int], dict] = {}


def _read(path: Path) -> dict:
    try:
        st = path.stat()
        key = (path, st.st_mtime, st.st_size)
    except OSError as exc:
        raise EnvkitError(f"cannot read profile: {exc.strerror}", where=str(path))
    if key in _READ_CACHE:
        return _READ_CACHE[key]
    try:
        try:
            import tomllib
        except ModuleNotFoundError:  # Python < 3.11
            import tomli as tomllib  # pyright: ignore[reportMissingImports] - tomli is installed on Python 3.10 only (its marker in pyproject)
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise EnvkitError(f"cannot read profile: {exc.strerror}", where=str(path))
    except ValueError as exc:  # tomllib.TOMLDecodeError, UnicodeDecodeError
        raise EnvkitError(f"not valid TOML: {exc}", where=str(path), fix="fix the TOML syntax (https://toml.io)")
    _READ_CACHE[key] = data
    return data


# --------------------------------------------------------------------------- parsed settings


@dataclass
class Setting:
    value: Any  # as declared (may hold "{expr}")
    reason: str = ""
    source: str = ""
    origin: str = ""  # the profile that declared it
    path: str = ""
    otherwise: dict | None = None  # [requires] only: overrides applied when unmet


@dataclass
class ProfileFile:
    name: str
    path: Path
    origin: ProfileOrigin
    description: str
    extends: str | None
    settings: dict[str, dict[str, Setting]]


def parse_profile_file(name: str, path: Path, origin: ProfileOrigin) -> ProfileFile:
    raw = _read(path)
    where = str(path)
    for key in raw:
        if key not in TOP_KEYS:
            raise EnvkitError(f"unknown key {key!r}{did_you_mean(key, TOP_KEYS)}", where=where,
                              fix=f"top-level keys are {', '.join(TOP_KEYS)}")
    if "name" in raw and raw["name"] != name:
        raise EnvkitError(f"name = {raw['name']!r} but the file is {name}.toml", where=where,
                          fix="rename the file or drop the name key (the file name is the profile's name)")
    extends = raw.get("extends")
    if extends is not None and (not isinstance(extends, str) or not NAME_RE.match(extends)):
        raise EnvkitError(f"extends must be a profile name, not {extends!r}", where=where)
    desc = raw.get("description", "")
    if not isinstance(desc, str):
        raise EnvkitError("description must be a string", where=where)
    settings: dict[str, dict[str, Setting]] = {}
    for section in SECTIONS:
        table = raw.get(section, {})
        if not isinstance(table, dict):
            raise EnvkitError(f"[{section}] must be a table", where=where)
        out: dict[str, Setting] = {}
        for key, item in table.items():
            kwhere = f"{where}: [{section}] {key}"
            if section in SCHEMA and key not in SCHEMA[section]:
                raise EnvkitError(f"unknown setting{did_you_mean(key, SCHEMA[section])}", where=kwhere,
                                  fix=f"[{section}] keys are {', '.join(SCHEMA[section])}")
            if section == "env" and not ENV_NAME_RE.match(key):
                raise EnvkitError("not a valid environment variable name", where=kwhere,
                                  fix="use letters, digits and _ (not starting with a digit)")
            if section == "requires" and key not in REQUIRE_KEYS:
                raise EnvkitError(f"unknown requirement{did_you_mean(key, REQUIRE_KEYS)}", where=kwhere,
                                  fix=f"[requires] keys are {', '.join(REQUIRE_KEYS)}")
            if isinstance(item, dict):
                for k in item:
                    if k not in SETTING_KEYS:
                        raise EnvkitError(f"unknown field {k!r}{did_you_mean(k, SETTING_KEYS)}", where=kwhere,
                                          fix="a setting is {value, reason, source}")
                if "value" not in item and not (section == "requires" and "gate" in item):
                    raise EnvkitError("a setting table needs a value", where=kwhere,
                                      fix='write KEY = { value = ..., reason = "...", source = "..." }')
                s = Setting(item.get("value"), str(item.get("reason", "")), str(item.get("source", "")), name, where)
                if section == "requires":
                    if "gate" in item:
                        s.value, gate_source = _gate_spec(key, item["gate"], kwhere)
                        s.source = s.source or gate_source
                    other = item.get("otherwise")
                    if other is not None:
                        s.otherwise = _check_otherwise(other, kwhere)
                elif "otherwise" in item or "gate" in item:
                    raise EnvkitError("gate/otherwise only belong in [requires]", where=kwhere)
            else:
                s = Setting(item, "", "", name, where)
            if section == "requires":
                _check_spec(str(s.value), kwhere)
                s.value = str(s.value)
            elif section == "env":
                if isinstance(s.value, bool) or not isinstance(s.value, (str, int, float)):
                    raise EnvkitError(f"an environment value must be a string or a number, not {s.value!r}", where=kwhere,
                                      fix='quote it: "1"')
                if isinstance(s.value, str) and ("\n" in s.value or "\r" in s.value or "\0" in s.value):
                    raise EnvkitError("an environment value cannot hold a newline", where=kwhere)
            out[key] = s
        settings[section] = out
    return ProfileFile(name, path, origin, desc, extends, settings)


def _gate_spec(key: str, gate: str, where: str) -> tuple[str, str]:
    """[requires] macos = { gate = "bf16.mps" } -> (">=14.0", source) from envkit/data/gates.toml."""
    from envkit.checks.gates import gates

    node: Any = gates()
    for part in str(gate).split("."):
        if not isinstance(node, dict) or part not in node:
            raise EnvkitError(f"unknown gate {gate!r}", where=where, fix="name a table of envkit/data/gates.toml, e.g. bf16.mps")
        node = node[part]
    for k in (key, f"min_{key}"):
        if isinstance(node, dict) and k in node:
            return f">={node[k]}", str(node.get("source", f"envkit/data/gates.toml [{gate}]"))
    raise EnvkitError(f"gate {gate!r} has no {key} or min_{key}", where=where)


def _check_spec(spec: str, where: str) -> None:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        SpecifierSet(spec)
    except InvalidSpecifier:
        raise EnvkitError(f"not a version specifier: {spec!r}", where=where, fix='write e.g. ">=14.0"')


def _check_otherwise(other: Any, where: str) -> dict:
    if not isinstance(other, dict):
        raise EnvkitError("otherwise must be a table like { train.precision = \"fp32\" }", where=where)
    for section, table in other.items():
        if section not in SCHEMA and section != "env":
            raise EnvkitError(f"otherwise: unknown section {section!r}", where=where)
        if not isinstance(table, dict):
            raise EnvkitError(f"otherwise.{section} must be a table", where=where)
        for key in table:
            if section in SCHEMA and key not in SCHEMA[section]:
                raise EnvkitError(f"otherwise: unknown setting {section}.{key}{did_you_mean(key, SCHEMA[section])}", where=where)
    return other
