"""`RunFolder(path)`: the one reader of a run folder's files for `envkit reproduce`, each read
bounded (bounded.py) into its typed record (records.py) on first use."""

from __future__ import annotations

import functools
from pathlib import Path

from envkit.runfolder import seal
from envkit.runfolder.names import CONFIG, ENVIRONMENT, HEARTBEAT, RECORD, SUMMARY
from envkit.runfolder.bounded import RunFolderError, read_json
from envkit.runfolder.records import EnvironmentRecord, RunRecord, RunStatus

class RunFolder:
    def __init__(self, path: Path):
        self.path = Path(path).resolve()

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    def file(self, name: str) -> Path:
        return self.path / name

    def require_run(self) -> None:
        if not self.path.is_dir():
            raise RunFolderError("not a folder", where=str(self.path), fix="`envkit runs` lists the runs")
        if not (self.path / CONFIG).is_file():
            raise RunFolderError(f"not a run folder (no {CONFIG})", where=str(self.path), fix="`envkit runs` lists the runs")

    @functools.cached_property
    def config(self) -> dict:
        return read_json(self.file(CONFIG), required=True) or {}

    @functools.cached_property
    def record(self) -> RunRecord | None:
        data = read_json(self.file(RECORD))
        return None if data is None else RunRecord.from_json(data, str(self.file(RECORD)))

    @functools.cached_property
    def environment(self) -> EnvironmentRecord:
        return EnvironmentRecord.from_json(read_json(self.file(ENVIRONMENT)), str(self.file(ENVIRONMENT)))

    @functools.cached_property
    def summary(self) -> dict:
        return read_json(self.file(SUMMARY)) or {}

    @functools.cached_property
    def heartbeat(self) -> dict:
        return read_json(self.file(HEARTBEAT)) or {}

    @property
    def status(self) -> RunStatus:
        return RunStatus.of(self.summary.get("status"))

    @functools.cached_property
    def trust(self) -> seal.Verdict:
        return seal.verify(self.path)

    def contains(self, path: str | Path) -> bool:
        """Whether `path` lies inside this run folder (its record names it: never used as code)."""
        try:
            return Path(path).resolve().is_relative_to(self.path)
        except (OSError, ValueError):
            return True
