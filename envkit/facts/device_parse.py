"""Pure parsers for what the device sampler reads while a run trains: nvidia-smi's query CSV,
macOS `ioreg -c IOAccelerator` (the `-a` plist, or the plain text form), `memory_pressure`, and the
process's resident memory (/proc/self/status on Linux, `ps -o rss=` elsewhere).

Each returns None (or an empty list) for anything it cannot read: garbled output is "unknown",
never a crash and never a made-up zero.
"""

from __future__ import annotations

import math
import plistlib
import re
from dataclasses import asdict, dataclass

# The one nvidia-smi query the sampler runs (and benchmarks/record_device_sample.py records).
# uuid lets rank 0 keep only the GPUs its run uses, whatever CUDA_VISIBLE_DEVICES renumbered.
NVIDIA_FIELDS = ("index", "uuid", "utilization.gpu", "memory.used", "memory.total", "power.draw", "temperature.gpu")
NVIDIA_SMI_SAMPLE = ["nvidia-smi", "--query-gpu=" + ",".join(NVIDIA_FIELDS), "--format=csv,noheader,nounits"]
IOREG_ACCELERATOR = ["ioreg", "-r", "-d", "1", "-w", "0", "-c", "IOAccelerator", "-a"]
MEMORY_PRESSURE = ["memory_pressure"]


@dataclass
class GpuReading:
    """One NVIDIA GPU at one moment (MiB, %, W, deg C); None where the driver did not answer."""

    index: int
    uuid: str | None = None
    util_pct: float | None = None
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    power_w: float | None = None
    temp_c: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class AppleGpuReading:
    """IOAccelerator's PerformanceStatistics (no sudo needed). Memory in MiB."""

    util_pct: float | None = None  # "Device Utilization %"
    renderer_pct: float | None = None  # "Renderer Utilization %"
    tiler_pct: float | None = None  # "Tiler Utilization %"
    in_use_mb: float | None = None  # "In use system memory": what the GPU holds now
    alloc_mb: float | None = None  # "Alloc system memory": what the driver has allocated
    model: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _number(text: str) -> float | None:
    """"34" -> 34.0; "[N/A]", "[Not Supported]", "NaN", "Inf", "" -> None."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_nvidia_smi_sample(text: str | None) -> list[GpuReading]:
    """Lines of `index, uuid, util, mem used, mem total, power, temp` (NVIDIA_SMI_SAMPLE).
    A line with the wrong number of fields or no integer index (an error message, a half-written
    line) is skipped; a field the driver does not answer ("[N/A]", "[Not Supported]") is None."""
    out: list[GpuReading] = []
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(NVIDIA_FIELDS) or not re.fullmatch(r"\d+", parts[0]):
            continue
        _, uuid, util, used, total, power, temp = parts
        reading = GpuReading(index=int(parts[0]), uuid=uuid if uuid.startswith(("GPU-", "MIG-")) else None,
                             util_pct=_number(util), mem_used_mb=_number(used), mem_total_mb=_number(total),
                             power_w=_number(power), temp_c=_number(temp))
        if reading.util_pct is not None and not 0 <= reading.util_pct <= 100:
            reading.util_pct = None
        out.append(reading)
    return out


def _apple_from_stats(stats: dict, model: str | None) -> AppleGpuReading | None:
    def num(key: str) -> float | None:
        value = stats.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value)

    def mb(key: str) -> float | None:
        value = num(key)
        return None if value is None else round(value / 2**20, 1)

    reading = AppleGpuReading(util_pct=num("Device Utilization %"), renderer_pct=num("Renderer Utilization %"),
                              tiler_pct=num("Tiler Utilization %"), in_use_mb=mb("In use system memory"),
                              alloc_mb=mb("Alloc system memory"), model=model if isinstance(model, str) else None)
    if reading.util_pct is None and reading.in_use_mb is None and reading.renderer_pct is None:
        return None
    return reading


_TEXT_STATS = re.compile(r'"PerformanceStatistics"\s*=\s*\{([^}]*)\}')
_TEXT_PAIR = re.compile(r'"([^"]+)"\s*=\s*(-?\d+(?:\.\d+)?)')
_TEXT_MODEL = re.compile(r'"model"\s*=\s*"([^"]*)"')


def parse_ioreg_accelerator(text: str | None) -> AppleGpuReading | None:
    """`ioreg -r -d 1 -w 0 -c IOAccelerator -a` (an XML plist array of accelerators), or the same
    command's text form without `-a`. The first accelerator that reports PerformanceStatistics wins
    (an Apple silicon Mac has one)."""
    if not text or not text.strip():
        return None
    if text.lstrip().startswith("<?xml") or text.lstrip().startswith("<plist"):
        try:
            data = plistlib.loads(text.encode("utf-8", errors="replace"))
        except Exception:  # noqa: BLE001 - plistlib raises several kinds on a truncated plist
            data = None
        entries = data if isinstance(data, list) else [data] if isinstance(data, dict) else []
        for entry in entries:
            if isinstance(entry, dict) and isinstance(entry.get("PerformanceStatistics"), dict):
                reading = _apple_from_stats(entry["PerformanceStatistics"], entry.get("model"))
                if reading:
                    return reading
        return None
    model = _TEXT_MODEL.search(text)
    for block in _TEXT_STATS.finditer(text):
        stats = {k: float(v) for k, v in _TEXT_PAIR.findall(block.group(1))}
        reading = _apple_from_stats(stats, model.group(1) if model else None)
        if reading:
            return reading
    return None


def parse_memory_pressure(text: str | None) -> float | None:
    """macOS `memory_pressure`: "System-wide memory free percentage: 62%" -> 62.0."""
    m = re.search(r"System-wide memory free percentage:\s*(\d+(?:\.\d+)?)\s*%", text or "")
    return float(m.group(1)) if m else None


def parse_proc_status_rss_mb(text: str | None) -> float | None:
    """/proc/self/status: "VmRSS:   123456 kB" -> MiB."""
    m = re.search(r"^VmRSS:\s*(\d+)\s*kB", text or "", re.MULTILINE)
    return round(int(m.group(1)) / 1024, 1) if m else None


def parse_ps_rss_mb(text: str | None) -> float | None:
    """`ps -o rss= -p PID` (KiB, macOS and Linux) -> MiB."""
    line = (text or "").strip()
    return round(int(line) / 1024, 1) if re.fullmatch(r"\d+", line) else None
