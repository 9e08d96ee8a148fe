"""Probes: ask a Runner about the machine and assemble `Facts`."""

from __future__ import annotations

import re
from functools import lru_cache

from envkit.facts import accel_parse as ap, parse
from envkit.facts.model import ChipInfo, Facts, GPUInfo, GPUVendor, OSInfo, PythonInfo, TorchBytecode, TorchInfo
from envkit.facts.runner import Runner
from envkit.resources import data_file, load_toml

NVIDIA_SMI = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,compute_cap", "--format=csv,noheader,nounits"]
SYSTEM_PROFILER = ["system_profiler", "SPDisplaysDataType", "-json"]


@lru_cache(maxsize=1)
def chips_data() -> dict:
    return load_toml(data_file("chips.toml"))


def collect(runner: Runner, *, runtime: bool = True, gpu_detail: bool = True, source: str = "live") -> Facts:
    """Everything doctor needs. `runtime=False` skips importing torch (envkit check);
    `gpu_detail=False` skips system_profiler (~0.3 s) where GPU cores are not needed."""
    interp = runner.interpreter()
    py = interp.get("python", {})
    python = PythonInfo(
        version=py.get("version"), implementation=py.get("implementation"), machine=py.get("machine"),
        executable=py.get("executable"), in_venv=py.get("in_venv"),
    )
    system = runner.system
    rocm_version = None
    if system == "Darwin":
        os_info, chip, memory = _macos(runner, gpu_detail)
        gpus: list[GPUInfo] = []
    elif system == "Linux":
        os_info, chip, memory = _linux(runner)
        gpus = _nvidia(runner)
        other_gpus, rocm_version = _amd_intel(runner, skip=bool(gpus))
        gpus += other_gpus
    else:
        os_info, chip, memory, gpus = OSInfo(system=system or "unknown"), ChipInfo(), None, _nvidia(runner)

    if system == "Darwin" and python.machine == "arm64" and chip.arm64_hardware is None:
        chip.arm64_hardware = True  # an arm64 process runs only on arm64 hardware
        chip.vendor = chip.vendor or "apple"
    if system == "Darwin" and chip.arm64_hardware and python.machine:
        # A sysctl child runs native even when Python is translated, so the interpreter's own
        # machine() tells: x86_64 on arm64 hardware is Rosetta (comfy-cli PR #568).
        python.rosetta = python.machine == "x86_64"
    elif system == "Darwin" and chip.arm64_hardware is False:
        python.rosetta = False

    packages = dict(interp.get("packages") or {})
    tv = parse.torch_version_info(packages.get("torch"))
    torch = TorchInfo(**tv)
    rt = runner.runtime() if runtime else None
    if torch.version and not torch.local:
        # Some installs drop the +cuXXX label from the metadata: torch itself, or the wheel's
        # nvidia-cuda-runtime requirement, still tells which build it is.
        rt_info = parse.torch_version_info((rt or {}).get("torch_version")) if (rt or {}).get("ok") else {}
        if rt_info.get("local"):
            torch.local = rt_info["local"]
            torch.cuda = rt_info["cuda"]
        elif system == "Linux":
            torch.cuda = parse.cuda_from_requirements(interp.get("torch_cuda_requires") or [])
    facts = Facts(os=os_info, python=python, chip=chip, memory_bytes=memory, gpus=gpus,
                  rocm_version=rocm_version, torch=torch,
                  packages=packages, env=runner.environ(), openmp_libs=list(interp.get("openmp_libs") or []),
                  torch_bytecode=TorchBytecode.from_probe(interp.get("torch_bytecode")), runtime=rt, source=source)
    _merge_runtime_gpus(facts)
    return facts


def _macos(runner: Runner, gpu_detail: bool) -> tuple[OSInfo, ChipInfo, int | None]:
    def sysctl(name: str):
        res = runner.run(["sysctl", "-n", name])
        return res.stdout if res is not None and res.ok else None

    version = parse.parse_macos_version(_out(runner, ["sw_vers", "-productVersion"]))
    build = parse.parse_macos_build(_out(runner, ["sw_vers", "-buildVersion"]))
    note = None
    if version and version.startswith("10.16") and build:
        # Compatibility version (SYSTEM_VERSION_COMPAT / old x86_64 binaries): the build's Darwin
        # major tells the real macOS major (pytorch#146236).
        real = chips_data()["darwin_to_macos"].get(build[:2])
        if real:
            note = f"sw_vers printed the compatibility version 10.16; build {build} is macOS {real}"
            version = real
    os_info = OSInfo(system="Darwin", name="macOS", version=version, build=build, note=note)

    brand = parse.first_line(sysctl("machdep.cpu.brand_string"))
    chip = ChipInfo(name=brand, vendor=parse.cpu_vendor_from_brand(brand))
    chip.arm64_hardware = parse.parse_bool01(sysctl("hw.optional.arm64"))
    if chip.arm64_hardware is None and chip.vendor == "intel":
        chip.arm64_hardware = False  # the OID does not exist on Intel Macs
    chip.perf_cores = parse.parse_int(sysctl("hw.perflevel0.physicalcpu"))
    chip.efficiency_cores = parse.parse_int(sysctl("hw.perflevel1.physicalcpu"))
    chip.cores = parse.parse_int(sysctl("hw.physicalcpu"))
    if chip.cores is None and chip.perf_cores is not None:
        chip.cores = chip.perf_cores + (chip.efficiency_cores or 0)
    memory = parse.parse_int(sysctl("hw.memsize"))

    family_tier = parse.parse_apple_chip(brand)
    displays = parse.parse_displays(_out(runner, SYSTEM_PROFILER, timeout=20)) if gpu_detail else []
    apple_gpu = next((d for d in displays if parse.parse_apple_chip(d.get("model")) or parse.parse_apple_chip(d.get("name"))
                      or "apple" in str(d.get("vendor", "")).lower()), None)
    if family_tier is None and apple_gpu:
        # Early Big Sur printed the generic "Apple processor" (archspec#38): the GPU is named after the chip.
        family_tier = parse.parse_apple_chip(apple_gpu.get("model")) or parse.parse_apple_chip(apple_gpu.get("name"))
    if family_tier:
        chip.vendor = "apple"
        chip.family, chip.tier = family_tier
        if not brand or not parse.parse_apple_chip(brand):
            chip.name = f"Apple {chip.family}" + ("" if chip.tier == "base" else f" {chip.tier}")
    elif chip.vendor is None and chip.arm64_hardware:
        chip.vendor = "apple"
    if apple_gpu:
        chip.gpu_cores = apple_gpu.get("cores")
    if chip.vendor == "apple" and chip.arm64_hardware is None:
        chip.arm64_hardware = True
    return os_info, chip, memory


def _linux(runner: Runner) -> tuple[OSInfo, ChipInfo, int | None]:
    rel = parse.parse_os_release(runner.read("/etc/os-release"))
    os_info = OSInfo(system="Linux", name=rel.get("PRETTY_NAME") or rel.get("NAME"), version=rel.get("VERSION_ID"))
    cpu = parse.parse_cpuinfo(runner.read("/proc/cpuinfo"))
    chip = ChipInfo(name=cpu["name"], vendor=cpu["vendor"], cores=cpu["cores"])
    memory = parse.parse_meminfo_bytes(runner.read("/proc/meminfo"))
    return os_info, chip, memory


def _nvidia(runner: Runner) -> list[GPUInfo]:
    res = runner.run(NVIDIA_SMI, timeout=15)
    rows = parse.parse_nvidia_smi(res.stdout) if res is not None and res.ok else []
    gpus = [GPUInfo(name=r["name"], memory_bytes=r["memory_bytes"], driver=r["driver"],
                    compute_capability=r["compute_capability"], arch=sm_arch(r["compute_capability"])) for r in rows]
    if gpus and any(g.driver is None for g in gpus):
        driver = parse.parse_nvidia_proc_version(runner.read("/proc/driver/nvidia/version"))
        for g in gpus:
            g.driver = g.driver or driver
    return gpus


def _amd_intel(runner: Runner, skip: bool) -> tuple[list[GPUInfo], str | None]:
    """AMD GPUs from amd-smi, else rocminfo; Intel GPUs from xpu-smi, else sycl-ls; lspci names
    either where no GPU tool is installed. Skipped on an NVIDIA machine (one accelerator kind per
    machine is what setup plans for; nvidia-smi answered first)."""
    if skip:
        return [], None

    # amd-smi is ROCm's current tool (rocm-smi's successor); rocminfo ships with every ROCm install
    amd = [GPUInfo(name=g["name"] or g["arch"], vendor="amd", arch=g["arch"], driver=g["driver"])
           for g in ap.parse_amd_smi_static(_out(runner, ["amd-smi", "static", "--asic", "--driver"], timeout=20))]
    if not amd:
        amd = [GPUInfo(name=g["name"], vendor="amd", arch=g["arch"], memory_bytes=g["memory_bytes"])
               for g in ap.parse_rocminfo(_out(runner, ["rocminfo"], timeout=20))]
    rocm = ap.parse_rocm_version(runner.read("/opt/rocm/.info/version"))
    intel = [GPUInfo(name=g["name"], vendor="intel", device_id=g["device_id"], driver=g["driver"])
             for g in ap.parse_xpu_smi_discovery(_out(runner, ["xpu-smi", "discovery"], timeout=20))]
    if not intel:
        intel = [GPUInfo(name=g["name"], vendor="intel", driver=g["driver"])
                 for g in ap.parse_sycl_ls(_out(runner, ["sycl-ls"], timeout=20))]
    if not amd and not intel:
        for g in ap.parse_lspci(_out(runner, ["lspci", "-nn"])):
            if g["vendor"] == "amd":  # the PCI id of an AMD card says nothing of its gfx target
                amd.append(GPUInfo(name=g["name"], vendor="amd"))
            else:
                intel.append(GPUInfo(name=g["name"], vendor="intel", device_id=g["device_id"]))
    for g in intel:
        g.arch = intel_arch(g.name, g.device_id)
    return amd + intel, rocm


def sm_arch(compute_capability: str | None) -> str | None:
    """"9.0" -> "sm_90", the name CUDA builds (torch.cuda.get_arch_list()) give the architecture."""
    m = re.fullmatch(r"(\d+)\.(\d+)", compute_capability or "")
    return f"sm_{m.group(1)}{m.group(2)}" if m else None


def intel_arch(name: str | None, device_id: str | None) -> str | None:
    """"pvc" for a Data Center GPU Max (by PCI device id, else by name): accelerators.toml [xpu.arch]."""
    arches = load_toml(data_file("accelerators.toml"))["xpu"].get("arch", {})
    for arch, row in arches.items():
        if device_id and device_id.lower() in row.get("device_ids", []):
            return arch
    for arch, row in arches.items():
        if name and any(word.lower() in name.lower() for word in row.get("names", [])):
            return arch
    return None


def _merge_runtime_gpus(facts: Facts) -> None:
    """Torch's own view of its devices: where the tools are missing (containers often lack
    nvidia-smi and rocminfo) it fills the list; where they answered, it adds what they left out
    (the memory amd-smi does not print, the Intel GPU's memory). Under ROCm, torch.cuda lists AMD
    GPUs (hip_version set): they are AMD's, never NVIDIA's."""
    rt = facts.runtime or {}
    if not rt.get("ok"):
        return
    rocm = bool(rt.get("hip_version"))
    seen: tuple[tuple[GPUVendor, list], ...] = (("amd" if rocm else "nvidia", rt.get("devices") or []), ("intel", rt.get("xpu_devices") or []))
    for vendor, devices in seen:
        if not devices:
            continue
        known = [g for g in facts.gpus if g.vendor == vendor]
        if not known:
            for dev in devices:
                gfx = (dev.get("gcn_arch") or "").split(":")[0] or None
                facts.gpus.append(GPUInfo(
                    name=dev.get("name", "unknown"), vendor=vendor, memory_bytes=dev.get("memory_bytes"),
                    compute_capability=dev.get("capability") if vendor == "nvidia" else None,
                    arch=sm_arch(dev.get("capability")) if vendor == "nvidia" else gfx if vendor == "amd"
                    else intel_arch(dev.get("name"), dev.get("device_id"))))
        elif len(known) == len(devices):
            for g, dev in zip(known, devices):
                g.memory_bytes = g.memory_bytes or dev.get("memory_bytes")


def _out(runner: Runner, argv: list[str], timeout: float = 10.0) -> str | None:
    res = runner.run(argv, timeout=timeout)
    return res.stdout if res is not None and res.ok else None


def gib(n: int) -> str:
    """Bytes in GiB (2**30), as the memory is counted: "64 GiB" for a Mac's 64, "23.5 GiB" for a box's 23.5."""
    v = n / 2**30
    return f"{v:.0f} GiB" if abs(v - round(v)) < 0.05 else f"{v:.1f} GiB"


def machine_label(facts: Facts) -> str:
    """One line a human recognises: "Apple M3 Max (12P+4E, 40-core GPU, 64 GiB), macOS 14.5"."""
    c = facts.chip
    parts = []
    if c.name:
        parts.append(re.sub(r"\s+", " ", c.name))
    bits = []
    if c.perf_cores is not None:
        # hw.perflevel0/1 are "super" and "performance" cores on an M5 Pro/Max (chips.toml [spec])
        spec = chips_data().get("spec", {}).get(f"{c.family} {c.tier}" if c.tier not in (None, "base") else str(c.family), {})
        first, second = ("S", "P") if any("S+" in v for v in spec.get("cpu", [])) else ("P", "E")
        bits.append(f"{c.perf_cores}{first}+{c.efficiency_cores or 0}{second}")
    elif c.cores:
        bits.append(f"{c.cores} cores")
    if c.gpu_cores:
        bits.append(f"{c.gpu_cores}-core GPU")
    if facts.memory_bytes:
        bits.append(gib(facts.memory_bytes))
    if bits:
        parts.append("(" + ", ".join(bits) + ")")
    for (name, memory, arch), count in gpu_groups(facts.gpus):
        mem = f" {gib(memory)}" if memory else ""
        parts.append(f"+ {f'{count} x ' if count > 1 else ''}{name}{mem}" + (f" ({arch})" if arch and arch.startswith("gfx") else ""))
    os_name = f"{facts.os.name or facts.os.system} {facts.os.version or ''}".strip()
    return " ".join(parts) + (", " if parts else "") + os_name


def gpu_groups(gpus: list[GPUInfo]) -> list[tuple[tuple[str, int | None, str | None], int]]:
    """Identical GPUs counted once, in order: [(("AMD Instinct MI300X", 206141652992, "gfx942"), 4)]."""
    counts: dict[tuple[str, int | None, str | None], int] = {}
    for g in gpus:
        key = (g.name, g.memory_bytes, g.arch)
        counts[key] = counts.get(key, 0) + 1
    return list(counts.items())
