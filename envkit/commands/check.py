"""`envkit check`: version gates for CI. Fast: torch is never imported."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from envkit.checks import run_checks
from envkit.facts import gather
from envkit.checks.annotations import annotation, drift_annotations, junit, line_of
from envkit.checks.requirements import evaluate, parse_requirement, read_pyproject, Result
from envkit.errors import EnvkitError
from envkit.install.setup.managed import target_python


def _installed_names(python: str | None = None) -> list[str]:
    """The distributions installed here, or in `python`'s environment (the managed one): the names a
    misspelt --require is held against."""
    if python is None:
        from importlib import metadata

        return [d.metadata["Name"] for d in metadata.distributions() if d.metadata["Name"]]
    import subprocess

    code = "import importlib.metadata as m\nfor d in m.distributions():\n    print(d.metadata['Name'] or '')"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line for line in out.splitlines() if line]


def _package_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@click.command()
@click.option("--require", "requires", multiple=True, metavar="REQ",
              help="A gate: 'torch>=2.5', 'macos>=14', 'python>=3.10', 'driver>=550', or a capability: mps, cuda, bf16, compile. Repeatable.")
@click.option("--pyproject", type=click.Path(dir_okay=False), default="pyproject.toml", show_default=True,
              help="Also read [tool.envkit] require = [...] from this file.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "github", "junit"]), default="text", show_default=True,
              help="github: ::error/::warning annotations at the lines the gates and the lock come from; junit: a JUnit XML report.")
@click.option("--replay", type=click.Path(dir_okay=False), help="Judge a recorded snapshot instead of this machine.")
@click.option("--python", "python", help="Judge this interpreter's packages instead of envkit's own.")
@click.option("--lock", "lock", type=click.Path(dir_okay=False), help="Report drift from a lock: pylock.machine.toml, pylock.toml (exit 1 on any).")
def check(requires, pyproject, as_json, fmt, replay, python, lock) -> None:
    """Exit 0 when every gate holds, 1 when one fails, 2 for an invalid gate.

    With no gates, doctor's checks are judged (without importing torch) and any failure exits 1.
    """

    if as_json:
        fmt = "json"
    texts = [(r, "--require") for r in requires] + [(r, pyproject) for r in read_pyproject(Path(pyproject))]
    merged: dict[str, str] = {}
    for t, where in texts:  # a gate given twice is judged (and annotated) once, at its line in a file where it has one
        merged[t] = where if merged.get(t) in (None, "--require") else merged[t]
    texts = list(merged.items())
    reqs = _parsed(texts, fmt)  # invalid input exits 2 before any probing

    python = None if replay else target_python(python)
    facts = gather(replay, runtime=False, gpu_detail=False, python=python)
    checks = run_checks(facts)
    by_id = {c.id: c for c in checks}
    lookup = _package_version if not replay and not python else None
    if reqs:
        installed = () if replay else _installed_names(None if lookup else python)
        results = [evaluate(r, facts, by_id, lookup, installed) for r in reqs]
    else:
        results = [Result(c.id, c.status != "fail", c.status, c.message + (f" (fix: {c.fix})" if c.status != "pass" and c.fix else ""),
                          status=c.status) for c in checks if c.status != "skip"]
    drift = None
    if lock:
        from envkit.install.lock.drift import drift_report

        # a machine lock as a whole, a pylock.toml as this machine's part of it
        drift = drift_report(Path(lock), facts, say=lambda line: click.echo(line, err=True))
    ok = all(r.ok for r in results) and not (drift and drift.get("changed"))
    _render(fmt, ok, results, drift, texts, lock)
    sys.exit(0 if ok else 1)


def _render(fmt: str, ok: bool, results: list, drift: dict | None, texts: list[tuple[str, str]], lock: str | None) -> None:
    """The results as --format asks: junit, json, github annotations or text lines."""
    if fmt == "junit":
        click.echo(junit(results, drift, lock))
    elif fmt == "json":
        out = {"ok": ok, "results": [r.to_dict() for r in results]}
        if drift is not None:
            out["drift"] = drift
        from envkit.console import print_json

        print_json(out)
    else:
        where = {t: w for t, w in texts}
        for r in results:
            if fmt == "github":
                if r.level != "pass":
                    file = where.get(r.requirement) if where.get(r.requirement) not in (None, "--require") else None
                    click.echo(annotation(r.level, "envkit check", f"{r.requirement}: {r.message}", file,
                                          line_of(file, r.requirement) if file else None))
            else:
                click.echo(f"{MARK[r.level]} {r.requirement}: {r.message}")
        if drift is not None and lock is not None:
            for line in drift_annotations(drift, lock) if fmt == "github" else [f"DRIFT {x}" for x in drift.get("lines", [])]:
                click.echo(line)
            from envkit.install.lock.drift import project_line

            if fmt == "text" and project_line(drift):
                click.echo(f"note: {project_line(drift)}")
        if fmt == "text":
            click.echo(verdict(results, drift, lock))


MARK = {"pass": "ok  ", "warn": "warn", "fail": "FAIL"}


def _parsed(texts: list[tuple[str, str]], fmt: str) -> list:
    """The gates parsed; an invalid one exits 2, and with --format github it is an annotation too
    (pointing at its line in pyproject.toml), so the CI log shows it where people look."""
    try:
        return [parse_requirement(t, where) for t, where in texts]
    except EnvkitError as exc:
        if fmt == "github":
            file = exc.where if exc.where not in (None, "--require") else None
            bad = next((t for t, w in texts if w == exc.where and f"{t!r}" in exc.message), None)
            click.echo(annotation("fail", "envkit check: invalid gate", exc.one_line().removeprefix("envkit: error: "), file,
                                  line_of(file, bad) if file and bad else None))
        raise


def verdict(results: list, drift: dict | None, lock: str | None) -> str:
    """The last line: the gates, the lock, and FAILED once, for whichever failed."""
    failed = sum(1 for r in results if not r.ok)
    line = f"{len(results) - failed}/{len(results)} gates hold"
    if drift is not None:
        count = len(drift.get("lines") or [])
        line += (f"; {count} {'difference' if count == 1 else 'differences'} from {lock} (DRIFT above)" if drift.get("changed")
                 else f"; the environment matches {lock}")
    return line + (": FAILED" if failed or (drift and drift.get("changed")) else "")
