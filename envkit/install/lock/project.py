"""The project a lock belongs to, and what an environment holds for it.

A lock records the project beside it (the pyproject.toml in the lock's folder) in
[tool.envkit.project]: its name and its optional groups (extras). The lock holds the machine's
torch and what was installed with it; the project says the rest. In an environment, the project
itself, its dependencies and every extra installed as such (each of its requirements installed, at
a version it allows), with all their dependencies, are the project's own: not in the lock, and not
drift. So `pip install -e '.[test]'` after `envkit setup` leaves `envkit check --lock` green, while
a locked package at another version, or a package nothing asked for, is still drift."""

from __future__ import annotations

from pathlib import Path

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
