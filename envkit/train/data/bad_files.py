"""Image files that do not decode (`dataset.on_bad_file`): the error that names one, wherever it was
read, and the tally of the ones skipped.

The error must name the file even when the image was decoded in a DataLoader worker process. torch
does not send the worker's exception object back: it re-raises in the trainer's process the same
type called with the worker's whole traceback as one string (torch/_utils.py,
ExceptionWrapper.reraise). So `UnreadableFile` takes either its own one-line message or that
traceback, and keeps the line that names the file in both cases: the trainer (train/run/loop.py)
turns it into one line, status failed, no traceback."""

from __future__ import annotations

import json
import re

MARK = "unreadable image file "
FIX = "remove or replace the file, or set dataset.on_bad_file: skip to train on without such files"
SHOWN = 5  # paths named in train.log and summary.json; the count covers them all
SEPARATOR = "\0"  # between the paths a sample skipped: the one character no path can hold


class UnreadableFile(Exception):
    """One line naming the file (as a JSON string: any path, in one line, read back exactly), why it
    did not decode, and the fix."""

    def __init__(self, text: str):
        at = text.rfind(MARK)  # in a worker's traceback, the last line is this exception's message
        line = text[at:].splitlines()[0] if at >= 0 else " ".join(text.split())
        super().__init__(line)
        found = re.match(re.escape(MARK) + r'("(?:[^"\\]|\\.)*")', line)
        self.path = json.loads(found.group(1)) if found else None

    @classmethod
    def of(cls, path, exc: BaseException, fix: str = FIX) -> "UnreadableFile":
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        # backslashreplace: an undecodable file name (lone surrogates) prints as the \\udcXX JSON reads back
        quoted = json.dumps(str(path), ensure_ascii=False).encode("utf-8", "backslashreplace").decode("utf-8")
        return cls(f"{MARK}{quoted} ({reason}) (fix: {fix})")


class SkippedFiles:
    """The files skipped under `dataset.on_bad_file: skip`, tallied in the trainer's process. Workers
    cannot add to it (each holds a copy): they send the paths a sample skipped along with the batch
    (FolderImages.__getitems__), and the trainer adds them here (DataBundle.check_batch). A file is
    met again every epoch: it counts once. With several processes (DDP) this is rank 0's tally."""

    def __init__(self):
        self._paths: dict[str, None] = {}  # distinct, in the order met

    def add(self, joined: str) -> None:
        """`joined`: the paths one sample skipped, SEPARATOR between them ("" for none)."""
        for path in joined.split(SEPARATOR) if joined else ():
            self._paths.setdefault(path)

    @property
    def count(self) -> int:
        return len(self._paths)

    def summary(self) -> dict:
        return {"count": self.count, "paths": list(self._paths)[:SHOWN]}

    def line(self) -> str:
        shown = list(self._paths)[:SHOWN]
        more = f" and {self.count - len(shown)} more" if self.count > len(shown) else ""
        return (f"skipped {self.count} unreadable image file{'s' if self.count != 1 else ''} (dataset.on_bad_file: skip; "
                f"each replaced by the next readable image): {', '.join(shown)}{more}")
