"""`RunSnapshot.take(path)`: a run folder read once into a private snapshot, the one thing `envkit
reproduce` acts on. Every file it will use (record.json, record.seal, pylock.toml, config.json,
summary.json, environment.json, metrics.jsonl, code/...) is read through one bounded reader
(bounded.read_bytes: regular files only, never through a link, never blocking, size-capped) into
memory, the seal is verified over those bytes, and the files the tools after it need as files (the
lock for pip, the patches for git, the archives) are written into a private folder (0700) from the
same bytes. Nothing in the run folder is read again: a file swapped while the user reads the plan
changes nothing that runs."""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

from envkit.fsutil import process_start_time
from envkit.runfolder import seal
from envkit.runfolder.bounded import RunFolderError, parse_json, read_bytes
from envkit.runfolder.limits import UNTRACKED_COUNT_MAX, UNTRACKED_TOTAL_MAX
from envkit.runfolder.metrics import parse_rows
from envkit.runfolder.names import CODE_DIR, CONFIG, DATA, ENVIRONMENT, LOCK, METRICS, RECORD, SEAL, SUMMARY
from envkit.runfolder.progress import Summary
from envkit.runfolder.records import EnvironmentRecord, RunRecord, RunStatus, data_entries

# What one snapshot holds at most. record.json of a large project is ~100 KiB, a lock of 500
# packages with hashes ~300 KiB; metrics.jsonl of 100,000 logged steps ~30 MiB.
TOP_FILES = {RECORD: 8 << 20, SEAL: 4 << 20, LOCK: 16 << 20, CONFIG: 8 << 20, SUMMARY: 8 << 20, ENVIRONMENT: 8 << 20,
             METRICS: 64 << 20, DATA: 16 << 20}
CODE_TOTAL_MAX = 4 * UNTRACKED_TOTAL_MAX + (64 << 20)  # the archives (each capped when written) and the patches
CODE_FILES_MAX = 4 * UNTRACKED_COUNT_MAX
_FIX = "use the run folder as envkit wrote it"


class RunSnapshot:
    """A run folder's snapshot: `path` is where it lies (the reproduction is made beside it), the
    bytes of its files are `files`, and `copy(name)` is a file's private copy."""

    def __init__(self, path: Path, files: dict[str, bytes], private: Path):
        self.path = path
        self.files = files
        self.private = private

    def __repr__(self) -> str:
        return f"RunSnapshot({str(self.path)!r})"

    @classmethod
    def take(cls, given: Path) -> RunSnapshot:
        """Read the folder once (RunFolderError, one line, for anything a run folder never holds)."""
        path = _the_folder(Path(given))
        files: dict[str, bytes] = {}
        for name, cap in TOP_FILES.items():
            data = read_bytes(path / name, max_bytes=cap)
            if data is not None:
                files[name] = data
        if CONFIG not in files:
            raise RunFolderError(f"not a run folder (no {CONFIG})", where=str(path), fix="`envkit runs` lists the runs")
        files.update(_code_files(path))
        private = Path(tempfile.mkdtemp(prefix="envkit-reproduce-snapshot-"))  # 0700: this user's alone
        try:
            # marked with this process, as reproduce's other temporary folders (reproduce/restore.py:
            # temp_folder): a reproduction killed -9 leaves it, and the next one removes it
            (private / "owner.json").write_text(json.dumps({"pid": os.getpid(), "start_time": process_start_time(os.getpid())}))
            for name, data in files.items():
                dest = private.joinpath(*name.split("/"))
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
        except OSError as exc:
            shutil.rmtree(private, ignore_errors=True)
            raise RunFolderError(f"cannot copy the run folder's files: {exc.strerror or exc}", where=str(path),
                                 fix="free some space in the temporary folder") from None
        return cls(path, files, private)

    def close(self) -> None:
        shutil.rmtree(self.private, ignore_errors=True)

    def file(self, name: str) -> Path:
        """Where `name` lies in the run folder (for messages: it is never read again)."""
        return self.path / name

    def copy(self, name: str) -> Path | None:
        """The private copy of `name` (None where the snapshot has no such file)."""
        return self.private.joinpath(*name.split("/")) if name in self.files else None

    def _json(self, name: str) -> dict | None:
        data = self.files.get(name)
        return None if data is None else parse_json(data, str(self.file(name)), name)

    @functools.cached_property
    def config(self) -> dict:
        return self._json(CONFIG) or {}

    @functools.cached_property
    def record(self) -> RunRecord | None:
        data = self._json(RECORD)
        return None if data is None else RunRecord.from_json(data, str(self.file(RECORD)))

    @functools.cached_property
    def data_read(self) -> tuple[dict, ...]:
        """The data an exec run's command opened (data.json, envkit/exec/reads.py), each a fingerprint."""
        doc = self._json(DATA)
        return () if doc is None else data_entries(doc, str(self.file(DATA)))

    @property
    def data(self) -> tuple[dict, ...]:
        """Every fingerprint the run has: the data its config or command named (record.json) and what it opened."""
        record = self.record
        return (*(record.data if record is not None else ()), *self.data_read)

    @functools.cached_property
    def environment(self) -> EnvironmentRecord:
        return EnvironmentRecord.from_json(self._json(ENVIRONMENT), str(self.file(ENVIRONMENT)))

    @functools.cached_property
    def environment_doc(self) -> dict:
        return self._json(ENVIRONMENT) or {}

    @functools.cached_property
    def summary(self) -> Summary:
        return Summary.of(self._json(SUMMARY)) or Summary()

    @property
    def status(self) -> RunStatus:
        return self.summary.state

    @functools.cached_property
    def trust(self) -> seal.Verdict:
        return seal.verify_files(self.files)

    @functools.cached_property
    def metric_rows(self) -> list[dict]:
        return parse_rows(self.files.get(METRICS, b""))

    def contains(self, path: str | Path) -> bool:
        """Whether `path` lies inside this run folder (its record names it: never used as code)."""
        try:
            return Path(path).resolve().is_relative_to(self.path)
        except (OSError, ValueError):
            return True


def _the_folder(given: Path) -> Path:
    """The run folder as given, made absolute; a link to one is refused (the reproduction would be
    made beside the link's target, not where the user pointed)."""
    absolute = Path(os.path.abspath(given))
    try:
        st = os.lstat(absolute)
    except OSError:
        raise RunFolderError("not a folder", where=str(given), fix="`envkit runs` lists the runs") from None
    if stat.S_ISLNK(st.st_mode):
        raise RunFolderError("is a symbolic link to a run folder, not one", where=str(given),
                             fix=f"give the folder itself: {os.path.realpath(absolute)}")
    if not stat.S_ISDIR(st.st_mode):
        raise RunFolderError("not a folder", where=str(given), fix="`envkit runs` lists the runs")
    return absolute.resolve()


def _code_files(run_dir: Path) -> dict[str, bytes]:
    """Every file under code/ (patches and archives), as relative names -> bytes; anything else
    there (a link, a FIFO, a device), too many files or too many bytes: RunFolderError."""
    out: dict[str, bytes] = {}
    total = 0
    top = run_dir / CODE_DIR
    try:
        st = os.lstat(top)
    except FileNotFoundError:
        return out
    if not stat.S_ISDIR(st.st_mode):
        raise RunFolderError(f"{CODE_DIR} is not a folder", where=str(top), fix=_FIX)
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            raise RunFolderError(f"cannot read {folder.relative_to(run_dir)}: {exc.strerror or exc}", where=str(folder), fix=_FIX) from None
        for e in entries:
            rel = Path(e.path).relative_to(run_dir).as_posix()
            if e.is_dir(follow_symlinks=False):
                if rel.count("/") > 8:
                    raise RunFolderError(f"{rel} nests deeper than envkit writes", where=e.path, fix=_FIX)
                stack.append(Path(e.path))
                continue
            if not e.is_file(follow_symlinks=False):
                raise RunFolderError(f"{rel} is not a regular file (a link, a FIFO or a device)", where=e.path, fix=_FIX)
            if len(out) >= CODE_FILES_MAX:
                raise RunFolderError(f"{CODE_DIR} holds more than {CODE_FILES_MAX:,} files", where=str(top), fix=_FIX)
            data = read_bytes(Path(e.path), max_bytes=max(0, CODE_TOTAL_MAX - total), what=rel) or b""
            total += len(data)
            out[rel] = data
    return out
