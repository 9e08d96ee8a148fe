"""The typed records of a run folder, read at one edge (folder.py) and checked before anything
acts on them: each `from_json` takes the parsed JSON object, checks the type of every value the
rest of envkit uses, and raises one RunFolderError naming the file and the key. A record from an
older or newer envkit keeps the keys it has; what envkit does not use is not looked at.

What a record names (an interpreter, a folder, a command) is a fact about the machine that made
the run, never an instruction: the consumers decide (reproduce/trust.py) what of it may be used."""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn, overload

from envkit.runfolder.bounded import RunFolderError

_FIX = "the run folder was changed or is damaged; use the folder as envkit wrote it"
_ROLE = re.compile(r"^(project|envkit|local-[A-Za-z0-9._-]{1,100})(-submodule[0-9]{1,4}){0,8}$")
_COMMIT = re.compile(r"^[0-9a-f]{7,64}$")
_REL_IN_CODE = re.compile(r"^code/[A-Za-z0-9._-]{1,140}$")
_STR_MAX = 64 << 10


class _Reader:
    """Typed access to one JSON object of one file; every failure one line naming file and key."""

    def __init__(self, data: dict, file: str, prefix: str = ""):
        self.data, self.file, self.prefix = data, file, prefix

    def fail(self, key: str, what: str) -> NoReturn:
        raise RunFolderError(f"{self.prefix}{key} {what}", where=self.file, fix=_FIX)

    def get(self, key: str, kinds: tuple, default=None, *, required: bool = False) -> Any:  # a JSON value, of one of `kinds`
        if key not in self.data or self.data[key] is None:
            if required:
                self.fail(key, "is missing")
            return default
        value = self.data[key]
        if isinstance(value, bool) and bool not in kinds:
            self.fail(key, f"is {value!r}, not {' or '.join(k.__name__ for k in kinds)}")
        if not isinstance(value, kinds):
            self.fail(key, f"is {type(value).__name__}, not {' or '.join(k.__name__ for k in kinds)}")
        if isinstance(value, str) and len(value) > _STR_MAX:
            self.fail(key, f"is {len(value):,} characters long")
        return value

    @overload
    def text(self, key: str, *, required: Literal[True], pattern: re.Pattern | None = None) -> str: ...
    @overload
    def text(self, key: str, *, required: bool = False, pattern: re.Pattern | None = None) -> str | None: ...

    def text(self, key: str, *, required: bool = False, pattern: re.Pattern | None = None) -> str | None:
        value = self.get(key, (str,), required=required)
        if value is not None and pattern is not None and not pattern.fullmatch(value):
            self.fail(key, f"is {value[:80]!r}, which envkit never writes there")
        if value is not None and "\0" in value:
            self.fail(key, "holds a NUL character")
        return value

    def path(self, key: str, *, required: bool = False, absolute: bool = True) -> str | None:
        """A path of the machine that made the run: absolute (where `absolute`), within the limits
        every filesystem has (a component of at most 255 bytes, 4096 in all), no NUL. A received
        folder cannot name a path that makes the first look at it fail."""
        value = self.text(key, required=required)
        if value is None:
            return None
        if absolute and not os.path.isabs(value):
            self.fail(key, f"is {value[:80]!r}, not an absolute path of the machine that made the run")
        raw = os.fsencode(value)
        if len(raw) > 4096 or any(len(part) > 255 for part in raw.split(b"/")):
            self.fail(key, f"is {value[:80]!r}..., longer than any filesystem's path")
        return value

    def strings(self, key: str) -> list[str]:
        value = self.get(key, (list,), [])
        for i, item in enumerate(value):
            if not isinstance(item, str) or "\0" in item or len(item) > _STR_MAX:
                self.fail(f"{key}[{i}]", "is not a string")
        return list(value)

    def objects(self, key: str) -> list[tuple[str, _Reader]]:
        value = self.get(key, (list,), [])
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                self.fail(f"{key}[{i}]", f"is {type(item).__name__}, not an object")
            out.append((f"{key}[{i}]", _Reader(item, self.file, f"{self.prefix}{key}[{i}].")))
        return out

    def obj(self, key: str) -> _Reader:
        return _Reader(self.get(key, (dict,), {}), self.file, f"{self.prefix}{key}.")


class RunStatus(str, enum.Enum):
    """A run's status, the one set: what summary.json and heartbeat.json say (the first group), and
    what `envkit runs` and `monitor` judge from the folder when no summary speaks (the second).
    "unknown": none, or a value envkit never writes."""

    RUNNING = "running"
    RESTARTING = "restarting"
    COMPLETED = "completed"
    STOPPED = "stopped"  # --stop-after, or a bench's step callback
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    KILLED = "killed"
    NAN = "nan"
    OOM = "oom"
    DISK_FULL = "disk_full"
    STALLED = "stalled"
    # judged from the folder (folder_status.py), never written
    NEW = "new"  # a folder with nothing in it yet
    QUEUED = "queued"  # waiting for Slurm
    ORPHANED = "orphaned"  # its supervisor is gone, its command still runs
    DEAD = "dead"  # an older envkit's run whose process is gone
    UNKNOWN = "unknown"

    @classmethod
    def of(cls, text) -> RunStatus:
        try:
            return cls(text)
        except ValueError:
            return cls.UNKNOWN


# summary.json's "status" as the trainer writes it (train/run/loop.py): the RunStatus values a training
# process ends with itself (a Literal, so the trainer's code is checked against it; tests/runfolder checks
# each is a RunStatus value)
TrainStatus = Literal["running", "completed", "stopped", "interrupted", "failed", "nan", "disk_full"]


@dataclass(frozen=True)
class CodeState:
    """One git tree's state at the run's start (record/code.py writes it)."""

    role: str
    folder: str
    relative: str = "."
    commit: str | None = None
    tree: str | None = None  # the commit's tree (git rev-parse HEAD^{tree}): checked out where the commit is gone
    code_hash: str | None = None
    dirty: bool = False
    patch: str | None = None  # code/<role>.patch, inside the run folder
    untracked_archive: str | None = None  # code/<role>-untracked.tar
    untracked: tuple[str, ...] = ()  # the relative paths the archive holds
    pathspec: tuple[str, ...] = ()
    path: str | None = None  # a submodule's path inside its parent's tree
    submodules: tuple[CodeState, ...] = ()
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_reader(cls, r: _Reader) -> CodeState:
        relative = r.text("relative") or "."
        if Path(relative).is_absolute() or ".." in Path(relative).parts:
            r.fail("relative", f"is {relative!r}, not a folder inside the tree")
        untracked = [p.text("path", required=True) for _, p in r.objects("untracked")]
        path = r.path("path", absolute=False)
        if path is not None and (Path(path).is_absolute() or ".." in Path(path).parts):
            r.fail("path", f"is {path!r}, not a folder inside the parent's tree")
        folder = r.path("folder", required=True)  # absolute: git would run wherever reproduce starts (a bundle's own .git)
        assert folder is not None
        return cls(path=path, submodules=tuple(CodeState.from_reader(c) for _, c in r.objects("submodules")),
                   role=r.text("role", required=True, pattern=_ROLE), folder=folder,
                   relative=relative, commit=r.text("commit", pattern=_COMMIT), tree=r.text("tree", pattern=_COMMIT), code_hash=r.text("code_hash"),
                   dirty=bool(r.get("dirty", (bool,), False)), patch=r.text("patch", pattern=_REL_IN_CODE),
                   untracked_archive=r.text("untracked_archive", pattern=_REL_IN_CODE), untracked=tuple(untracked),
                   pathspec=tuple(r.strings("pathspec")), raw=dict(r.data))

    def to_json(self) -> dict:
        return dict(self.raw)

    def all(self) -> list[CodeState]:
        """This tree and every submodule in it, nested ones too."""
        return [self, *(s for sub in self.submodules for s in sub.all())]


@dataclass(frozen=True)
class LocalDist:
    """A distribution the run's interpreter had from a local folder or installed editable."""

    name: str
    version: str | None
    folder: str | None
    editable: bool

    @classmethod
    def from_reader(cls, r: _Reader) -> LocalDist:
        return cls(name=r.text("name", required=True, pattern=re.compile(r"^[A-Za-z0-9._-]{1,200}$")),
                   version=r.text("version"), folder=r.path("folder"), editable=bool(r.get("editable", (bool,), False)))

    def to_json(self) -> dict:
        return {"name": self.name, "version": self.version, "folder": self.folder, "editable": self.editable}


RecordKind = Literal["run", "exec"]  # what made the run folder: envkit run, or envkit exec


@dataclass(frozen=True)
class RunRecord:
    """record.json: what it takes to make the run again."""

    kind: RecordKind
    python: str | None
    cwd: str | None
    command: tuple[str, ...]  # an exec run's argv (credentials redacted)
    profile: str | None
    code: tuple[CodeState, ...]
    local: tuple[LocalDist, ...]
    missing_hashes: tuple[str, ...]
    data: tuple[dict, ...]  # record/data.py's fingerprints, each with a str key, path and kind
    config: dict  # config_record(): declared, overrides, derived_at_start, origin, profile, source
    deterministic: bool
    errors: tuple[str, ...]
    processes: int | None = None  # an `envkit run` run's processes in all (None: a record from before it kept them)
    nodes: int = 1
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, data: dict, file: str) -> RunRecord:
        r = _Reader(data, file)
        kind = r.text("kind", required=True)
        if kind not in ("run", "exec"):
            r.fail("kind", f"is {kind!r}, not run or exec")
        env = r.obj("environment")
        cfg = r.obj("config")
        for key in ("declared", "derived_at_start", "origin", "overrides"):
            cfg.get(key, (dict,), {})
        for name, section in cfg.get("declared", (dict,), {}).items():
            if not isinstance(section, dict):
                cfg.fail(f"declared.{name}", f"is {type(section).__name__}, not an object")
        cfg.text("profile")
        cfg.text("source")
        data_entries = []
        for _, d in r.objects("data"):
            d.text("key", required=True)
            d.path("path", required=True, absolute=False)
            d.text("kind")
            data_entries.append(dict(d.data))
        command = r.strings("command")
        if kind == "exec" and not command:
            r.fail("command", "is missing: an exec run's record names its command")
        return cls(kind=kind, python=r.path("python"), cwd=r.path("cwd"), command=tuple(command),
                   profile=r.text("profile") or cfg.text("profile"),
                   code=tuple(CodeState.from_reader(c) for _, c in r.objects("code")),
                   local=tuple(LocalDist.from_reader(d) for _, d in env.objects("local")),
                   missing_hashes=tuple(env.strings("missing_hashes")), data=tuple(data_entries),
                   config=dict(cfg.data), deterministic=bool(r.obj("determinism").get("deterministic", (bool,), False)),
                   errors=tuple(r.strings("errors")), raw=dict(data), **_processes(r.obj("processes")))

    @classmethod
    def unchecked(cls, data: dict) -> RunRecord:
        """A record its writer could not read back (record/start.py): kept as written, nothing typed."""
        return cls(kind="exec" if data.get("kind") == "exec" else "run", python=None, cwd=None, command=(), profile=None, code=(),
                   local=(), missing_hashes=(), data=(), config={}, deterministic=False, errors=(), raw=dict(data))

    def to_json(self) -> dict:
        return dict(self.raw)


MAX_PROCESSES = 65536


def data_entries(doc: dict, file: str) -> tuple[dict, ...]:
    """data.json's fingerprints (envkit/exec/reads.py), each with a str key, an absolute path and a kind."""
    r = _Reader(doc, file)
    out = []
    for _, d in r.objects("files"):
        d.text("key", required=True)
        d.path("path", required=True)
        d.text("kind")
        out.append(dict(d.data))
    return tuple(out)


def _processes(r: _Reader) -> dict:
    """record.json's {"world", "nodes"}: counts a reproduction starts processes by, so each is held
    to a count envkit could have written (a crafted folder cannot ask for a million processes)."""
    out = {}
    for key, name in (("world", "processes"), ("nodes", "nodes")):
        value = r.get(key, (int,))
        if value is not None and not 1 <= value <= MAX_PROCESSES:
            r.fail(key, f"is {value}, not a process count (1 to {MAX_PROCESSES})")
        if value is not None:
            out[name] = value
    return out


THREAD_COUNT = re.compile(r"[1-9][0-9]{0,5}")


@dataclass(frozen=True)
class EnvironmentRecord:
    """environment.json: where the run ran (redacted); reproduce reads only its thread counts."""

    environ: dict  # name -> str, as recorded

    @classmethod
    def from_json(cls, data: dict | None, file: str) -> EnvironmentRecord:
        r = _Reader(data or {}, file)
        environ = r.get("environ", (dict,), {})
        return cls(environ={str(k): v for k, v in environ.items() if isinstance(v, str)})
