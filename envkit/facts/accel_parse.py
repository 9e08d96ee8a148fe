"""Parsers for AMD (ROCm) and Intel (XPU) GPU tools: pure functions over the text the facts
runner recorded. The formats are those quoted in public bug reports (see
tests/snapshots/build_accel_snapshots.py for the sources of each fixture)."""

from __future__ import annotations

import re

# PCI vendor ids (the PCI ID repository): what `lspci -nn` prints in brackets.
AMD_VENDOR, INTEL_VENDOR = "1002", "8086"


def parse_rocminfo(text: str | None) -> list[dict]:
    """`rocminfo`: one dict per GPU agent, {"name": marketing name, "arch": "gfx942", "memory_bytes":
    the size of its first GLOBAL pool (the VRAM: 201310208 KB on an MI300X, the 206141652992 bytes
    `rocm-smi --showmeminfo vram` prints)}. CPU agents (an APU's CPU side included) are skipped."""
    gpus = []
    for block in re.split(r"\n\s*\*{5,}\s*\n\s*Agent \d+\s*\n\s*\*{5,}\s*\n", "\n" + (text or "")):
        fields = {}
        for line in block.splitlines():
            m = re.match(r"^  (\S[^:]*?):\s+(.*?)\s*$", line)  # two-space indent: the agent's own keys
            if m and m.group(1) not in fields:
                fields[m.group(1)] = m.group(2)
        if fields.get("Device Type", "").upper() != "GPU":
            continue
        arch = re.match(r"gfx[0-9a-f]+", fields.get("Name", ""))
        if not arch:
            continue
        gpus.append({"name": fields.get("Marketing Name") or arch.group(0), "arch": arch.group(0),
                     "memory_bytes": _rocminfo_vram(block)})
    return gpus


def _rocminfo_vram(block: str) -> int | None:
    """The size of the agent's first GLOBAL pool ("Segment: GLOBAL; FLAGS: COARSE GRAINED" then
    "Size: 201310208(0xbffc000) KB"): the device memory."""
    m = re.search(r"^\s+Segment:\s+GLOBAL\b[^\n]*\n\s+Size:\s+(\d+)\S*\s+KB", block, re.M)
    return int(m.group(1)) * 1024 if m else None


def parse_amd_smi_static(text: str | None) -> list[dict]:
    """`amd-smi static --asic --driver`: one dict per "GPU: N" block, {"name": MARKET_NAME,
    "arch": TARGET_GRAPHICS_VERSION, "driver": the amdgpu driver VERSION}."""
    gpus: list[dict[str, str | None]] = []
    cur: dict[str, str | None] | None = None
    section = None
    for line in (text or "").splitlines():
        if re.match(r"^GPU:\s*\d+", line):
            cur = {"name": None, "arch": None, "driver": None}
            section = None
            gpus.append(cur)
            continue
        if cur is None:
            continue
        m = re.match(r"^\s{4}([A-Z_]+):\s*$", line)
        if m:
            section = m.group(1)
            continue
        m = re.match(r"^\s+([A-Z_]+):\s*(.+?)\s*$", line)
        if not m:
            continue
        key, value = m.groups()
        if section == "ASIC" and key == "MARKET_NAME":
            cur["name"] = value
        elif section == "ASIC" and key == "TARGET_GRAPHICS_VERSION" and re.match(r"gfx[0-9a-f]+$", value):
            cur["arch"] = value
        elif section == "DRIVER" and key == "VERSION":
            cur["driver"] = value
    return [g for g in gpus if g["arch"]]


def parse_rocm_version(text: str | None) -> str | None:
    """/opt/rocm/.info/version: "6.4.1-83" -> "6.4.1"."""
    m = re.match(r"\s*(\d+\.\d+(?:\.\d+)?)", text or "")
    return m.group(1) if m else None


def parse_xpu_smi_discovery(text: str | None) -> list[dict]:
    """`xpu-smi discovery`: one dict per device, {"name", "device_id": PCI device id, "driver"}. The
    summary table (Aurora's, a "Device Name:" per row) names the device only; `discovery -d N` adds
    the PCI device id and the driver."""
    gpus, cur = [], None
    for line in (text or "").splitlines():
        m = re.search(r"Device Name:\s*(.+?)\s*\|?\s*$", line)
        if m:
            cur = {"name": m.group(1).strip(" |"), "device_id": None, "driver": None}
            gpus.append(cur)
            continue
        if cur is None:
            continue
        m = re.search(r"PCI Device ID:\s*(0x[0-9a-fA-F]+)", line)
        if m:
            cur["device_id"] = m.group(1).lower()
        m = re.search(r"Driver Version:\s*([\w.\-]+)", line)
        if m:
            cur["driver"] = m.group(1)
    return gpus


def parse_sycl_ls(text: str | None) -> list[dict]:
    """`sycl-ls`: the Level Zero GPU lines ("[level_zero:gpu][level_zero:0] Intel(R) Level-Zero, Intel(R)
    Data Center GPU Max 1550 1.3 [1.3.29735]"), the devices PyTorch's XPU backend uses. The name is
    what follows the platform, less the backend version ("1.3", "12.55.8") and the driver ([...])."""
    gpus = []
    for line in (text or "").splitlines():
        m = re.match(r"\s*\[(?:ext_oneapi_)?level_zero:gpu\]\S*\s+(.*)$", line)
        if not m:
            continue
        rest = m.group(1)
        name = rest.split(", ", 1)[1] if ", " in rest else rest
        name = re.sub(r"\s+\d+(?:\.\d+)+\s*(\[[^\]]*\])?\s*$", "", name).strip()
        driver = re.search(r"\[([\d.+]+)\]\s*$", rest)
        gpus.append({"name": name, "device_id": None, "driver": driver.group(1) if driver else None})
    return gpus


def parse_lspci(text: str | None) -> list[dict]:
    """`lspci -nn`: display controllers of AMD and Intel, {"vendor", "name", "device_id"}.
    The last resort where no GPU tool is installed: it names the card, not what it can run."""
    out = []
    for line in (text or "").splitlines():
        if not re.search(r"VGA compatible controller|Display controller|3D controller", line):
            continue
        ids = re.search(r"\[([0-9a-f]{4}):([0-9a-f]{4})\]", line)
        if not ids or ids.group(1) not in (AMD_VENDOR, INTEL_VENDOR):
            continue
        desc = line.split(": ", 1)[1] if ": " in line else line
        desc = re.sub(r"\s*\[[0-9a-f]{4}:[0-9a-f]{4}\].*$", "", desc).strip()
        out.append({"vendor": "amd" if ids.group(1) == AMD_VENDOR else "intel", "name": desc, "device_id": "0x" + ids.group(2)})
    return out
