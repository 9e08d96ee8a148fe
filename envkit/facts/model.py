"""What a machine is, as typed values. Unknown is None, never a guess."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

# The devices torch names that envkit meets (checks/device.py best_device): its trainer trains on cpu, cuda or mps
# (trainer_device; device.type once the trainer decided auto, train/recovery/guards.py); xpu is an Intel GPU under
# torch's XPU build, which envkit's trainer does not use. Later stages import them under TYPE_CHECKING: importing
# envkit.facts at run time loads the probes
TrainDevice = Literal["cpu", "cuda", "mps"]
TorchDevice = TrainDevice | Literal["xpu"]
# torch's release channels: releases, nightlies (.dev) and test builds (release candidates)
Channel = Literal["stable", "nightly", "test"]
ChipTier = Literal["base", "Pro", "Max", "Ultra"]  # an Apple chip's: M3, M3 Pro, M3 Max, M3 Ultra
GPUVendor = Literal["nvidia", "amd", "intel"]


@dataclass
class OSInfo:
    system: str  # "Darwin", "Linux", "Windows", "unknown"
    name: str | None = None  # "macOS", "Ubuntu 22.04.4 LTS"
    version: str | None = None  # "14.5", "22.04"
    build: str | None = None  # "23F79" (macOS build), kernel release on Linux
    note: str | None = None  # e.g. why the version was derived from the build


@dataclass
class PythonInfo:
    version: str | None = None
    implementation: str | None = None
    machine: str | None = None  # platform.machine() of the interpreter: arm64, x86_64, aarch64
    executable: str | None = None
    in_venv: bool | None = None
    rosetta: bool | None = None  # an x86_64 interpreter translated on Apple silicon


@dataclass
class ChipInfo:
    vendor: str | None = None  # apple, intel, amd, arm, unknown
    name: str | None = None  # brand string, e.g. "Apple M3 Max"
    family: str | None = None  # "M3"
    tier: ChipTier | None = None
    perf_cores: int | None = None
    efficiency_cores: int | None = None
    cores: int | None = None  # physical cores in all
    gpu_cores: int | None = None
    arm64_hardware: bool | None = None  # hw.optional.arm64: true even under Rosetta

    @property
    def generation(self) -> int | None:
        if self.family and self.family[1:].isdigit():
            return int(self.family[1:])
        return None


@dataclass
class GPUInfo:
    name: str
    vendor: GPUVendor = "nvidia"
    memory_bytes: int | None = None
    driver: str | None = None
    compute_capability: str | None = None  # NVIDIA: "9.0"
    arch: str | None = None  # what the builds are compiled for: "sm_90", "gfx942", "pvc" (torch.xpu.get_arch_list())
    device_id: str | None = None  # PCI device id where a tool printed it ("0x0bd5")


@dataclass
class TorchInfo:
    version: str | None = None  # full version, "2.13.0+cpu"
    base_version: str | None = None  # "2.13.0"
    channel: Channel | None = None
    local: str | None = None  # "cpu", "cu128", None for PyPI macOS wheels
    cuda: str | None = None  # "12.8" from the local label


@dataclass(frozen=True)
class TorchBytecode:
    """torch's modules and their bytecode, as the examined interpreter sees them (interp_probe.py)."""

    folder: str  # the torch package's folder
    compiled: bool  # the modules `import torch` loads have bytecode (envkit setup's verification writes it; pip's own install does)
    dont_write_bytecode: bool  # PYTHONDONTWRITEBYTECODE (or -B): Python writes no bytecode on an import
    writable: bool  # this user may write the bytecode folders
    compile_compiled: bool | None = None  # torch.compile's modules too (None: not recorded, or no torch._dynamo)
    envkit_cache: str | None = None  # the folder of envkit's bytecode cache made for this interpreter, where torch's is found there

    @classmethod
    def from_probe(cls, raw) -> TorchBytecode | None:
        """The probe's answer, or None where it is missing or not of this shape (an older snapshot, a hand-made one)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("folder"), str):
            return None
        compiled, dont_write, writable = (raw.get(k) for k in ("compiled", "dont_write_bytecode", "writable"))
        if not (isinstance(compiled, bool) and isinstance(dont_write, bool) and isinstance(writable, bool)):
            return None
        dynamo, cached = raw.get("compile_compiled"), raw.get("envkit_cache")
        return cls(raw["folder"], compiled, dont_write, writable, dynamo if isinstance(dynamo, bool) else None,
                   cached if isinstance(cached, str) and cached else None)

    @property
    def python_writes(self) -> bool:
        """An import writes what is missing, once."""
        return self.writable and not self.dont_write_bytecode


@dataclass
class Facts:
    os: OSInfo
    python: PythonInfo
    chip: ChipInfo
    memory_bytes: int | None = None
    gpus: list[GPUInfo] = field(default_factory=list)  # every GPU: NVIDIA first, then AMD (ROCm), Intel (XPU)
    rocm_version: str | None = None  # /opt/rocm/.info/version, where ROCm is installed
    torch: TorchInfo = field(default_factory=TorchInfo)
    packages: dict[str, str | None] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    openmp_libs: list[str] = field(default_factory=list)
    torch_bytecode: TorchBytecode | None = None  # None: no torch, or a snapshot recorded before envkit asked
    runtime: dict | None = None  # what the torch subprocess reported, if it ran
    source: str = "live"  # "live" or the snapshot's path

    @property
    def is_macos(self) -> bool:
        return self.os.system == "Darwin"

    @property
    def is_apple_silicon(self) -> bool:
        return self.is_macos and (self.chip.vendor == "apple" or bool(self.chip.arm64_hardware))

    @property
    def nvidia_gpus(self) -> list[GPUInfo]:
        """The GPUs CUDA builds and nvidia-smi speak of."""
        return [g for g in self.gpus if g.vendor == "nvidia"]

    @property
    def other_gpus(self) -> list[GPUInfo]:
        """AMD (ROCm) and Intel (XPU) GPUs."""
        return [g for g in self.gpus if g.vendor != "nvidia"]

    @property
    def amd_gpus(self) -> list[GPUInfo]:
        return [g for g in self.gpus if g.vendor == "amd"]

    @property
    def intel_gpus(self) -> list[GPUInfo]:
        return [g for g in self.gpus if g.vendor == "intel"]

    @property
    def memory_gb(self) -> float | None:
        return None if self.memory_bytes is None else self.memory_bytes / 2**30

    @property
    def runtime_ok(self) -> bool:
        return bool(self.runtime and self.runtime.get("ok"))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["python"]["rosetta"] = self.python.rosetta
        return d

    def template_values(self) -> dict:
        """Values a profile may refer to as {name}: resolved against this machine."""
        cores = self.chip.perf_cores or self.chip.cores
        return {
            "perf_cores": cores,
            "efficiency_cores": self.chip.efficiency_cores,
            "cores": self.chip.cores,
            "gpu_cores": self.chip.gpu_cores,
            "memory_gb": round(self.memory_gb) if self.memory_gb else None,
            "gpu_memory_gb": round(self.gpus[0].memory_bytes / 2**30) if self.gpus and self.gpus[0].memory_bytes else None,
            "gpu_count": len(self.gpus),
        }
