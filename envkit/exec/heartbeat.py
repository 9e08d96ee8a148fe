"""The heartbeat of an exec run, written from envkit's process (the command knows nothing of it):
every few seconds heartbeat.json gets the device sample (envkit/train/watching/device_sampler.py's
build_sample over nvidia-smi / ioreg), the CPU% and RSS of the command's whole process group (a
torchrun launch counts its workers), when it last printed a line and when it last logged a metric
(envkit.track), and the newest step and loss."""

from __future__ import annotations

import json
import os
import platform
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from envkit.facts import device_parse as dp
from envkit.facts.runner import LiveRunner
from envkit.fsutil import process_start_time
from envkit.runfolder.folder import RunFolder
from envkit.train.watching.device_sampler import build_sample

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice

PS_GROUP = ["ps", "-A", "-o", "pgid=,rss=,pcpu="]


def device_kind(system: str, machine: str, has_nvidia_smi: bool) -> TrainDevice:
    if has_nvidia_smi:
        return "cuda"
    return "mps" if system == "Darwin" and machine == "arm64" else "cpu"


def group_usage(ps_text: str | None, pgid: int) -> tuple[float | None, float | None]:
    """(RSS MiB, CPU%) summed over the processes of one group, from `ps -A -o pgid=,rss=,pcpu=` (pure)."""
    if not ps_text:
        return None, None
    rss_kb = cpu = 0.0
    seen = False
    for line in ps_text.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        try:
            if int(parts[0]) != pgid:
                continue
            rss_kb += float(parts[1])
            cpu += float(parts[2].replace(",", "."))
            seen = True
        except ValueError:
            continue
    return (round(rss_kb / 1024, 1), round(cpu, 1)) if seen else (None, None)


class HeartbeatWriter:
    """A daemon thread rewriting heartbeat.json every `interval` seconds while the command runs."""

    def __init__(self, run_dir: Path, *, interval: float = 3.0, runner=None):
        self.run_dir, self.interval = Path(run_dir), interval
        self.runner = runner or LiveRunner()
        self.device: TrainDevice = device_kind(platform.system(), platform.machine(), shutil.which("nvidia-smi") is not None)

        self.fields: dict = {"status": "running", "pid": os.getpid(), "pid_start": process_start_time(os.getpid()),
                             "host": platform.node()}
        self.last_output_at = time.time()
        self.last_metric_at: float | None = None
        self._metrics_offset = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.util: list[float] = []

    def start(self) -> HeartbeatWriter:
        self._thread = threading.Thread(target=self._run, name="envkit-exec-heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat()
            except Exception as exc:  # noqa: BLE001 - the watcher must never take the run down
                self.fields["note"] = f"heartbeat error: {type(exc).__name__}: {exc}"
            self._stop.wait(self.interval)

    def read_new_metrics(self) -> None:
        """The rows envkit.track appended since the last look: the newest step and loss."""
        path = RunFolder(self.run_dir).metrics_file
        try:
            with open(path, "rb") as fh:
                fh.seek(self._metrics_offset)
                data = fh.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # a half-written last line waits for the next look
        self._metrics_offset += end
        for line in data[:end].splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                self.last_metric_at = time.time()
                for key in ("step", "loss"):
                    if key in row:
                        self.fields[key] = row[key]

    def sample(self) -> dict:
        r = self.runner
        nvidia = ioreg = pressure = None
        if self.device == "cuda":
            res = r.run(dp.NVIDIA_SMI_SAMPLE, timeout=5)
            nvidia = None if res is None else (res.stdout if res.ok else res.stdout or res.stderr or "")
        elif self.device == "mps":
            res = r.run(dp.IOREG_ACCELERATOR, timeout=5)
            ioreg = res.stdout if res is not None and res.ok else None
            res = r.run(dp.MEMORY_PRESSURE, timeout=5)
            pressure = res.stdout if res is not None and res.ok else None
        s = build_sample(self.device, now=time.time(), nvidia_text=nvidia, ioreg_text=ioreg, memory_pressure_text=pressure)
        pgid = self.fields.get("pgid")
        if pgid:
            res = r.run(PS_GROUP, timeout=5)
            rss, cpu = group_usage(res.stdout if res is not None and res.ok else None, pgid)
            s.metrics.update({k: v for k, v in (("rss_mb", rss), ("cpu_pct", cpu)) if v is not None})
        if s.metrics.get("device_util_pct") is not None:
            self.util.append(s.metrics["device_util_pct"])
        return s.to_dict()

    def beat(self, **extra) -> None:
        self.fields.update(extra)
        self.read_new_metrics()
        device = self.sample()
        RunFolder(self.run_dir).write_heartbeat({**self.fields, "updated_at": time.time(), "last_output_at": self.last_output_at,
                                                      "last_metric_at": self.last_metric_at, "device": device})

    def last_activity(self) -> float:
        return max(self.last_output_at, self.last_metric_at or 0.0)
