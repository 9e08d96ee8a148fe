"""The machine a pylock.machine.toml was made on ([tool.envkit.platform]: OS, architecture, Python,
accelerator), and what would stop the lock from rebuilding on another one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from envkit.checks import accel

if TYPE_CHECKING:
    from envkit.facts.model import TorchDevice

PLATFORM_KEYS = (("system", "OS"), ("arch", "architecture"), ("python_minor", "Python"),
                 ("implementation", "Python implementation"), ("device", "accelerator"))


def nvidia_gpus(facts) -> list:
    """The NVIDIA GPUs of facts.gpus (which holds every vendor's; a GPU without a vendor is NVIDIA's)."""
    return [g for g in getattr(facts, "gpus", None) or [] if getattr(g, "vendor", "nvidia") == "nvidia"]


def platform_of(facts, device: TorchDevice | None = None, backend: str | None = None) -> dict:
    nvidia = nvidia_gpus(facts)
    shown: str | None = device
    if device == "cuda" and not nvidia and any(getattr(g, "vendor", None) == "amd" for g in facts.gpus):
        shown = "rocm"  # torch calls a ROCm GPU "cuda", but a ROCm lock cannot rebuild on an NVIDIA box
    py = facts.python.version or ""
    d = {"system": facts.os.system, "os": facts.os.name, "os_version": facts.os.version, "arch": facts.python.machine,
         "python": py, "python_minor": ".".join(py.split(".")[:2]) if py else None,
         "implementation": (facts.python.implementation or "").lower() or None, "chip": facts.chip.name,
         "gpus": [g.name for g in facts.gpus] or None, "driver": nvidia[0].driver if nvidia else None,
         "device": shown, "backend": backend}
    return {k: v for k, v in d.items() if v is not None}


def platform_differences(lock_platform: dict, here: dict) -> list[str]:
    out = []
    for key, label in PLATFORM_KEYS:
        a, b = lock_platform.get(key), here.get(key)
        if a is not None and b is not None and str(a) != str(b):
            out.append(f"{label} {a} in the lock, {b} here")
    return out


def machine_device(facts) -> TorchDevice:
    """The accelerator this machine installs for: mps, cuda (NVIDIA, or ROCm, which torch calls
    cuda), xpu or cpu."""
    if facts.is_apple_silicon:
        return "mps"
    if nvidia_gpus(facts) or accel.rocm_usable(facts):
        return "cuda"
    return "xpu" if any(accel.xpu_supported(g) for g in facts.intel_gpus) else "cpu"
