"""`RunFolder`: a run folder on this machine, the one object every command that makes, runs, watches
or resumes a run goes through (the trainer, exec's supervisor, `runs`, `monitor`, `sweep`, Slurm,
resume). It knows each of its files (a property per file, spelt through names.py), reads them through
the one bounded reader (read_json_lenient: a live run may be rewriting a file as it is read) into the
typed records (Summary, Heartbeat), and writes them atomically. It is made in one place
(`RunFolder.create`: exec's runs and sweeps; the trainer's folders are chosen by plan/run_folders.py
and made with the same name check).

What people send each other to make again is not read here: `RunSnapshot.take` (snapshot.py) reads
a folder once, bounded and validated, for `envkit reproduce`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.fsutil import atomic_write_text, check_inside, ignore_all
from envkit.redact import redact
from envkit.runfolder import names
from envkit.runfolder.bounded import read_bytes, read_json_lenient
from envkit.runfolder.create import folder_name
from envkit.runfolder.metrics import parse_rows, read_metrics
from envkit.runfolder.progress import Heartbeat, Summary
from envkit.runfolder.records import RunRecord

METRICS_MAX = 64 << 20  # the newest rows a reader takes of metrics.jsonl (100,000 logged steps ~30 MiB)


@dataclass(frozen=True)
class RunFolder:
    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    # ------------------------------------------------------------------ made
    @classmethod
    def create(cls, root: Path, name: str) -> RunFolder:
        """root/<name>/<timestamp>[-n], made here (exist_ok=False: two runs never share one). The
        runs folder, when this run made it, gets a `.gitignore` of `*`: outputs never enter the project's git."""
        exp = check_inside(root, Path(root) / folder_name(name, "--name", "run name"), "--name")
        new_root = not Path(root).exists()
        for d in RunFolder.names_in(exp):
            try:
                d.mkdir(parents=True)
                if new_root:
                    ignore_all(Path(root))
                return cls(d)
            except FileExistsError:
                continue
            except OSError as exc:  # a read-only or full runs folder: one line, not a traceback
                raise EnvkitError(f"cannot make the run folder: {exc.strerror or exc} ({exc.filename or d})", where="--runs-dir",
                                  fix="give a --runs-dir you can write") from None
        raise EnvkitError("could not make a new run folder", where=str(exp))

    @staticmethod
    def names_in(exp: Path, tries: int = 1000) -> Iterator[Path]:
        """The names a new run folder takes, in order: exp/<timestamp>, then exp/<timestamp>-2, -3, ..."""
        base = time.strftime("%Y%m%d-%H%M%S")
        return (exp / (base if i == 1 else f"{base}-{i}") for i in range(1, tries + 1))

    def is_run(self) -> bool:
        """Whether a run started here (its config.json is written first)."""
        return self.config_file.is_file()

    # ------------------------------------------------------------------ its files
    @property
    def config_file(self) -> Path:
        return self.path / names.CONFIG

    @property
    def config_yaml(self) -> Path:
        return self.path / names.CONFIG_YAML

    @property
    def environment_file(self) -> Path:
        return self.path / names.ENVIRONMENT

    @property
    def summary_file(self) -> Path:
        return self.path / names.SUMMARY

    @property
    def heartbeat_file(self) -> Path:
        return self.path / names.HEARTBEAT

    @property
    def metrics_file(self) -> Path:
        return self.path / names.METRICS

    @property
    def opened_file(self) -> Path:
        return self.path / names.OPENED

    @property
    def data_file(self) -> Path:
        return self.path / names.DATA

    @property
    def settings_file(self) -> Path:
        return self.path / names.SETTINGS

    @property
    def train_log(self) -> Path:
        return self.path / names.TRAIN_LOG

    @property
    def supervisor_log(self) -> Path:
        return self.path / names.SUPERVISOR_LOG

    def stall_file(self, at: float) -> Path:
        return self.path / f"{names.STALL_PREFIX}{int(at)}.json"

    @property
    def faults_file(self) -> Path:
        return self.path / names.FAULTS

    @property
    def checkpoints(self) -> Path:
        return self.path / names.CHECKPOINTS

    @property
    def lock_file(self) -> Path:  # the training interpreter's environment (record/envlock.py)
        return self.path / names.LOCK

    @property
    def record_file(self) -> Path:
        return self.path / names.RECORD

    # ------------------------------------------------------------------ read
    def config(self) -> dict:
        """config.json: what ran (the resolved config, or exec's command); {} where there is none yet."""
        return read_json_lenient(self.config_file) or {}

    def environment(self) -> dict:
        """environment.json: where it ran (redacted); {} where there is none."""
        return read_json_lenient(self.environment_file) or {}

    def summary(self) -> Summary | None:
        return Summary.of(read_json_lenient(self.summary_file))

    def heartbeat(self) -> Heartbeat | None:
        return Heartbeat.of(read_json_lenient(self.heartbeat_file))

    def settings(self) -> dict | None:
        """What a script recorded of its own settings (envkit.track.config)."""
        return read_json_lenient(self.settings_file)

    def metrics(self) -> list[dict]:
        """metrics.jsonl as the run stands (a rewound run's abandoned rows dropped)."""
        return read_metrics(self.path)

    def metric_rows_tail(self, max_bytes: int = METRICS_MAX) -> list[dict]:
        """The newest rows only, bounded (a sweep's table of many runs)."""
        return parse_rows(read_bytes(self.metrics_file, max_bytes=max_bytes, tail=True) or b"")

    def completed(self) -> bool:
        s = self.summary()
        return s is not None and s.completed

    # ------------------------------------------------------------------ written (atomically, redacted)
    def write_summary(self, summary: Summary | dict) -> None:
        self._write(self.summary_file, summary.to_json() if isinstance(summary, Summary) else summary)

    def write_heartbeat(self, beat: Heartbeat | dict) -> None:
        self._write(self.heartbeat_file, beat.to_json() if isinstance(beat, Heartbeat) else beat)

    def write_config(self, doc: dict, *, redacted: bool = True) -> None:
        """config.json; the trainer's (redacted=False) is kept as resolved: its hash decides a resume."""
        self._write(self.config_file, doc, redacted=redacted)

    def write_environment(self, doc: dict) -> None:
        self._write(self.environment_file, doc)

    def write_record(self, record: RunRecord) -> None:
        """record.json, redacted by its writer (record/start.py) before it became a RunRecord."""
        self._write(self.record_file, record.to_json(), redacted=False)

    def write_data(self, doc: dict) -> None:
        self._write(self.data_file, doc, indent=1)

    def write_stall(self, stall: dict) -> None:
        self._write(self.stall_file(stall["at"]), stall)

    @staticmethod
    def _write(path: Path, doc: dict, indent: int = 2, redacted: bool = True) -> None:
        atomic_write_text(path, json.dumps(redact(doc) if redacted else doc, indent=indent, default=str) + "\n")
