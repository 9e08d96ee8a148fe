"""Pure parsers: text a command printed (or a file held) in, typed values out.

Each returns None for anything it cannot read: garbled output means "unknown", never a crash.
"""

from __future__ import annotations

import json
import re

from packaging.version import InvalidVersion, Version

from envkit.facts.model import ChipTier

_APPLE_CHIP = re.compile(r"\bApple\s*(M\d+)(?:\s+(Pro|Max|Ultra))?\b", re.IGNORECASE)
TIERS: dict[str, ChipTier] = {"pro": "Pro", "max": "Max", "ultra": "Ultra"}  # the tier as _APPLE_CHIP finds it, any case


def first_line(text: str | None) -> str | None:
    """The first non-blank line, with control characters dropped (garbled output stays printable)."""
    if text is None:
        return None
    for line in text.splitlines():
        line = "".join(ch for ch in line if ch.isprintable()).strip()
        if line:
            return line
    return None


def parse_int(text: str | None) -> int | None:
    line = first_line(text)
    if line is None:
        return None
    m = re.fullmatch(r"[+-]?\d+", line)
    return int(line) if m else None


def parse_bool01(text: str | None) -> bool | None:
    value = parse_int(text)
    return None if value is None or value not in (0, 1) else bool(value)


def parse_macos_version(text: str | None) -> str | None:
    line = first_line(text)
    if line and re.fullmatch(r"\d+(\.\d+){0,2}", line):
        return line
    if line:  # full `sw_vers` output: "ProductVersion:\t12.7.6"
        m = re.search(r"ProductVersion:\s*(\d+(?:\.\d+){0,2})", text or "")
        if m:
            return m.group(1)
    return None


def parse_macos_build(text: str | None) -> str | None:
    line = first_line(text)
    if line and re.fullmatch(r"\d{2}[A-Z]\d+[a-z]?", line):
        return line
    m = re.search(r"BuildVersion:\s*(\d{2}[A-Z]\d+[a-z]?)", text or "")
    return m.group(1) if m else None


def parse_apple_chip(text: str | None) -> tuple[str, ChipTier] | None:
    """"Apple M3 Max" -> ("M3", "Max"); "Apple M1" -> ("M1", "base"). Also reads the
    Big Sur localisation key "kHW_AppleM1Item" and "AppleM2Pro"-like names."""
    if not text:
        return None
    cleaned = re.sub(r"kHW_(Apple)(M\d+)(Pro|Max|Ultra)?Item", r"\1 \2 \3", text)
    cleaned = re.sub(r"Apple(M\d+)", r"Apple \1", cleaned)
    m = _APPLE_CHIP.search(cleaned)
    if not m:
        return None
    family = "M" + m.group(1)[1:]
    tier: ChipTier = TIERS[m.group(2).lower()] if m.group(2) else "base"
    return family.upper(), tier


def cpu_vendor_from_brand(brand: str | None) -> str | None:
    if not brand:
        return None
    b = brand.lower()
    if "apple" in b:
        return "apple"
    if "intel" in b:
        return "intel"
    if "amd" in b or "ryzen" in b or "epyc" in b:
        return "amd"
    return None


def parse_displays(text: str | None) -> list[dict]:
    """`system_profiler SPDisplaysDataType -json` -> [{"model", "cores", "vendor", "metal"}]."""
    if not text:
        return []
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return []
    items = data.get("SPDisplaysDataType") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return []
    out = []
    for item in items:
        if not isinstance(item, dict):
            continue
        cores = item.get("sppci_cores")
        out.append({
            "model": item.get("sppci_model") or item.get("_name"),
            "name": item.get("_name"),
            "cores": int(cores) if isinstance(cores, (int, str)) and str(cores).strip().isdigit() else None,
            "vendor": item.get("spdisplays_vendor") or item.get("sppci_vendor"),
            "metal": item.get("spdisplays_mtlgpufamilysupport") or item.get("spdisplays_metal"),
        })
    return out


def parse_os_release(text: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        if "=" not in line or line.lstrip().startswith("#"):
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def parse_meminfo_bytes(text: str | None) -> int | None:
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", text or "", re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def parse_cpuinfo(text: str | None) -> dict:
    """-> {"name", "vendor", "cores"}; cores counts physical cores where the file says so."""
    name = vendor = None
    processors = 0
    core_ids: set[tuple[str, str]] = set()
    physical = core = None
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "processor":
            processors += 1
        elif key == "model name" and not name:
            name = value
        elif key == "vendor_id" and not vendor:
            vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(value, value.lower() or None)
        elif key == "cpu implementer" and not vendor:
            vendor = "arm"
        elif key == "physical id":
            physical = value
        elif key == "core id":
            core = value
        elif not line.strip() and physical is not None and core is not None:
            core_ids.add((physical, core))
            physical = core = None
    if physical is not None and core is not None:
        core_ids.add((physical, core))
    cores = len(core_ids) or processors or None
    return {"name": name, "vendor": vendor, "cores": cores}


def parse_nvidia_smi(text: str | None) -> list[dict]:
    """`nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader,nounits`."""
    gpus = []
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0] or parts[0].lower().startswith(("name", "failed", "nvidia-smi has failed")):
            continue
        mem = parts[1]
        mem_bytes = int(float(mem)) * 2**20 if re.fullmatch(r"\d+(\.\d+)?", mem) else None
        driver = parts[2] if re.fullmatch(r"\d+(\.\d+)+", parts[2]) else None
        cc = parts[3] if len(parts) > 3 and re.fullmatch(r"\d+\.\d+", parts[3]) else None
        gpus.append({"name": parts[0], "memory_bytes": mem_bytes, "driver": driver, "compute_capability": cc})
    return gpus


def parse_nvidia_proc_version(text: str | None) -> str | None:
    """/proc/driver/nvidia/version: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15 ..." """
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text or "")
    return m.group(1) if m else None


def torch_version_info(version: str | None) -> dict:
    """"2.10.0.dev20251101+cu128" -> channel nightly, local cu128, cuda 12.8."""
    out = {"version": version, "base_version": None, "channel": None, "local": None, "cuda": None}
    if not version:
        return out
    try:
        v = Version(version)
    except InvalidVersion:
        return out
    out["base_version"] = v.base_version
    out["local"] = v.local
    if v.dev is not None:
        out["channel"] = "nightly"
    elif v.pre is not None:
        out["channel"] = "test"
    else:
        out["channel"] = "stable"
    if v.local:
        m = re.fullmatch(r"cu(\d+)(\d)", v.local)
        if m:
            out["cuda"] = f"{m.group(1)}.{m.group(2)}"
    return out


def cuda_from_requirements(reqs: list[str]) -> str | None:
    """"nvidia-cuda-runtime-cu12==12.8.90; platform_system == 'Linux'" -> "12.8"."""
    for req in reqs or []:
        m = re.match(r"\s*nvidia-cuda-runtime(?:-cu\d+)?\s*==\s*(\d+)\.(\d+)", req, re.IGNORECASE)
        if m:
            return f"{m.group(1)}.{m.group(2)}"
    return None
