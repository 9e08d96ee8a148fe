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


def package_line(lock: str | Path, name: str) -> int | None:
    """The line of a package's entry in a lock (`name = "tqdm"` under [[packages]]), 1-based."""
    try:
        lines = Path(lock).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for i, ln in enumerate(lines, 1):
        if ln.replace(" ", "") in (f'name="{name}"', f"name='{name}'"):
            return i
    return None


def drift_annotations(drift: dict, lock: str) -> list[str]:
    """One ::error per difference from the lock, at the package's entry in it where the lock has one."""
    out = []
    for name, v in (drift.get("changed_versions") or {}).items():
        out.append(annotation("fail", "envkit lock drift", f"{name}: {v['lock']} in the lock, {v['installed']} installed", lock,
                              package_line(lock, name)))
    for name, version in (drift.get("removed") or {}).items():
        out.append(annotation("fail", "envkit lock drift", f"{name} {version} is in the lock but not installed", lock,
                              package_line(lock, name)))
    for name, version in (drift.get("added") or {}).items():
        out.append(annotation("fail", "envkit lock drift", f"{name} {version} is installed but not in the lock", lock))
    return out


def junit(results: list, drift: dict | None, lock: str | None) -> str:
    """A JUnit XML report (every CI reads one): a test case per gate, one for the lock; a failed
    gate or any drift is a <failure>, a warning is said in <system-out>."""
    import xml.etree.ElementTree as ET

    cases = []
    for r in results:
        case = ET.Element("testcase", classname="envkit.check", name=r.requirement)
        if not r.ok:
            ET.SubElement(case, "failure", message=r.message, type="gate").text = r.message
        elif r.level == "warn":
            ET.SubElement(case, "system-out").text = f"warning: {r.message}"
        cases.append(case)
    if drift is not None:
        case = ET.Element("testcase", classname="envkit.check", name=f"lock {lock}")
        if drift.get("changed"):
            lines = drift.get("lines") or []
            ET.SubElement(case, "failure", message=f"{len(lines)} difference(s) from {lock}", type="drift").text = "\n".join(lines)
        cases.append(case)
    failures = sum(1 for c in cases if c.find("failure") is not None)
    suite = ET.Element("testsuite", name="envkit check", tests=str(len(cases)), failures=str(failures), errors="0", skipped="0")
    suite.extend(cases)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)
