"""The data an exec run read: the files its command opened for reading (envkit/exec/opened.py
appends them to the run folder's opened.jsonl), sorted out and fingerprinted (record/data.py) in
a background thread while the run goes, into data.json, which the seal covers once the run ends.

A file counts as data when it is a regular file that the command never opened for writing (that is
an output), outside the run folder and envkit's runs folder, outside the interpreter and its
packages, not a system file (/etc, /usr, ...), not in a hidden folder of the home (caches, keys,
configs), not a compiler's cache, and, inside the project's git tree, one that git ignores (what git
tracks or would track is the code state's, record/code.py). At most MAX_FILES files; whole hashes
up to WHOLE_BUDGET bytes in all, sampled beyond (record/data.py says how)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from envkit.record.code import git, toplevel
from envkit.record.data import FULL_HASH_MAX, fingerprint
from envkit.runfolder.bounded import RunFolderError, read_bytes
from envkit.runfolder.folder import RunFolder

MAX_FILES = 1000
WHOLE_BUDGET = 1 << 30
POLL_SECONDS = 2.0
_OPENED_MAX = 8 << 20
_SYSTEM = ("/etc", "/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/var/lib", "/var/cache", "/run", "/proc", "/sys", "/dev",
           "/System", "/Library", "/private/etc", "/private/var/db", "/opt/homebrew")
_CACHE_PARTS = ("torchinductor_", "__pycache__", ".triton", "triton_cache")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class DataReads:
    """Started with the command, closed when it ends: data.json in the run folder."""

    def __init__(self, run_dir: Path, project: Path | None = None):
        self.run_dir = Path(run_dir)
        self.runs_root = str(self.run_dir.resolve().parent.parent)
        self.top = toplevel(Path(project or os.getcwd()))
        self.home = str(Path.home())
        self.read: dict[str, None] = {}  # in the order first read
        self.written: set[str] = set()
        self.files: dict[str, dict] = {}
        self.left_out = 0
        self.budget = WHOLE_BUDGET
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="envkit-data-reads", daemon=True)

    def start(self) -> DataReads:
        self._thread.start()
        return self

    def close(self) -> None:
        self._done.set()
        self._thread.join(timeout=300)
        self._take()  # what the last seconds added
        if self.read or self.files:
            RunFolder(self.run_dir).write_data(self.document())

    def document(self) -> dict:
        return {"files": [self.files[p] for p in self.read if p in self.files and p not in self.written],
                "left_out": self.left_out, "max_files": MAX_FILES,
                "how": "files the command opened for reading (an audit hook), outside its code, packages and outputs"}

    def _loop(self) -> None:
        while not self._done.wait(POLL_SECONDS):
            self._take()

    def _take(self) -> None:
        try:
            raw = read_bytes(RunFolder(self.run_dir).opened_file, max_bytes=_OPENED_MAX, what="opened files")
        except RunFolderError:  # a link or a FIFO planted there: nothing read
            return
        if raw is None:
            return
        fresh = []
        for line in raw.decode("utf-8", "surrogateescape").splitlines():
            try:
                row = json.loads(line)
                path, write = str(row["path"]), bool(row["write"])
            except (ValueError, KeyError, TypeError):
                continue
            if write:
                self.written.add(path)
            elif path not in self.read:
                self.read[path] = None
                fresh.append(path)
        candidates = [p for p in fresh if self._maybe_data(p)]
        for path in self._not_code(candidates):
            if path in self.written or path in self.files:
                continue
            if len(self.files) >= MAX_FILES:
                self.left_out += 1
                continue
            try:
                size = os.stat(path).st_size
            except OSError:
                continue
            whole = size <= FULL_HASH_MAX and size <= self.budget
            self.budget -= size if whole else 0
            self.files[path] = fingerprint(path, key="opened", whole_max=FULL_HASH_MAX if whole else -1)

    def _maybe_data(self, path: str) -> bool:
        real = os.path.realpath(path)
        if any(_inside(real, r) for r in (*_SYSTEM, self.runs_root, str(self.run_dir.resolve()))):
            return False
        if any(part.startswith(_CACHE_PARTS) for part in Path(real).parts):
            return False
        if _inside(real, self.home) and any(part.startswith(".") for part in Path(real).relative_to(self.home).parts[:-1]):
            return False  # ~/.cache, ~/.config, ~/.ssh: caches, settings and keys, not a run's data
        return os.path.isfile(real)

    def _not_code(self, paths: list[str]) -> list[str]:
        """Of `paths`, those outside the project's tree or ignored by git inside it."""
        if self.top is None:
            return paths
        top = str(self.top.resolve())
        inside = [p for p in paths if _inside(os.path.realpath(p), top)]
        if not inside:
            return paths
        proc = git(self.top, "check-ignore", "-z", "--stdin",
                   stdin="\0".join(os.path.realpath(p) for p in inside).encode("utf-8", "surrogateescape"))
        ignored = set((proc.stdout.decode("utf-8", "surrogateescape") if proc is not None else "").split("\0"))
        return [p for p in paths if not _inside(os.path.realpath(p), top) or os.path.realpath(p) in ignored]
