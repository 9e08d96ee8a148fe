"""Inside the user's command (any Python under `envkit exec`): which files it opens, seen by an
audit hook (PEP 578: every `open`, `os.open` and `io.open_code`, so numpy's memmap, pickle and
torch.load are seen; a C library calling fopen itself is not). Standard library only: the command's
own interpreter imports it through the sitecustomize.py that exec puts on its PYTHONPATH.

Each file's first opening for reading, and for writing, is one JSON line appended to the run
folder's opened.jsonl ({"path", "write"}), at most MAX_PATHS lines. What the interpreter and its
packages load (sys.prefix, site-packages, envkit itself), kernel files and the run folder are left
out here; exec's supervisor (envkit/exec/reads.py) decides what of the rest is data.

In a reproduction (ENVKIT_READ_ONLY set to the user's own folders), opening a file there for
writing raises PermissionError: the reproduction runs in a worktree, and the user's checkpoints,
outputs and data, linked into it for reading, are never written through the link."""

from __future__ import annotations

import os
import sys
import threading

RUN_DIR_VAR = "ENVKIT_RUN_DIR"
READ_ONLY_VAR = "ENVKIT_READ_ONLY"  # os.pathsep-separated folders and files the command may read, never write
OFF_VAR = "ENVKIT_RECORD_OPENED"  # "0": record nothing (docs/exec.md)
OPENED = "opened.jsonl"  # runfolder/names.py spells it too (this module imports nothing of envkit's)
MAX_PATHS = 5000
DONE_MAX = 100_000  # paths remembered as read, so a second read costs a set lookup (bounded: a data set of millions of files)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_SKIP_SUFFIXES = (".py", ".pyc", ".pyi", ".so", ".pyd", ".dylib", ".pth")


def _writes(mode, flags) -> bool:
    if isinstance(flags, int) and flags & _WRITE_FLAGS:
        return True
    return isinstance(mode, str) and any(c in mode for c in "wax+")


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


class _Recorder:
    def __init__(self, run_dir: str, read_only: tuple[str, ...], record: bool):
        self.run_dir = os.path.realpath(run_dir) if run_dir else "\0"  # the command writes its metrics there
        self.read_only = read_only
        self.seen: set[tuple[str, bool]] = set()
        self.done: set[tuple[str, str]] = set()  # (path as given, the folder a relative one was given in) read before
        self.busy = threading.local()
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
        self.skipped = tuple(os.path.realpath(p) for p in prefixes if p) + ("/proc", "/sys", "/dev", self.run_dir)
        self.fd = -1
        if record:
            try:  # opened before the hook exists; written with os.write, which no audit hook sees
                self.fd = os.open(os.path.join(run_dir, OPENED), os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
            except OSError:
                self.fd = -1

    def __call__(self, event: str, args) -> None:
        if event != "open" or getattr(self.busy, "on", False):
            return
        path = args[0]
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str) or path.endswith(_SKIP_SUFFIXES):
            return  # a file descriptor (open(fd)), or code
        write = _writes(args[1], args[2] if len(args) > 2 else 0)
        if not write and (path, os.getcwd() if not path.startswith(os.sep) else "") in self.done:
            return  # read again (a data loader's 100th epoch): nothing new to say, at a set lookup's cost
        self.busy.on = True
        try:
            self._seen(path, write)
        finally:
            self.busy.on = False

    def _seen(self, path: str, write: bool) -> None:
        full = os.path.abspath(path)
        if write and self.read_only:
            real = os.path.realpath(full)
            if (_inside(real, self.read_only) or _inside(full, self.read_only)) and not _inside(real, (self.run_dir,)):
                raise PermissionError(13, "envkit reproduce: the user's own file is read-only in a reproduction "
                                          "(the run writes into its worktree, never into your tree)", path)
        if not write and not self.read_only and len(self.done) < DONE_MAX:
            self.done.add((path, os.getcwd() if not path.startswith(os.sep) else ""))
        if self.fd < 0 or (full, write) in self.seen or len(self.seen) >= MAX_PATHS:
            return
        if _inside(os.path.realpath(full), self.skipped):
            self.seen.add((full, write))
            return
        self.seen.add((full, write))
        line = '{"path": %s, "write": %s}\n' % (_quoted(full), "true" if write else "false")
        try:
            os.write(self.fd, line.encode("utf-8", "surrogateescape"))
        except OSError:
            self.fd = -1  # the run folder went away: recording is never worth a crashed run


def _quoted(s: str) -> str:
    """A JSON string without importing json inside an audit hook (json's import would open files)."""
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or 0xD800 <= ord(ch) <= 0xDFFF:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def install() -> None:
    """The hook, when this process runs under `envkit exec` (or a reproduction) and recording is on."""
    run_dir = os.environ.get(RUN_DIR_VAR, "")
    read_only = tuple(os.path.realpath(p) for p in os.environ.get(READ_ONLY_VAR, "").split(os.pathsep) if p)
    # under torchrun, rank 0 records for the run (the other ranks read the same files)
    record = bool(run_dir) and os.environ.get(OFF_VAR) != "0" and os.environ.get("RANK", "0") == "0"
    if record or read_only:
        sys.addaudithook(_Recorder(run_dir, read_only, record))
