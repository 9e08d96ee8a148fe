"""The typed records of a run as it goes and ends: `Heartbeat` (heartbeat.json, rewritten every few
seconds) and `Summary` (summary.json, how it ended), beside RunRecord (records.py). Every writer
(the trainer, exec's supervisor, the summary written for a killed run) and every reader (`runs`,
`monitor`, `sweep`, Slurm, `reproduce`, resume) goes through them.

Unlike record.json, these files are written while others read them, by envkits old and new: a value
of the wrong type reads as absent (never an error that hides the run from `envkit runs`), and the
whole document is kept (`doc`) for what is only shown."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envkit.runfolder.records import RunStatus


def _number(doc: dict, key: str) -> float | None:
    value = doc.get(key)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(doc: dict, key: str) -> int | None:
    value = doc.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(doc: dict, key: str) -> str | None:
    value = doc.get(key)
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class Heartbeat:
    """heartbeat.json: where a live run stands (the trainer's telemetry, or exec's supervisor)."""

    doc: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, doc: Any) -> Heartbeat | None:
        return cls(dict(doc)) if isinstance(doc, dict) and doc else None

    def to_json(self) -> dict:
        return dict(self.doc)

    @property
    def step(self) -> int | None:
        return _int(self.doc, "step")

    @property
    def max_steps(self) -> int | None:
        return _int(self.doc, "max_steps")

    @property
    def loss(self) -> float | None:
        return _number(self.doc, "loss")

    @property
    def updated_at(self) -> float | None:
        return _number(self.doc, "updated_at")

    @property
    def last_output_at(self) -> float | None:  # exec: when the command last printed
        return _number(self.doc, "last_output_at")

    @property
    def last_metric_at(self) -> float | None:  # exec: when the command last logged a row
        return _number(self.doc, "last_metric_at")

    @property
    def pid(self) -> int | None:  # the supervisor's (exec) or the trainer's
        return _int(self.doc, "pid")

    @property
    def pid_start(self) -> str | int | None:  # fsutil.process_start_time's token: a PID given to another program since is told apart
        value = self.doc.get("pid_start")
        return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None

    @property
    def child_pid(self) -> int | None:  # exec: the command's
        return _int(self.doc, "child_pid")

    @property
    def child_start(self) -> str | int | None:
        value = self.doc.get("child_start")
        return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None

    @property
    def host(self) -> str | None:
        return _text(self.doc, "host")

    @property
    def status(self) -> str | None:
        return _text(self.doc, "status")

    @property
    def device(self) -> dict:  # exec: the device sample envkit took from outside
        value = self.doc.get("device")
        return value if isinstance(value, dict) else {}

    def get(self, key: str, default: Any = None) -> Any:
        """Any other value, as written (shown, never acted on)."""
        return self.doc.get(key, default)


@dataclass(frozen=True)
class Summary:
    """summary.json: how the run ended (or was last seen), written atomically by whoever ends it."""

    doc: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, doc: Any) -> Summary | None:
        return cls(dict(doc)) if isinstance(doc, dict) and doc else None

    def to_json(self) -> dict:
        return dict(self.doc)

    @property
    def status(self) -> str | None:
        """As written: a RunStatus value (`state` reads it as one), or a newer envkit's word."""
        return _text(self.doc, "status")

    @property
    def state(self) -> RunStatus:
        return RunStatus.of(self.status)

    @property
    def completed(self) -> bool:
        return self.state is RunStatus.COMPLETED

    @property
    def kind(self) -> str | None:  # "exec" for a command's run; the trainer's say nothing or "train"
        return _text(self.doc, "kind")

    @property
    def steps(self) -> int | None:
        return _int(self.doc, "steps")

    @property
    def max_steps(self) -> int | None:
        return _int(self.doc, "max_steps")

    @property
    def final_loss(self) -> float | None:
        return _number(self.doc, "final_loss")

    @property
    def best_val_loss(self) -> float | None:
        return _number(self.doc, "best_val_loss")

    @property
    def exit_code(self) -> int | None:
        return _int(self.doc, "exit_code")

    @property
    def updated_at(self) -> float | None:
        return _number(self.doc, "updated_at")

    @property
    def hints(self) -> list[dict] | None:
        value = self.doc.get("hints")
        return [h for h in value if isinstance(h, dict)] if isinstance(value, list) else None

    def get(self, key: str, default: Any = None) -> Any:
        """Any other value, as written (shown, never acted on)."""
        return self.doc.get(key, default)

    def speaks_for(self, beat: Heartbeat | None) -> bool:
        """This summary is the run's last word, not an older one's left before a resume wrote a newer heartbeat."""
        return beat is None or (self.updated_at or 0) >= (beat.updated_at or 0) - 1
