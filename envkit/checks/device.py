"""Which device trains on this machine, and how a verdict names its GPUs (the checks of GPUs,
bf16 and compile, the report and the profile chooser all ask the same question)."""

from __future__ import annotations

from envkit.checks import accel
from envkit.facts.collect import gpu_groups
from envkit.facts.model import Facts, TorchDevice, TrainDevice


def best_device(facts: Facts) -> TorchDevice:
    """The device that trains on this machine, as torch names it: mps, cuda (an NVIDIA GPU, or an
    AMD GPU under ROCm, which torch.cuda answers for), xpu (an Intel GPU under the XPU build) or cpu."""
    if facts.is_apple_silicon:
        return "mps"
    rt = facts.runtime or {}
    if facts.nvidia_gpus or rt.get("cuda_available") or accel.rocm_usable(facts):
        return "cuda"
    if rt.get("xpu_available") or accel.xpu_usable(facts):
        return "xpu"
    return "cpu"


def cuda_hidden(facts: Facts) -> bool:
    """CUDA_VISIBLE_DEVICES set to none ("" or -1): this process's torch sees no NVIDIA GPU, whatever
    nvidia-smi lists (a user training on the CPU of a GPU box, or a scheduler that gave no GPU)."""
    value = (facts.env or {}).get("CUDA_VISIBLE_DEVICES")
    return value is not None and (value.strip() == "" or value.strip().split(",")[0].strip() == "-1") \
        and not (facts.runtime or {}).get("cuda_available")


def trainer_device(facts: Facts) -> TrainDevice:
    """The device envkit's own trainer uses (cuda, mps or cpu): it has no xpu device, so on an Intel
    GPU `envkit run` trains on the CPU (profiles/xpu.toml); with the GPUs hidden, the CPU."""
    device = best_device(facts)
    if device == "cuda" and cuda_hidden(facts):
        return "cpu"
    return device if device in ("cuda", "mps") else "cpu"


def cuda_is_rocm(facts: Facts) -> bool:
    """torch.cuda speaks of AMD GPUs here: ROCm torch ran, or AMD GPUs and no NVIDIA one."""
    rt = facts.runtime or {}
    return bool(rt.get("hip_version")) or (bool(facts.amd_gpus) and not facts.nvidia_gpus)


def device_gpus(facts: Facts) -> list:
    """The GPUs best_device() trains on."""
    device = best_device(facts)
    if device == "cuda":
        return facts.amd_gpus if cuda_is_rocm(facts) else facts.nvidia_gpus
    return facts.intel_gpus if device == "xpu" else []


def device_label(facts: Facts) -> str:
    """"4 x AMD Instinct MI300X (gfx942)": the GPUs that train, as a verdict names them."""
    groups = gpu_groups(device_gpus(facts))
    return ", ".join(f"{f'{n} x ' if n > 1 else ''}{name}" + (f" ({arch})" if arch else "")
                     for (name, _mem, arch), n in groups) or {"cuda": "the CUDA GPU", "xpu": "the Intel GPU"}.get(best_device(facts), "the CPU")


def gate_note(facts: Facts) -> str:
    """What a verdict adds when torch did not run: it was judged from the version gates alone."""
    if facts.runtime_ok:
        return ""
    if facts.runtime is None:
        return " (judged from version gates only: torch was not imported)"
    return " (judged from version gates only: importing torch failed)"
