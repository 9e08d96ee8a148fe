"""`envkit check` requirements: "torch>=2.5", "macos>=14", "python>=3.10", "driver>=550", or a
capability such as "mps" / "cuda" / "bf16" that holds when doctor's check of that id passes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envkit.checks.verdict import Check
from envkit.errors import EnvkitError
from envkit.facts.model import Facts
from envkit.resources import load_toml

CAPABILITIES = ("mps", "cuda", "bf16", "compile", "torch", "python-arch", "torch-pairing", "openmp", "env-vars")
_REQ = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_.\-]*)\s*(.*?)\s*$")


@dataclass
class Requirement:
    text: str
    name: str
    spec: SpecifierSet | None


@dataclass
class Result:
    requirement: str
    ok: bool
    found: str | None
    message: str
    status: str = ""  # pass, warn or fail (doctor's word for a check); "" for a gate: ok or not

    @property
    def level(self) -> str:
        return self.status or ("pass" if self.ok else "fail")

    def to_dict(self) -> dict:
        return {"requirement": self.requirement, "ok": self.ok, "found": self.found, "message": self.message}


def parse_requirement(text: str, where: str = "--require") -> Requirement:
    m = _REQ.match(text or "")
    if not m:
        raise EnvkitError(f"invalid requirement {text!r}", where=where, fix="write it like 'torch>=2.5', 'macos>=14' or 'mps'")
    name, rest = m.group(1).lower(), m.group(2)
    if not rest:
        if name not in CAPABILITIES:
            raise EnvkitError(f"{text!r} needs a version specifier (or is not a capability: {', '.join(CAPABILITIES)})",
                              where=where, fix=f"write e.g. '{name}>=1.0'")
        return Requirement(text, name, None)
    try:
        spec = SpecifierSet(rest, prereleases=True)
    except InvalidSpecifier:
        raise EnvkitError(f"invalid version specifier {rest!r} in {text!r}", where=where,
                          fix="use PEP 440 operators: >=, <=, ==, !=, ~=, <, > (e.g. 'torch>=2.5,<2.7')")
    if not str(spec):
        raise EnvkitError(f"invalid version specifier {rest!r} in {text!r}", where=where, fix="e.g. 'torch>=2.5'")
    return Requirement(text, name, spec)


def read_pyproject(path: Path) -> list[str]:
    """[tool.envkit] require = [...] from pyproject.toml; a missing file means none."""
    if not path.is_file():
        return []

    try:
        data = load_toml(path)
    except Exception as exc:  # tomllib.TOMLDecodeError and friends
        raise EnvkitError(f"invalid TOML: {exc}", where=str(path))
    req = data.get("tool", {}).get("envkit", {}).get("require", [])
    if not isinstance(req, list) or not all(isinstance(r, str) for r in req):
        raise EnvkitError("tool.envkit.require must be a list of strings", where=str(path), fix='require = ["torch>=2.5", "mps"]')
    return req


def found_version(req: Requirement, facts: Facts) -> str | None:
    n = req.name
    if n == "python":
        return facts.python.version
    if n == "macos":
        return facts.os.version if facts.is_macos else None
    if n == "driver":
        return facts.nvidia_gpus[0].driver if facts.nvidia_gpus else None
    if n == "cuda":
        return facts.torch.cuda
    if n == "torch":
        return facts.torch.version
    for key, value in facts.packages.items():
        if key.lower().replace("_", "-") == n.replace("_", "-"):
            return value
    return None


GATE_NAMES = ("python", "macos", "driver", "cuda", "torch")


def did_you_mean_package(req: Requirement, installed) -> str:
    """" (did you mean 'torch'?) (fix: --require 'torch>=2')" for a name close to an installed
    distribution's (or a gate's own: python, macos, driver, cuda), else ""."""
    import difflib

    norm = {n.lower().replace("_", "-"): n for n in (*installed, *GATE_NAMES) if n}
    close = difflib.get_close_matches(req.name.replace("_", "-"), sorted(norm), n=1, cutoff=0.75)
    if not close:
        return ""
    name = norm[close[0]].lower()
    return f" (did you mean '{name}'?) (fix: --require '{name}{req.spec}')"


def evaluate(req: Requirement, facts: Facts, checks: dict[str, Check], lookup_package=None, installed=()) -> Result:
    """One gate judged; `installed`: the names of the distributions installed where the gate looks,
    for a did-you-mean when the gate names none of them."""
    if req.spec is None:
        c = checks.get(req.name)
        if c is None:
            return Result(req.text, False, None, "unknown capability")
        return Result(req.text, c.status == "pass", c.status, c.message + (f" (fix: {c.fix})" if c.status != "pass" and c.fix else ""))
    found = found_version(req, facts)
    if found is None and lookup_package is not None and req.name not in ("python", "macos", "driver", "cuda"):
        found = lookup_package(req.name)
    if found is None:
        what = {"macos": "not macOS", "driver": "no NVIDIA driver found",
                "cuda": "torch has no CUDA build label"}.get(req.name, None)
        what = what or f"{req.name} is not installed" + did_you_mean_package(req, [*installed, *facts.packages])
        return Result(req.text, False, None, what)
    try:
        ok = req.spec.contains(Version(found), prereleases=True)
    except InvalidVersion:
        return Result(req.text, False, found, f"cannot compare version {found!r}")
    return Result(req.text, ok, found, f"{req.name} {found}" + ("" if ok else f" does not satisfy {req.spec}"))
