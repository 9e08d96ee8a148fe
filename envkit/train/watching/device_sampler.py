"""The device, sampled every few seconds in a background thread of the rank-0 process (never inside
the training step): GPU utilization, memory, power and temperature (nvidia-smi), Apple silicon's
IOAccelerator statistics (ioreg, no sudo) and memory pressure, torch's own allocator figures, and
the process's CPU%, RSS and live DataLoader workers.

Every command and file goes through the facts Runner, so `build_sample` (pure) is tested with
recorded outputs; the thread only gathers inputs for it. A probe that fails is a note, never an
exception in the trainer.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envkit.facts import device_parse as dp
from envkit.facts.runner import LiveRunner, Runner

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice

POWER_NOTE_MPS = "power: n/a (macOS reports GPU power only through `sudo powermetrics`)"


@dataclass
class DeviceSample:
    """One reading. `metrics` is flat (it goes into metrics.jsonl rows and trackers as is)."""

    time: float
    device: TrainDevice
    metrics: dict = field(default_factory=dict)
    gpus: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"sampled_at": round(self.time, 3), "device": self.device, **self.metrics,
                **({"gpus": self.gpus} if self.gpus else {}), **({"notes": self.notes} if self.notes else {})}


def _mean(values):
    values = [v for v in values if v is not None]
    return round(sum(values) / len(values), 1) if values else None


def _sum(values):
    values = [v for v in values if v is not None]
    return round(sum(values), 1) if values else None


def build_sample(device: TrainDevice, *, now: float, nvidia_text: str | None = None, ioreg_text: str | None = None,
                 memory_pressure_text: str | None = None, rss_text: str | None = None, rss_from_ps: bool = False,
                 cpu_pct: float | None = None, torch_mem: dict | None = None, workers: int | None = None,
                 uuids: list[str] | None = None) -> DeviceSample:
    """Assemble one sample from raw probe outputs (pure). `uuids`: the GPUs this run uses; the
    flat metrics average (utilization, temperature) or add up (memory, power) over those."""
    s = DeviceSample(time=now, device=device)
    m = s.metrics
    if device == "cuda":
        gpus = dp.parse_nvidia_smi_sample(nvidia_text)
        if nvidia_text is not None and not gpus:
            s.notes.append("nvidia-smi: no readable GPU lines")
        elif nvidia_text is None:
            s.notes.append("nvidia-smi: not found (utilization, power and temperature unknown)")
        used = [g for g in gpus if not uuids or g.uuid in uuids] or gpus
        s.gpus = [g.to_dict() for g in gpus]
        if used:
            m.update(device_util_pct=_mean(g.util_pct for g in used), device_mem_used_mb=_sum(g.mem_used_mb for g in used),
                     device_mem_total_mb=_sum(g.mem_total_mb for g in used), power_w=_sum(g.power_w for g in used),
                     temp_c=max((g.temp_c for g in used if g.temp_c is not None), default=None))
            if any(g.power_w is None for g in used):
                s.notes.append("power: not reported by this GPU/driver")
    elif device == "mps":
        apple = dp.parse_ioreg_accelerator(ioreg_text)
        if apple is None:
            s.notes.append("ioreg: no IOAccelerator PerformanceStatistics")
        else:
            m.update(device_util_pct=apple.util_pct, renderer_util_pct=apple.renderer_pct, device_mem_used_mb=apple.in_use_mb,
                     device_mem_alloc_mb=apple.alloc_mb)
        free = dp.parse_memory_pressure(memory_pressure_text)
        if free is not None:
            m["system_mem_free_pct"] = free
        s.notes.append(POWER_NOTE_MPS)
    for key, value in (torch_mem or {}).items():
        m[key] = value
    if device == "mps" and m.get("torch_limit_mb"):
        m["device_mem_total_mb"] = m["torch_limit_mb"]  # Metal's recommended working set: the practical limit
    rss = dp.parse_ps_rss_mb(rss_text) if rss_from_ps else dp.parse_proc_status_rss_mb(rss_text)
    m.update(cpu_pct=None if cpu_pct is None else round(cpu_pct, 1), rss_mb=rss, dataloader_workers=workers)
    s.metrics = {k: v for k, v in m.items() if v is not None}
    return s


def torch_memory(device_type: TrainDevice, device) -> dict:
    """torch's allocator figures in MiB: CUDA allocated/reserved/peak, MPS current/driver/limit."""
    try:
        import torch

        if device_type == "cuda":
            mb = 2**20
            return {"torch_allocated_mb": round(torch.cuda.memory_allocated(device) / mb, 1),
                    "torch_reserved_mb": round(torch.cuda.memory_reserved(device) / mb, 1),
                    "torch_peak_mb": round(torch.cuda.max_memory_allocated(device) / mb, 1)}
        if device_type == "mps":
            out = {"torch_allocated_mb": round(torch.mps.current_allocated_memory() / 2**20, 1),
                   "torch_driver_mb": round(torch.mps.driver_allocated_memory() / 2**20, 1)}
            if hasattr(torch.mps, "recommended_max_memory"):  # torch 2.3+
                out["torch_limit_mb"] = round(torch.mps.recommended_max_memory() / 2**20, 1)
            return out
    except Exception:  # noqa: BLE001 - a figure torch cannot give is left out
        return {}
    return {}


def cuda_uuids(device_type: TrainDevice, local_devices: int) -> list[str]:
    """nvidia-smi's "GPU-..." ids of the CUDA devices this host's ranks use (cuda:0..n-1)."""
    if device_type != "cuda":
        return []
    try:
        import torch

        out = []
        for i in range(min(local_devices, torch.cuda.device_count())):
            uuid = getattr(torch.cuda.get_device_properties(i), "uuid", None)
            if uuid is not None:
                text = str(uuid)
                out.append(text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}")
        return out
    except Exception:  # noqa: BLE001 - no UUIDs is an answer: the sampler then watches every GPU nvidia-smi lists
        return []


class DeviceSampler:
    """A daemon thread taking a DeviceSample every `interval` seconds; `latest()` and the run's
    averages are read by the training thread (a lock guards them)."""

    def __init__(self, device_type: TrainDevice, device=None, *, interval: float = 3.0, runner: Runner | None = None,
                 local_devices: int = 1):
        self.device_type: TrainDevice = device_type
        self.device, self.interval = device, interval
        self.runner = runner or LiveRunner()
        self.uuids = cuda_uuids(device_type, local_devices)
        self._lock = threading.Lock()
        self._latest: DeviceSample | None = None
        self._util: list[float] = []
        self._count = 0
        self._peak_mem_frac: float | None = None
        self._training_since: float | None = None  # when the first step ended: utilization counts from then
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="envkit-device-sampler", daemon=True)
        self._cpu_clock = (time.process_time(), time.monotonic())

    def start(self) -> DeviceSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._record(self.sample())
            except Exception as exc:  # noqa: BLE001 - a broken probe must not stop training
                with self._lock:
                    self._latest = DeviceSample(time=time.time(), device=self.device_type,
                                                notes=[f"sampler error: {type(exc).__name__}: {exc}"])
            self._stop.wait(self.interval)

    def _cpu_pct(self) -> float | None:
        cpu, wall = time.process_time(), time.monotonic()
        last_cpu, last_wall = self._cpu_clock
        self._cpu_clock = (cpu, wall)
        return 100.0 * (cpu - last_cpu) / (wall - last_wall) if wall > last_wall else None

    def sample(self) -> DeviceSample:
        r = self.runner
        nvidia = ioreg = pressure = None
        if self.device_type == "cuda":
            res = r.run(dp.NVIDIA_SMI_SAMPLE, timeout=5)
            nvidia = None if res is None else (res.stdout if res.ok else res.stdout or res.stderr or "")
        elif self.device_type == "mps":
            res = r.run(dp.IOREG_ACCELERATOR, timeout=5)
            ioreg = res.stdout if res is not None and res.ok else None
            res = r.run(dp.MEMORY_PRESSURE, timeout=5)
            pressure = res.stdout if res is not None and res.ok else None
        rss_text = r.read("/proc/self/status")
        from_ps = rss_text is None
        if from_ps:
            res = r.run(["ps", "-o", "rss=", "-p", str(os.getpid())], timeout=5)
            rss_text = res.stdout if res is not None and res.ok else None
        return build_sample(self.device_type, now=time.time(), nvidia_text=nvidia, ioreg_text=ioreg,
                            memory_pressure_text=pressure, rss_text=rss_text, rss_from_ps=from_ps, cpu_pct=self._cpu_pct(),
                            torch_mem=torch_memory(self.device_type, self.device),
                            workers=len(multiprocessing.active_children()), uuids=self.uuids)

    def training_started(self, at: float | None = None) -> None:
        """The first step has ended (at `at`, time.time()): samples taken from then on measure the
        training; the ones before are warm-up, their utilization unknown (never a 0% while it runs)."""
        with self._lock:
            self._training_since = time.time() if at is None else at

    def in_training(self, s: DeviceSample | None) -> bool:
        since = self._training_since
        return s is not None and since is not None and s.time >= since

    def _record(self, s: DeviceSample) -> None:
        m = s.metrics
        with self._lock:
            self._latest = s
            self._count += 1
            if m.get("device_util_pct") is not None and self.in_training(s):
                self._util.append(m["device_util_pct"])
            used = max(m.get("device_mem_used_mb") or 0, m.get("torch_reserved_mb") or 0)
            if m.get("device_mem_total_mb") and used:
                frac = used / m["device_mem_total_mb"]
                self._peak_mem_frac = max(frac, self._peak_mem_frac or 0)

    def latest(self) -> DeviceSample | None:
        with self._lock:
            return self._latest

    def summary(self) -> dict:
        with self._lock:
            out: dict[str, int | float] = {"device_samples": self._count}
            if self._util:
                out["avg_device_util_pct"] = round(sum(self._util) / len(self._util), 1)
            if self._peak_mem_frac is not None:
                out["peak_device_mem_fraction"] = round(self._peak_mem_frac, 4)
            return out
