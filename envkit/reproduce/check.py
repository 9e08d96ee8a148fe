"""`envkit reproduce --check`: the run's record held against what is here now, each difference one
line: the interpreter's installed set against the run's pylock.toml (a package added, removed or
at another version), each recorded git tree's code (another commit, other uncommitted changes, an
untracked file changed), each data path's fingerprint, and the config file the run was started
from read again with the same overrides and profile.

A changed or missing data set, or a missing record, means the run cannot be made again as it was:
`blocking`. The rest can be made again (a fresh venv from the lock, the code from git), so it is a
difference, not a stop."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from envkit.config.config import load_config
from envkit.errors import EnvkitError
from envkit.install.act.interp import probe
from envkit.install.lock.drift import compare
from envkit.install.lock.read import read
from envkit.profiles import load_profile
from envkit.runfolder import record_files as files
from envkit.record.code import code_state
from envkit.record.code import envkit_folders
from envkit.record.data import differences, fingerprint
from envkit.reproduce.builds import other_machine, this_machines_build
from envkit.runfolder import names
from envkit.runfolder.bounded import RunFolderError
from envkit.runfolder.records import RunRecord
from envkit.runfolder.snapshot import RunSnapshot


@dataclass
class CheckReport:
    environment: list[str] = field(default_factory=list)
    code: list[str] = field(default_factory=list)
    data: list[str] = field(default_factory=list)
    config: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    python: str | None = None

    @property
    def blocking(self) -> list[str]:
        return list(self.data)

    @property
    def differences(self) -> list[str]:
        return [*self.environment, *self.code, *self.data, *self.config]

    def to_dict(self) -> dict:
        return {"python": self.python, "environment": self.environment, "code": self.code, "data": self.data,
                "config": self.config, "notes": self.notes, "same": not self.differences}


_FIX_INSIDE = "a record names paths of the machine that made the run; this one points into the folder it came in"


class CannotReproduce(EnvkitError):
    """An artifact of the run or its data is missing or changed: exit 2, one line saying what."""


def _local_index(url: str) -> Path | None:
    parts = urlsplit(url)
    if parts.scheme in ("", "file"):
        return Path(parts.path or url)
    return None


def refuse_inside(folder: RunSnapshot, rec: RunRecord, lock=None) -> None:
    """One line, exit 2, where the record or lock names a path inside the run folder as something
    to run, import, build or work in."""
    named = [(names.RECORD, "python", rec.python), (names.RECORD, "cwd", rec.cwd)]
    named += [(names.RECORD, f"code folder ({c.role})", c.folder) for top in rec.code for c in top.all()]
    named += [(names.RECORD, f"environment.local[{i}].folder ({d.name})", d.folder) for i, d in enumerate(rec.local)]
    if lock is not None:
        named += [("pylock.toml", "index", str(_local_index(u))) for u in lock.index_urls if _local_index(u) is not None]
        named += [("pylock.toml", f"packages ({p.name}) path", p.path) for p in lock.picks() if p.path]
    for file, key, value in named:
        if value and folder.contains(value):
            raise RunFolderError(f"{key} is {value}, inside the run folder itself: envkit never runs, imports or builds "
                                 "what a run folder carries", where=str(folder.file(file)), fix=_FIX_INSIDE)


def open_run(run_dir: Path, wait: float = 120) -> RunSnapshot:
    """The run folder's snapshot (runfolder/snapshot.py: every file read once, bounded), its record
    validated, a path the record names inside the folder itself refused, or one line naming what is
    missing or wrong. A record still being written by a live process is waited for (up to `wait`
    seconds); a marker left by one that died is not."""
    import time

    deadline = time.monotonic() + wait
    while files.being_written(Path(run_dir)) and time.monotonic() < deadline:  # an exec run's record may still be being written
        time.sleep(0.1)
    folder = RunSnapshot.take(Path(run_dir))
    try:
        rec = folder.record
        if rec is None:
            pending = files.PENDING in os.listdir(folder.path)
            raise CannotReproduce(f"the run has no {files.RECORD}" + (
                f": {files.PENDING} says one was being written, by a process that is gone (the run was killed as it started)"
                if pending else ": it was started by an envkit that did not record runs"),
                where=str(folder.path), fix="start the run again with this envkit; its folder will hold the record")
        lock = folder.copy(files.LOCK)
        if lock is None:
            raise CannotReproduce(f"the run has no {files.LOCK} ({'; '.join(rec.errors) or 'not written'})",
                                  where=str(folder.path), fix="the environment the run used cannot be rebuilt; start the run again")
        refuse_inside(folder, rec, _lock_or_none(lock))
    except BaseException:
        folder.close()
        raise
    return folder


def _lock_or_none(lock: Path):
    try:
        return read(lock, require_torch=False)
    except EnvkitError:
        return None  # a lock that does not read is named where it is used


def environment_lines(lock_path: Path, python: str, rec: dict, notes: list[str] | None = None) -> list[str]:
    """The interpreter's installed set against the lock (local and editable installs are code, not packages).
    A lock of another kind of machine (a Mac's run checked on a CPU box): this machine's build of
    the recorded torch version and its runtime are what a reproduction installs here (elsewhere.py),
    so they are a note, not a difference."""
    lock = read(lock_path, require_torch=False)
    local = {d["name"] for d in (rec.get("environment") or {}).get("local") or []}
    found = probe(python)
    have = {k: d["version"] for k, d in found.dists.items() if not d.get("editable") and k not in local}
    want = {k: v for k, v in lock.versions.items() if k not in local}
    other = other_machine(lock)
    if other:
        want, have, said = this_machines_build(want, have)
        if notes is not None:
            notes.append(f"recorded on another machine ({'; '.join(other)}): "
                         + (f"{'; '.join(said)}: this machine's build, as a reproduction installs it" if said
                            else "its torch build is held as recorded"))
    return [f"environment: {line}" for line in compare(want, have)["lines"]]


def code_lines(rec: dict, run_dir: Path | None = None) -> list[str]:
    """Each recorded git tree now against its recorded state; the runs folder is left out of its
    untracked files, as when the run was recorded (record/start.py)."""
    out = []
    for state in rec.get("code") or []:
        folder, role = Path(state.get("folder") or "."), state.get("role")
        exclude = envkit_folders(folder, Path(run_dir).resolve().parent.parent) if run_dir is not None else []
        if not state.get("commit"):
            continue
        now = code_state(folder / (state.get("relative") or "."), role=role, out_dir=None, pathspec=state.get("pathspec"),
                         exclude=exclude)
        where = f"code ({role}) {folder}"
        if now is None:
            out.append(f"{where}: not a git working tree any more")
            continue
        if now["commit"] != state["commit"]:
            out.append(f"{where}: HEAD is {now['commit'][:12]}, the run had {state['commit'][:12]}")
        if now["code_hash"] == state["code_hash"]:
            continue
        if now["commit"] == state["commit"]:
            out.append(f"{where}: uncommitted changes or untracked files differ from the run's")
    return out


def data_lines(entries) -> list[str]:
    """One line per data file changed or gone since the run (entries: RunSnapshot.data's fingerprints)."""
    out = []
    for recorded in entries:
        out += [f"data: {line}" for line in differences(recorded, fingerprint(recorded["path"], recorded.get("key", "data")))]
    return out


def config_lines(rec: dict) -> list[str]:
    """The config file read again now, with the run's overrides and profile, against the run's values."""
    cfg_rec = rec.get("config") or {}
    source = cfg_rec.get("source")
    if not source or source == "<defaults>":
        return []
    path = Path(source) if Path(source).is_absolute() else Path(rec.get("cwd") or ".") / source
    if not path.is_file():
        return [f"config: {path} is gone (the run's values are in its config.json)"]

    try:
        profile = load_profile(cfg_rec["profile"]) if cfg_rec.get("profile") else None
        overrides = [f"{k}={_text(v)}" for k, v in (cfg_rec.get("overrides") or {}).items()]
        now = load_config(path, overrides=overrides, profile=profile).to_dict()
    except EnvkitError as exc:
        return [f"config: {path} no longer loads: {exc.message}"]
    was = cfg_rec.get("declared") or {}
    out = []
    for section, kv in now.items():
        for key, value in kv.items():
            old = (was.get(section) or {}).get(key)
            if key == "path" and section == "dataset" and value and old and Path(path.parent, value).resolve() == Path(old).resolve():
                continue  # the same path, relative in the file, absolute in the run
            if old != value and not (section == "experiment" and key == "output_dir"):
                out.append(f"config: {section}.{key} is {value!r} in {path.name}, the run had {old!r}")
    return out


def record_lines(folder: RunSnapshot, record) -> list[str]:
    """config.json against record.json: a reproduction runs what the record says (the seal covers
    it), so a config.json that says otherwise was edited and is named."""
    out = []
    saved = folder.config
    if record.kind == "exec" and isinstance(saved.get("command"), list) and list(saved["command"]) != list(record.command):
        out.append(f"config: config.json's command {' '.join(map(str, saved['command']))[:200]!r} is not the run's "
                   f"(record.json: {' '.join(record.command)[:200]!r}); a reproduction runs the record's")
    return out


def _text(value) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value)
