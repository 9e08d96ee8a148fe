"""Probes: ask a Runner about the machine and assemble `Facts`."""

from __future__ import annotations

import re
from functools import lru_cache

from envkit.facts import parse
from envkit.facts.model import ChipInfo, Facts, GPUInfo, OSInfo, PythonInfo, TorchInfo
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
    if system == "Darwin":
        os_info, chip, memory = _macos(runner, gpu_detail)
        gpus: list[GPUInfo] = []
    elif system == "Linux":
        os_info, chip, memory = _linux(runner)
        gpus = _nvidia(runner)
        other_gpus, rocm_version = _amd_intel(runner, skip=bool(gpus))
    else:
        os_info, chip, memory, gpus = OSInfo(system=system or "unknown"), ChipInfo(), None, _nvidia(runner)

    if system != "Linux":
        other_gpus, rocm_version = [], None
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
        rt_local = parse.torch_version_info((rt or {}).get("torch_version")).get("local") if (rt or {}).get("ok") else None
        if rt_local:
            torch.local = rt_local
            torch.cuda = parse.torch_version_info(rt["torch_version"])["cuda"]
        elif system == "Linux":
            torch.cuda = parse.cuda_from_requirements(interp.get("torch_cuda_requires") or [])
    facts = Facts(os=os_info, python=python, chip=chip, memory_bytes=memory, gpus=gpus, other_gpus=other_gpus,
                  rocm_version=rocm_version, torch=torch,
                  packages=packages, env=runner.environ(), openmp_libs=list(interp.get("openmp_libs") or []),
                  runtime=rt, source=source)
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
                    compute_capability=r["compute_capability"]) for r in rows]
    if gpus and any(g.driver is None for g in gpus):
        driver = parse.parse_nvidia_proc_version(runner.read("/proc/driver/nvidia/version"))
        for g in gpus:
            g.driver = g.driver or driver
    return gpus


def _amd_intel(runner: Runner, skip: bool) -> tuple[list[GPUInfo], str | None]:
    """AMD GPUs from rocminfo, Intel GPUs from xpu-smi, else sycl-ls; lspci names either where
    no GPU tool is installed. Skipped on an NVIDIA machine (one accelerator kind per machine is
    what setup plans for; nvidia-smi answered first)."""
    if skip:
        return [], None
    from envkit.facts import accel_parse as ap

    # amd-smi is ROCm's current tool (rocm-smi's successor); rocminfo ships with every ROCm install
    amd = [GPUInfo(name=g["name"] or g["arch"], vendor="amd", arch=g["arch"], driver=g["driver"])
           for g in ap.parse_amd_smi_static(_out(runner, ["amd-smi", "static", "--asic", "--driver"], timeout=20))]
    if not amd:
        amd = [GPUInfo(name=g["name"], vendor="amd", arch=g["arch"]) for g in ap.parse_rocminfo(_out(runner, ["rocminfo"], timeout=20))]
    rocm = ap.parse_rocm_version(runner.read("/opt/rocm/.info/version"))
    intel = [GPUInfo(name=g["name"], vendor="intel", arch=g["arch"], driver=g["driver"])
             for g in ap.parse_xpu_smi_discovery(_out(runner, ["xpu-smi", "discovery"], timeout=20))]
    if not intel:
        intel = [GPUInfo(name=g["name"], vendor="intel", driver=g["driver"])
                 for g in ap.parse_sycl_ls(_out(runner, ["sycl-ls"], timeout=20))]
    if not amd and not intel:
        for g in ap.parse_lspci(_out(runner, ["lspci", "-nn"])):
            (amd if g["vendor"] == "amd" else intel).append(GPUInfo(name=g["name"], vendor=g["vendor"], arch=g["arch"] if g["vendor"] == "intel" else None))
    return amd + intel, rocm


def _merge_runtime_gpus(facts: Facts) -> None:
    """Where nvidia-smi is missing (containers often lack it) torch's own view fills the list."""
    rt = facts.runtime or {}
    if facts.gpus or not rt.get("ok") or not rt.get("devices"):
        return
    for dev in rt["devices"]:
        facts.gpus.append(GPUInfo(name=dev.get("name", "unknown"), memory_bytes=dev.get("memory_bytes"),
                                  compute_capability=dev.get("capability")))


def _out(runner: Runner, argv: list[str], timeout: float = 10.0) -> str | None:
    res = runner.run(argv, timeout=timeout)
    return res.stdout if res is not None and res.ok else None


def machine_label(facts: Facts) -> str:
    """One line a human recognises: "Apple M3 Max (12P+4E, 40-core GPU, 64 GB), macOS 14.5"."""
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
        bits.append(f"{facts.memory_bytes / 2**30:.0f} GB")
    if bits:
        parts.append("(" + ", ".join(bits) + ")")
    for g in facts.gpus:
        mem = f" {g.memory_bytes / 2**30:.0f} GB" if g.memory_bytes else ""
        parts.append(f"+ {g.name}{mem}")
    for g in facts.other_gpus:
        parts.append(f"+ {g.name}" + (f" ({g.arch})" if g.vendor == "amd" and g.arch else ""))
    os_name = f"{facts.os.name or facts.os.system} {facts.os.version or ''}".strip()
    return " ".join(parts) + (", " if parts else "") + os_name
