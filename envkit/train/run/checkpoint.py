"""Checkpoints: model, optimizer, scaler, every RNG state, the data position and the config hash,
written to a temporary file and renamed (never half a file), keeping the newest K that load (`prune`:
kept by validity, not by file name; unreadable ones moved into checkpoints/unreadable/). Loaded with
`torch.load(weights_only=True)`: a checkpoint is data, never code.

Each file ends with a checksum of its data, written after the data:
    <torch.save bytes> b"\nENVKIT-SHA256 " <64 hex digits> b"\n"
so a file truncated or altered later (a full disk, a copy cut short, bit rot) is detected and
named, and the previous valid checkpoint is used. Files without the trailer (written by an older
envkit) still load when torch can read them. Disk full while writing: one clear error, the
temporary file removed, the previous checkpoints untouched."""

from __future__ import annotations

import contextlib
import os
import errno
import io
import random
import re
from pathlib import Path

import torch

from envkit.train.run import sharded_checkpoint as sharded
from envkit.train.run.verified_file import CorruptCheckpoint, verified_bytes, write_verified
from envkit.errors import EnvkitError
from envkit.train.recovery.guards import TrainingStopped

NAME = re.compile(r"^step_(\d+)\.(?:pt|dcp)$")  # .dcp: a folder, training.parallel fsdp (sharded_checkpoint.py)
REQUIRED = ("step", "model", "optimizer", "rng", "data", "config_hash")


class DiskFull(TrainingStopped):
    """No space left while writing a checkpoint; nothing was changed. Training stops (status
    "disk_full") with one line: going on without checkpoints would risk the work done."""

    def __init__(self, message: str):
        super().__init__(message, status="disk_full")


def rng_state() -> dict:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if hasattr(torch, "mps") and torch.backends.mps.is_available():
        try:
            state["mps"] = torch.mps.get_rng_state()
        except Exception:  # noqa: BLE001 - older torch
            pass
    return state


def set_rng_state(state: dict) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "mps" in state and hasattr(torch, "mps") and torch.backends.mps.is_available():
        torch.mps.set_rng_state(state["mps"])


def list_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, path), newest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := NAME.match(p.name))]
    return sorted(found, reverse=True)


def save(folder: Path, state: dict, keep_last: int) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{state['step']:08d}.pt"
    from envkit.train.recovery import injection

    inject = injection.from_env()  # None unless a test set ENVKIT_TRAIN_INJECT
    with disk_full_said(path):
        write_verified(path, state, fault=(lambda: inject.disk_full(folder.parent, state["step"])) if inject else None)
    prune(folder, path, keep_last)
    return path


@contextlib.contextmanager
def disk_full_said(path: Path):
    """A full disk while writing checkpoint `path`: DiskFull, in one line naming what was kept."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            folder = Path(path).parent
            kept = [p.name for _, p in list_checkpoints(folder)[:1]]
            raise DiskFull(f"no space left on the device while writing checkpoint {Path(path).name} in {folder}: "
                           f"nothing was written ({'previous checkpoint ' + kept[0] + ' kept' if kept else 'no earlier checkpoint'}); "
                           "free some space (or lower checkpoint.keep_last), then `envkit run` again resumes") from exc
        raise


UNREADABLE = "unreadable"  # checkpoints/unreadable/: files pruning found unreadable, moved aside
_verified: dict[str, tuple[int, int, int]] = {}  # path -> (size, mtime_ns, inode) of a file seen to load


def is_valid(path: Path) -> bool:
    """Whether the file verifies (its checksum) and loads as an envkit checkpoint; a file seen to
    load is not read again while its size, mtime and inode stay the same."""
    key = _stat_key(path)
    if key is None:
        return False
    if _verified.get(str(path)) == key:
        return True
    try:
        load(path)
    except Exception:  # noqa: BLE001 - truncated, altered, foreign: not a checkpoint to keep
        return False
    _verified[str(path)] = key
    return True


def prune(folder: Path, written: Path, keep_last: int, log=None) -> list[Path]:
    """Keep the newest `keep_last` checkpoints that verify and load (by step), never the one just
    written (`written`) nor the newest valid one; delete older valid ones. A file met on the way
    that does not load is moved into checkpoints/unreadable/ (one line in train.log), never
    deleted: it is the user's to look at. Files older than the kept ones are deleted as before.
    Returns the paths moved aside."""
    folder, written = Path(folder), Path(written)
    key = _stat_key(written)
    if key is not None:  # just written and fsynced: valid without reading it back
        _verified[str(written)] = key
    kept, moved, delete = 0, [], []
    for _, p in list_checkpoints(folder):
        if kept >= keep_last and p != written:
            delete.append(p)
            continue
        if p == written or is_valid(p):
            kept += 1
            continue
        moved.append(_move_aside(p, log))
    for old in delete:
        _verified.pop(str(old), None)
        if old.is_dir():
            sharded.remove(old)
            continue
        try:
            old.unlink()
        except FileNotFoundError:
            pass
    return moved


def _stat_key(path: Path) -> tuple[int, int, int] | None:
    path = Path(path)
    try:
        st = (path / sharded.META if path.is_dir() else path).stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _move_aside(path: Path, log=None) -> Path:
    import time

    aside = path.parent / UNREADABLE
    aside.mkdir(exist_ok=True)
    dest, i = aside / path.name, 1
    while dest.exists():
        i += 1
        dest = aside / f"{path.stem}.{i}{path.suffix}"
    os.replace(path, dest)
    line = (f"warning: checkpoint {path.name} is unreadable (checksum or load failed): moved to {dest.relative_to(path.parent.parent)} "
            f"(not deleted; it no longer counts toward checkpoint.keep_last)")
    if log is not None:
        log(line)
    else:  # the trainer's log is RUN_DIR/train.log (watching/telemetry.py): one line there, and on the console
        try:
            from envkit.runfolder.applog import append_line, open_append

            fd = open_append(path.parent.parent / "train.log")  # never through a symlink
            try:
                append_line(fd, (time.strftime("%Y-%m-%d %H:%M:%S ") + line + "\n").encode("utf-8"), path.parent.parent / "train.log")
            finally:
                os.close(fd)
        except (OSError, EnvkitError):
            pass
        print(line, flush=True)
    return dest


def load(path: Path, map_location="cpu") -> dict:
    """A checkpoint's contents (a step_*.pt file), or a sharded one's fields (a step_*.dcp folder:
    its tensors are read into the model by sharded_checkpoint.load_into)."""
    if Path(path).is_dir():
        return sharded.read_meta(path)
    state = torch.load(io.BytesIO(verified_bytes(path)), map_location=map_location, weights_only=True)
    missing = [k for k in REQUIRED if k not in state]
    if missing:
        raise ValueError(f"not an envkit checkpoint (missing {', '.join(missing)})")
    return state


def newest_valid(folder: Path, map_location="cpu", log=None) -> tuple[Path, dict] | None:
    """The newest checkpoint that loads; unreadable ones are reported and skipped."""
    for _, path in list_checkpoints(folder):
        try:
            return path, load(path, map_location)
        except Exception as exc:  # noqa: BLE001 - a truncated or foreign file: try the previous one
            if log:
                what = "corrupt" if isinstance(exc, CorruptCheckpoint) else "unreadable"
                log(f"warning: skipping {what} checkpoint {path.name} (in {path.parent}): {type(exc).__name__}: {exc}; trying the previous one")
    return None
