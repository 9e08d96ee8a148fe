"""The run's checkpoints, behind one object (torchtitan's CheckpointManager is the model): the loop
and the recovery around it ask a `Checkpointer` to save, to resume and to roll back, and nothing
else writes or reads a checkpoint.

It knows the run folder's `checkpoints/` and the retention (`checkpoint.keep_last`), and holds what
a checkpoint is made of: the user's model (never the compiled or DDP-wrapped module), the
optimizer and the GradScaler, with `TrainState`'s counters and every RNG state. Two formats, each
written and read by its backend:

- one process or ddp: `step_XXXXXXXX.pt`, written by rank 0 alone (checkpoint.py: atomic, with a
  checksum trailer, loadable with torch.load(weights_only=True));
- fsdp: `step_XXXXXXXX.dcp/`, every process writing its shards with torch.distributed.checkpoint
  (sharded_checkpoint.py).

Either loads into either mode, on any process count: a checkpoint of another count is resharded
(or its full tensors cut into shards) and its data position converted (`TrainState.restore`).
The newest K that load are kept (`prune`: by validity, not by file name); one that does not load
is moved into checkpoints/unreadable/, never deleted, and a resume or a rollback takes the newest
that loads. A full disk while writing stops the run in one line, the previous checkpoints kept.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from envkit.config.config import Config
from envkit.config.schema import Parallel
from envkit.errors import EnvkitError
from envkit.runfolder.applog import append_line, open_append
from envkit.runfolder.folder import RunFolder
from envkit.train.recovery.guards import TrainingStopped
from envkit.train.recovery.injection import Injector
from envkit.train.run import checkpoint as plain
from envkit.train.run import sharded_checkpoint as sharded
from envkit.train.run.state import TrainState
from envkit.train.run.verified_file import CorruptCheckpoint

NAME = re.compile(r"^step_(\d+)\.(?:pt|dcp)$")  # .pt: a file (checkpoint.py); .dcp: a folder (sharded_checkpoint.py)
UNREADABLE = "unreadable"  # checkpoints/unreadable/: files pruning found unreadable, moved aside


class DiskFull(TrainingStopped):
    """No space left while writing a checkpoint; nothing was changed. Training stops (status
    "disk_full") with one line: going on without checkpoints would risk the work done."""

    def __init__(self, message: str):
        super().__init__(message, status="disk_full")


@dataclass(frozen=True)
class Checkpointer:
    folder: Path  # RUN_DIR/checkpoints
    keep_last: int  # checkpoint.keep_last: the newest valid ones kept
    sharded: bool  # training.parallel fsdp: step_*.dcp folders that every process writes
    rank: int
    world: int
    model: torch.nn.Module  # the user's model: what a checkpoint holds, whatever wraps it for training
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    config_hash: str  # of the declared config: written into every checkpoint
    hashes_accepted: frozenset[str]  # what a checkpoint of this config may carry (Config.hashes_accepted)
    batch_size: int  # training.batch_size per process, as this run trains it
    grad_accum: int
    log: Callable[[str], None]
    inject: Injector | None  # the tests' fault hook (a disk that fills up while a checkpoint is written); None in a user's run

    @classmethod
    def for_run(cls, run_dir: Path, cfg: Config, *, parallel: Parallel, rank: int, world: int, model: torch.nn.Module,
                optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, batch_size: int, log: Callable[[str], None],
                inject: Injector | None) -> "Checkpointer":
        return cls(RunFolder(run_dir).checkpoints, cfg.checkpoint.keep_last, parallel == "fsdp", rank, world, model, optimizer,
                   scaler, cfg.config_hash(), frozenset(cfg.hashes_accepted()), batch_size, cfg.training.grad_accum, log, inject)

    # -- writing
    def save(self, state: TrainState) -> Path | None:
        """Every process calls it. A step_*.pt file written by rank 0, or under fsdp a step_*.dcp
        folder written by all; then the older ones pruned to keep_last. The path on rank 0."""
        master = self.rank == 0
        if not self.sharded:
            return self._save_file(state) if master else None
        with disk_full_said(sharded.partial_path(self.folder, state.step)):
            path = sharded.save(self.folder, self.model, self.optimizer, self._fields(state), rank=self.rank, world=self.world)
        if master:
            prune(self.folder, path, self.keep_last, log=self.log)
        return path if master else None

    def _save_file(self, state: TrainState) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path, inject, run_dir = plain.path_for(self.folder, state.step), self.inject, self.folder.parent
        contents = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), **self._fields(state)}
        with disk_full_said(path):
            plain.save(path, contents, fault=(lambda: inject.disk_full(run_dir, state.step)) if inject else None)
        prune(self.folder, path, self.keep_last)  # an unreadable file met is said in train.log and on the console (_move_aside)
        return path

    def _fields(self, state: TrainState) -> dict:
        """Everything but the model's and the optimizer's tensors (a step_*.dcp folder's envkit.pt)."""
        return {"scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None, "rng": rng_state(),
                "config_hash": self.config_hash, "world": self.world, **state.checkpoint_fields()}

    # -- reading
    def newest(self) -> tuple[Path, dict] | None:
        """The newest checkpoint that loads, with its contents; unreadable ones are named and skipped."""
        return newest_valid(self.folder, log=self.log)

    def resume(self, how: str, state: TrainState) -> str | None:
        """`--resume auto` (the newest valid checkpoint) or a checkpoint's path: its name, or None when
        there is none yet. The weights, optimizer, scaler, RNG and `state` come from it."""
        found = self.newest() if how == "auto" else (Path(how), read(Path(how)))
        if not found:
            return None
        self.restore(state, *found)
        self.log(f"resumed from {found[0].name}: step {state.step}, data position {state.batches} batches")
        return found[0].name

    def restore(self, state: TrainState, path: Path, saved: dict) -> None:
        """Weights, optimizer, scaler, RNG and counters from a checkpoint of this config (`saved`, as
        `newest` or `read` found it at `path`)."""
        if saved["config_hash"] not in self.hashes_accepted:  # an epochs run's checkpoint of an older envkit too
            raise TrainingStopped(f"checkpoint {path.name} was written by a different config (hash {saved['config_hash']} != "
                                  f"{self.config_hash}); start a new run (--resume never) or restore the old config")
        if saved.get("format") == "dcp":
            sharded.load_into(path, self.model, self.optimizer)
        elif self.sharded:
            sharded.load_full_into(saved, self.model, self.optimizer)
        else:
            self.model.load_state_dict(saved["model"])
            self.optimizer.load_state_dict(saved["optimizer"])
        if saved.get("scaler"):
            self.scaler.load_state_dict(saved["scaler"])
        written_by = saved.get("world") or self.world
        if written_by != self.world:
            moved = "resharded" if self.sharded or saved.get("format") == "dcp" else "loaded"
            self.log(f"checkpoint {path.name} was written by {_processes(written_by)}, resumed on {self.world}: weights and "
                     f"optimizer state {moved}; {self._global_batch_said(saved, written_by)}")
        state.restore(saved, self.batch_size, self.grad_accum, world=self.world)
        set_rng_state(saved["rng"])

    def _global_batch_said(self, saved: dict, written_by: int) -> str:
        """Whether a step still trains the global batch it trained when the checkpoint was written:
        the sampler hands each process its slice of one global batch whatever their count
        (data/bundle.py), so the same global batch means the same samples in each step and the losses of
        an uninterrupted run, up to the order of fp32 sums; another one keeps the data position alone."""
        loop = saved.get("loop") or {}
        per = self.batch_size * self.grad_accum
        was = (loop.get("micro_batch") or self.batch_size) * (loop.get("grad_accum") or self.grad_accum)
        before, now = f"{_processes(written_by)} x {was}", f"{_processes(self.world)} x {per}"
        if was * written_by == per * self.world:
            return f"global batch {per * self.world} as before ({before}, now {now}): the steps go on as they would have"
        # batch_size is hashed, so it cannot be raised for the resume; global_batch_size (hashed instead) can keep it
        fix = (f"--nproc-per-node {written_by} (a run with training.global_batch_size keeps its global batch at any process "
               "count)")
        return (f"global batch {was * written_by} ({before}), now {per * self.world} ({now}): the data position is kept, the losses "
                f"will not match an uninterrupted run; to resume exactly: {fix}")


def _processes(n: int) -> str:
    return f"{n} process{'es' if n != 1 else ''}"


# -- every RNG a step draws from
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


# -- the checkpoints folder: listing, reading, retention
def list_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, path), newest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := NAME.match(p.name))]
    return sorted(found, reverse=True)


def read(path: Path, map_location="cpu") -> dict:
    """A checkpoint's contents (a step_*.pt file), or a sharded one's fields (a step_*.dcp folder:
    its tensors are read into the model by sharded_checkpoint.load_into)."""
    if Path(path).is_dir():
        return sharded.read_meta(path)
    return plain.load(path, map_location)


def newest_valid(folder: Path, map_location="cpu", log=None) -> tuple[Path, dict] | None:
    """The newest checkpoint that loads; unreadable ones are reported and skipped."""
    for _, path in list_checkpoints(folder):
        try:
            return path, read(path, map_location)
        except Exception as exc:  # noqa: BLE001 - a truncated or foreign file: try the previous one
            if log:
                what = "corrupt" if isinstance(exc, CorruptCheckpoint) else "unreadable"
                log(f"warning: skipping {what} checkpoint {path.name} (in {path.parent}): {type(exc).__name__}: {exc}; trying the previous one")
    return None


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


_verified: dict[str, tuple[int, int, int]] = {}  # path -> (size, mtime_ns, inode) of a checkpoint seen to load


def is_valid(path: Path) -> bool:
    """Whether the checkpoint verifies (its checksum) and loads as an envkit checkpoint; one seen to
    load is not read again while its size, mtime and inode stay the same."""
    key = _stat_key(path)
    if key is None:
        return False
    if _verified.get(str(path)) == key:
        return True
    try:
        read(path)
    except Exception:  # noqa: BLE001 - truncated, altered, foreign: not a checkpoint to keep
        return False
    _verified[str(path)] = key
    return True


def prune(folder: Path, written: Path, keep_last: int, log=None) -> list[Path]:
    """Keep the newest `keep_last` checkpoints that verify and load (by step), never the one just
    written (`written`) nor the newest valid one; delete older valid ones. A checkpoint met on the
    way that does not load is moved into checkpoints/unreadable/ (one line in train.log), never
    deleted: it is the user's to look at. Older ones than the kept ones are deleted as before.
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
            log_file = RunFolder(path.parent.parent).train_log
            fd = open_append(log_file)  # never through a symlink
            try:
                append_line(fd, (time.strftime("%Y-%m-%d %H:%M:%S ") + line + "\n").encode("utf-8"), log_file)
            finally:
                os.close(fd)
        except (OSError, EnvkitError):
            pass
        print(line, flush=True)
    return dest
