"""`envkit reproduce --check`: every difference between a run's record and this machine, one line
each (check.py's lines), and, for a folder this machine did not write unchanged, what reproducing
it would run (the plan's lines, as the question shows them). Nothing the folder names is run."""

from __future__ import annotations

from pathlib import Path

from envkit.runfolder import record_files as files
from envkit.reproduce.check import (CheckReport, code_lines, config_lines, data_lines, environment_lines, open_run,
                                    record_lines)
from envkit.reproduce.consent import plan_lines
from envkit.reproduce.plan import make
from envkit.runfolder.shown import shown, shown_list
from envkit.runfolder.snapshot import RunSnapshot


def check(run_dir: Path, python: str | None = None) -> CheckReport:
    """Every difference between the run's record and this environment (`python`: the interpreter to
    hold against the lock; default the one the run trained with, where it still exists)."""
    folder = open_run(run_dir)
    try:
        return _check(folder, python)
    finally:
        folder.close()


def _check(folder: RunSnapshot, python: str | None) -> CheckReport:
    record = folder.record
    assert record is not None and (lock := folder.copy(files.LOCK)) is not None  # open_run refused the rest
    rec = record.to_json()
    report = CheckReport()
    if python is None:
        python = record.python
        if python and not folder.trust.trusted:
            # a received or edited folder: the interpreter it names is not run, even to list its packages
            report.notes.append(f"the interpreter the run names ({shown(python)}) is not run: the folder is not one this machine "
                                f"wrote unchanged ({folder.trust.why}); give --venv DIR to compare a venv of yours")
            python = None
    if python and Path(python).exists():
        report.python = python
        report.environment = environment_lines(lock, python, rec, report.notes)
    elif python:
        report.notes.append(f"the interpreter the run used ({shown(python)}) is gone: give --venv DIR to check another")
    report.config = record_lines(folder, record)
    if not folder.trust.trusted:
        report.notes.append(f"the folder is not one this machine wrote unchanged ({folder.trust.why}): reproducing it asks "
                            "first; it would run " + _would_run(folder))
    report.code = code_lines(rec, folder.path)
    report.data = data_lines(folder.data)
    report.config += config_lines(rec)
    missing = (rec.get("environment") or {}).get("missing_hashes") or []
    if missing:
        report.notes.append(f"{len(missing)} packages were recorded without a wheel hash (offline or a private index when "
                            f"the run started): {shown_list(missing)}; a rebuild installs them by version")
    return report


def _would_run(folder: RunSnapshot) -> str:
    """The plan's lines, as the question would show them (plan.py, consent.py)."""
    plan = make(folder, venv=None, steps=None, device=None)
    try:
        return "; ".join(plan_lines(plan))
    finally:
        plan.close()
