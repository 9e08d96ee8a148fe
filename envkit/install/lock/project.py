"""The project a lock belongs to, and what an environment holds for it.

A lock records the project beside it (the pyproject.toml in the lock's folder) in
[tool.envkit.project]: its name and its optional groups (extras). The lock holds the machine's
torch and what was installed with it; the project says the rest. In an environment, the project
itself, its dependencies and every extra installed as such (each of its requirements installed, at
a version it allows), with all their dependencies, are the project's own: not in the lock, and not
drift. So `pip install -e '.[test]'` after `envkit setup` leaves `envkit check --lock` green, while
a locked package at another version, or a package nothing asked for, is still drift."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.install.lock.single import canon
from envkit.resources import load_toml


def read_project(folder: Path) -> dict | None:
    """{"name", "extras"} of the pyproject.toml in `folder`, None where there is no [project] with a
    name (or the file cannot be read)."""
    path = Path(folder) / "pyproject.toml"
    if not path.is_file():
        return None
    try:
        project = load_toml(path).get("project")
    except Exception:  # a broken pyproject.toml is the project's business, not the lock's
        return None
    if not isinstance(project, dict) or not isinstance(project.get("name"), str):
        return None
    extras = project.get("optional-dependencies")
    return {"name": canon(project["name"]),
            "extras": sorted(canon(e) for e in extras) if isinstance(extras, dict) else []}


def _requirements(lines: list[str], markers: dict[str, str], extras: tuple[str, ...]):
    """The requirements that hold here with these extras asked for (none: the plain ones)."""
    from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
    from packaging.requirements import InvalidRequirement, Requirement

    for line in lines or []:
        try:
            req = Requirement(line)
            if req.marker is not None and not any(req.marker.evaluate({**markers, "extra": e}) for e in ("",) + extras):
                continue
        except (InvalidRequirement, InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
            continue
        yield req


def _extra_only(lines: list[str], markers: dict[str, str], extra: str):
    """An extra's own requirements: those that hold with it asked for and not without it."""
    plain = {str(r) for r in _requirements(lines, markers, ())}
    return [r for r in _requirements(lines, markers, (extra,)) if str(r) not in plain]


def installed_for(project: dict, dists: dict[str, dict], markers: dict[str, str]) -> dict | None:
    """{"name", "extras", "packages": {name: version}} that the environment holds for the project:
    its extras installed as such, and every distribution the project, its dependencies and those
    extras reach (the project itself included where it is not editable). None where the project
    is not installed here."""
    from packaging.utils import canonicalize_name

    name = canon(str(project.get("name") or ""))
    if name not in dists:
        return None
    requires = dists[name].get("requires") or []
    installed_extras = []
    for extra in project.get("extras") or []:
        own = _extra_only(requires, markers, extra)
        if own and all(canonicalize_name(r.name) in dists
                       and r.specifier.contains(dists[canonicalize_name(r.name)]["version"], prereleases=True) for r in own):
            installed_extras.append(extra)
    seen: set[tuple[str, tuple[str, ...]]] = set()
    todo = [(name, tuple(installed_extras))]
    while todo:
        key, extras = todo.pop()
        if (key, extras) in seen or key not in dists:
            continue
        seen.add((key, extras))
        for req in _requirements(dists[key].get("requires") or [], markers, extras):
            dep = canonicalize_name(req.name)
            if dep in dists:
                todo.append((dep, tuple(sorted(canon(e) for e in req.extras))))
    reached = {key for key, _ in seen}
    packages = {k: dists[k]["version"] for k in sorted(reached) if not dists[k].get("editable")}
    return {"name": name, "extras": installed_extras, "packages": packages}


# ---- what `envkit lock` locks of the project -------------------------------------------------------

REQUIREMENTS_FILE_MAX = 1 << 20


@dataclass(frozen=True)
class ProjectAsk:
    """The parts of a project a lock holds: `[project] dependencies` (unless `no_project`), the
    extras and PEP 735 dependency groups named, and requirements files (flags, or [tool.envkit.lock])."""

    extras: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()
    no_project: bool = False


def ask_of(folder: Path, extras: tuple[str, ...], groups: tuple[str, ...], requirements: tuple[str, ...], no_project: bool) -> ProjectAsk:
    """The flags, else the project's [tool.envkit.lock] table (extras, groups, requirements)."""
    table = _tool_lock(Path(folder) / "pyproject.toml")
    def pick(given: tuple[str, ...], key: str) -> tuple[str, ...]:
        if given:
            return given
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise EnvkitError(f"expected a list of strings, got {value!r}", where=f"{folder / 'pyproject.toml'}: tool.envkit.lock.{key}",
                              fix=f'e.g. {key} = ["name"]')
        return tuple(value)
    return ProjectAsk(pick(extras, "extras"), pick(groups, "groups"), pick(requirements, "requirements"), no_project)


def _tool_lock(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        table = ((load_toml(path).get("tool") or {}).get("envkit") or {}).get("lock") or {}
    except Exception as exc:  # noqa: BLE001 - tomllib's errors and OSError: one line naming the file
        raise EnvkitError(f"cannot read it: {exc}", where=str(path), fix="fix the TOML") from None
    if not isinstance(table, dict):
        raise EnvkitError("tool.envkit.lock is not a table", where=str(path), fix='[tool.envkit.lock]\nextras = ["train"]')
    return table


def project_requirements(folder: Path, ask: ProjectAsk) -> tuple[list[str], list[str]]:
    """(requirement strings, what they came from, for people) of the project in `folder`: each is
    checked by packaging, and a name that is not there (an extra, a group, a file) is one line."""
    from packaging.requirements import InvalidRequirement, Requirement

    folder = Path(folder)
    path = folder / "pyproject.toml"
    doc = load_toml(path) if path.is_file() else {}
    found = doc.get("project")
    project: dict = found if isinstance(found, dict) else {}
    out: list[tuple[str, str]] = []
    said: list[str] = []
    if not ask.no_project and project:
        out += [(r, f"{path}: project.dependencies") for r in project.get("dependencies") or []]
        if project.get("dependencies"):
            said.append("[project] dependencies")
    optional = project.get("optional-dependencies") or {}
    for extra in ask.extras:
        found = next((k for k in optional if canon(k) == canon(extra)), None)
        if found is None:
            raise EnvkitError(f"the project has no extra {extra!r} (it has: {', '.join(optional) or 'none'})",
                              where=f"{path}: project.optional-dependencies", fix="name one of its extras")
        out += [(r, f"{path}: project.optional-dependencies.{found}") for r in optional[found]]
        said.append(f"extra {found}")
    groups = doc.get("dependency-groups") or {}
    for group in ask.groups:
        out += [(r, f"{path}: dependency-groups.{group}") for r in _group(groups, group, path, ())]
        said.append(f"group {group}")
    for req_file in ask.requirements:
        out += _requirements_file(folder / req_file, ())
        said.append(req_file)
    lines = []
    for text, where in out:
        if not isinstance(text, str):
            raise EnvkitError(f"{text!r} is not a requirement string", where=where, fix='e.g. "tqdm>=4"')
        try:
            Requirement(text)
        except InvalidRequirement as exc:
            raise EnvkitError(f"{text!r} is not a requirement: {exc}", where=where, fix='write it as PEP 508 says, e.g. "tqdm>=4"') from None
        lines.append(text)
    return list(dict.fromkeys(lines)), said


def _group(groups: dict, name: str, path: Path, seen: tuple[str, ...]) -> list[str]:
    """PEP 735: a group's requirements, its {include-group = "..."} entries expanded, a cycle refused."""
    found = next((k for k in groups if canon(k) == canon(name)), None)
    if found is None:
        raise EnvkitError(f"the project has no dependency group {name!r} (it has: {', '.join(groups) or 'none'})",
                          where=f"{path}: dependency-groups", fix="name one of its groups (PEP 735)")
    if found in seen:
        raise EnvkitError(f"dependency group {found!r} includes itself ({' -> '.join((*seen, found))})",
                          where=f"{path}: dependency-groups", fix="remove the include-group that closes the circle")
    out = []
    for item in groups[found] or []:
        if isinstance(item, dict) and isinstance(item.get("include-group"), str):
            out += _group(groups, item["include-group"], path, (*seen, found))
        else:
            out.append(item)
    return out


def _requirements_file(path: Path, seen: tuple[Path, ...]) -> list[tuple[str, str]]:
    """pip's requirements file: one requirement a line, comments, `-r other.txt` followed; pip's
    options (`-i`, `--hash`, ...) are not requirements and are left to the lock's own sources."""
    if path.resolve() in seen or len(seen) > 20:
        raise EnvkitError("a requirements file includes itself", where=str(path), fix="remove the -r line that closes the circle")
    try:
        with open(path, "rb") as fh:
            text = fh.read(REQUIREMENTS_FILE_MAX + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvkitError(f"cannot read it: {getattr(exc, 'strerror', None) or exc}", where=str(path),
                          fix="give a requirements file of the project (-r FILE, relative to the lock's folder)") from None
    if len(text) > REQUIREMENTS_FILE_MAX:
        raise EnvkitError("over 1 MiB: not a requirements file", where=str(path), fix="give the project's requirements file")
    out = []
    for n, raw in enumerate(text.replace("\\\n", "").splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ", "-c ", "--constraint ")):
            if line.startswith(("-r ", "--requirement ")):
                out += _requirements_file(path.parent / line.split(None, 1)[1], (*seen, path.resolve()))
            continue
        if line.startswith("-"):
            continue
        out.append((line.split(" --hash", 1)[0].strip(), f"{path}:{n}"))
    return out


def torch_family_asks(lines: list[str], family: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """(the requirements without torch's family, {name: specifier} the project asks of the family):
    the family's builds are envkit's to pick, each checked against what the project allows."""
    from packaging.requirements import Requirement

    rest, asked = [], {}
    for line in lines:
        req = Requirement(line)
        name = canon(req.name)
        if name in family:
            asked[name] = ",".join(filter(None, [asked.get(name, ""), str(req.specifier)]))
        else:
            rest.append(line)
    return rest, asked
