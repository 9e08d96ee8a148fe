"""What a run tells the world: train.log, metrics.jsonl (one JSON object per logged step),
heartbeat.json (rewritten atomically every few seconds: step, loss, ETA, pid, updated_at) and the
progress display: a rich bar on a terminal, plain unbuffered lines otherwise. Rank 0 only.

A disk that fills up at any of these writes stops the run (TrainingStopped, status disk_full) with one
line; a line is appended with one write and cut back if the disk fills mid-line, so no half row is
left for the resumed run to glue its next one to (and a half row an older envkit or a kill left is cut
off when the run resumes)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import errno

from envkit.fsutil import process_start_time
from envkit.redact import strip_userinfo
from envkit.runfolder import names
from envkit.runfolder.applog import append_line, cut_torn_line, open_append
from envkit.runfolder.find import REWOUND
from envkit.runfolder.folder import RunFolder

if TYPE_CHECKING:
    from envkit.config.schema import ProgressDisplay
    from envkit.runfolder.records import TrainStatus


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def fmt_rate(x: float | None) -> str:
    if not x:
        return "?"
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k" if x >= 1e3 else f"{x:.0f}"



class Telemetry:
    def __init__(self, run_dir: Path, *, total_steps: int, unit: str, heartbeat_seconds: float, progress: ProgressDisplay,
                 enabled: bool = True, stopped: Callable[..., Exception] | None = None,
                 write_fault: Callable[[str, int], bool] | None = None):
        self.dir = Path(run_dir)
        self.folder = RunFolder(self.dir)
        self.enabled = enabled
        self.total, self.unit = total_steps, unit
        self.epochs, self.epoch = None, None  # with training.epochs: the goal and the latest logged position
        self.heartbeat_seconds = heartbeat_seconds
        self._last_beat = 0.0
        self._warm_from: tuple[float, str] | None = None  # (perf_counter, what) while the first step runs
        # with the pid, for `envkit stop`: a PID alone may have been given to another program since
        self._pid_start = process_start_time(os.getpid()) if enabled else None
        self.extra_fields = None  # a callable adding fields to every heartbeat (the device sample, hints)
        self.sinks: list = []  # callables receiving every metrics row (trackers)
        self.step = 0  # the latest step logged: where an injected disk fault fires (recovery/injection.py)
        self.full: Path | None = None  # the file the disk filled up on: the run is stopping
        # given by the loop (train/run), which may import train/recovery: the stop a full disk raises
        # (TrainingStopped(message, status=)) and the tests' fault hook (name, step) -> bool, None in a user's run
        self.stopped = stopped
        self.write_fault = write_fault
        torn = [name for name in (names.METRICS, names.TRAIN_LOG) if enabled and cut_torn_line(self.dir / name)]
        self._log = open_append(self.folder.train_log) if enabled else None
        self._metrics = open_append(self.folder.metrics_file) if enabled else None
        mode = progress
        if mode == "auto":
            mode = "rich" if sys.stdout.isatty() else "plain"
        if mode == "rich":
            try:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
            except ImportError:
                mode = "plain"
        self.mode = mode if enabled else "none"
        self._bar = None
        if self.mode == "rich":
            self._bar = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                                 TimeRemainingColumn(), transient=False)
            self._task = self._bar.add_task("train", total=total_steps, info="")
        for name in torn:
            self.log(f"warning: the last line of {name} was cut off mid-write (a full disk or a kill): removed it")

    # -- writes: one line at once, a full disk stops the run
    def _fault(self, name: str) -> bool:
        return self.write_fault is not None and self.write_fault(name, self.step)

    def _append(self, fd: int | None, name: str, text: str) -> None:
        if fd is None:  # closed: the run has ended
            return
        try:
            append_line(fd, text.encode("utf-8"), self.dir / name, fault=lambda: self._fault(name))
        except OSError as exc:
            self._disk_full(exc, name)

    def _atomic(self, name: str, write: Callable[[dict], None], data: dict) -> None:
        try:
            if self._fault(name):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.dir / name))
            write(data)
        except OSError as exc:
            self._disk_full(exc, name)

    def _disk_full(self, exc: OSError, name: str) -> None:
        """ENOSPC: stop the run in one line naming the file and the checkpoint kept. Once stopping,
        what cannot be written any more is dropped (the console still shows it)."""
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or self.stopped is None:
            raise exc
        if self.full is not None:
            return
        self.full = self.dir / name
        kept = sorted(p.name for p in self.folder.checkpoints.glob("step_*.pt"))
        raise self.stopped(f"no space left on the device while writing {name} in {self.dir} at step {self.step}: the run "
                              f"stopped with nothing half-written ({'checkpoint ' + kept[-1] + ' kept' if kept else 'no checkpoint yet'}); "
                              "free some space, then `envkit run` again resumes", status="disk_full") from None

    def summary(self, data: dict) -> None:
        self._atomic(names.SUMMARY, self.folder.write_summary, data)

    # -- lines
    def log(self, message: str) -> None:
        if not self.enabled:
            return
        message = strip_userinfo(message)  # a URL in a message (a dataset, an index) keeps no password
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        try:
            self._append(self._log, names.TRAIN_LOG, f"{stamp} {message}\n")
        finally:  # shown even when the disk is full
            self._show(message)

    def _show(self, message: str) -> None:
        if self._bar is not None and self._bar.live.is_started:
            self._bar.console.print(message, highlight=False, markup=False)
        elif self.mode != "none":
            print(message, flush=True)

    def start(self, step: int) -> None:
        if self._bar is not None:
            self._bar.start()
            self._bar.update(self._task, completed=step)

    def warming_up(self, step: int, compiling: bool) -> None:
        """Until the first step ends the progress says what the wait is: compiling (torch.compile
        builds its kernels in that step) or warming up (caches, workers, the first allocations)."""
        self._warm_from = (time.perf_counter(), "compilation" if compiling else "warm-up")
        what = "compiling" if compiling else "warming up"
        if self._bar is not None:
            self._bar.update(self._task, info=f"{what} until the first step ends")
        elif self.mode == "plain":
            self._plain(f"step {step}/{self.total} | {what} until the first step ends")

    def first_step_done(self, step: int) -> None:
        took = ""
        if self._warm_from is not None:
            since, what = self._warm_from
            took = f" in {time.perf_counter() - since:.1f}s ({what} included)"
        if self._bar is not None:
            self._bar.update(self._task, completed=step, info=f"first step done{took}")
        elif self.mode == "plain":
            self._plain(f"step {step}/{self.total} | first step done{took}")

    def _plain(self, line: str) -> None:
        print(line, flush=True)
        self._append(self._log, names.TRAIN_LOG, time.strftime("%Y-%m-%d %H:%M:%S ") + line + "\n")

    def set_epochs(self, epochs: int, total_steps: int) -> None:
        """training.epochs: the step count is known once the data is; progress and heartbeat speak epochs."""
        self.epochs, self.total = epochs, total_steps
        if self._bar is not None:
            self._bar.update(self._task, total=total_steps)

    def stop(self) -> None:
        if self._bar is not None and self._bar.live.is_started:
            self._bar.stop()

    def metrics(self, row: dict) -> None:
        if self.enabled:
            self.step = row.get("step", self.step)
            self._append(self._metrics, names.METRICS, json.dumps(row, default=float) + "\n")
            for sink in self.sinks:
                sink(row)

    def rewound(self, step: int, why: str) -> None:
        """The run goes on from `step` (a resume, a NaN rollback): the rows logged after it are
        superseded by the ones about to come. A marker row says so, so that readers (read_metrics)
        drop them instead of showing two values for a step; nothing already written is rewritten."""
        if self.enabled and self._metrics is not None and os.fstat(self._metrics).st_size:
            self._append(self._metrics, names.METRICS,
                         json.dumps({REWOUND: step, "why": why, "time": round(time.time(), 3)}) + "\n")

    def progress(self, step: int, row: dict, eta: float | None) -> None:
        if not self.enabled:
            return
        rate = row.get("tokens_per_second") or row.get("samples_per_second")
        unit = "tok/s" if "tokens_per_second" in row else "samples/s"
        mfu = row.get("mfu")
        parts = [f"loss {row['loss']:.4f}", f"lr {row['lr']:.2e}", f"{fmt_rate(rate)} {unit}"]
        if self.epochs:
            self.epoch = row.get("epoch")
            parts.insert(0, f"epoch {self.epoch or 0:.2f}/{self.epochs}")
        if mfu is not None:
            parts.append(f"mfu {100 * mfu:.1f}%")
        if row.get("memory_mb"):
            parts.append(f"mem {row['memory_mb']:.0f}MB")
        if row.get("device_util_pct") is not None:
            parts.append(f"util {row['device_util_pct']:.0f}%")
        if row.get("data_wait_fraction") is not None:
            parts.append(f"data wait {100 * row['data_wait_fraction']:.0f}%")
        if self._bar is not None:
            self._bar.update(self._task, completed=step, info=" | ".join(parts))
        elif self.mode == "plain":
            pct = 100.0 * step / max(1, self.total)
            line = f"step {step}/{self.total} ({pct:.0f}%) | " + " | ".join(parts) + f" | dt {row.get('dt_ms', 0):.0f}ms | ETA {fmt_duration(eta)}"
            print(line, flush=True)
            self._append(self._log, names.TRAIN_LOG, time.strftime("%Y-%m-%d %H:%M:%S ") + line + "\n")

    def heartbeat(self, *, step: int, loss: float | None, eta: float | None, status: TrainStatus = "running", force: bool = False,
                  **extra) -> None:
        if not self.enabled:
            return
        now = time.time()
        if not force and now - self._last_beat < self.heartbeat_seconds:
            return
        self._last_beat = now
        self.step = step
        self._atomic(names.HEARTBEAT, self.folder.write_heartbeat, {"status": status, "step": step, "max_steps": self.total, "loss": loss,
                                                 "eta_seconds": None if eta is None else round(eta, 1), "pid": os.getpid(),
                                                 "pid_start": self._pid_start,
                                                 "host": os.uname().nodename if hasattr(os, "uname") else None,
                                                 "updated_at": now, **(self.extra_fields() if self.extra_fields else {}),
                                                 **({"epoch": self.epoch, "epochs": self.epochs} if self.epochs else {}),
                                                 **extra})

    def close(self) -> None:
        self.stop()
        for fd in (self._log, self._metrics):
            if fd is not None:
                os.close(fd)
        self._log = self._metrics = None
