"""The checks of the optional speed-ups on the device that trains: bf16 and torch.compile. A
missing one is a warning (training still runs, in fp32 or eager), never a failure."""

from __future__ import annotations

from envkit.checks import accel
from envkit.checks.device import best_device, cuda_is_rocm, device_gpus, device_label, gate_note
from envkit.checks.gates import V, gates, known
from envkit.checks.verdict import PASS, SKIP, WARN, Check
from envkit.facts.model import Facts
from envkit.facts.torch_build import TorchBuild


def check_bf16(facts: Facts) -> Check:
    device = best_device(facts)
    t, rt = facts.torch, facts.runtime or {}
    tv = V(t.base_version)  # a base version always parses (facts.parse made it)
    if tv is None:
        return Check("bf16", SKIP, "torch is not installed (see the torch check)", group="Devices")
    if device == "mps":
        g = gates()["bf16"]["mps"]
        macos = V(facts.os.version)
        if facts.python.rosetta:
            return Check("bf16", SKIP, "no MPS under Rosetta (see python-arch)", group="Devices")
        if macos is None or macos < known(g["macos"]):
            return Check("bf16", WARN, f"bf16 on MPS needs macOS {g['macos']}+ (this Mac: {facts.os.version or 'unknown'}); use fp16 or fp32",
                         f"upgrade macOS to {g['macos']}+; until then keep training.precision at fp32 or fp16", "Devices", g["source"])
        if tv < known(g["autocast_torch"]):
            return Check("bf16", WARN, f"bf16 autocast on MPS needs torch {g['autocast_torch']}+ (installed {t.base_version})",
                         "`envkit setup --torch stable`", "Devices", g["source"])
        if rt.get("ok") and rt.get("mps_bf16") is False:
            return Check("bf16", WARN, f"MPS refused a bf16 tensor: {rt.get('mps_bf16_error', '')}", "keep training.precision at fp32", "Devices")
        if facts.chip.family and facts.chip.family in g["emulated_families"]:
            return Check("bf16", PASS, f"bf16 works but is emulated on {facts.chip.family}: no speed-up over fp32 "
                         f"(the {facts.chip.family.lower()} profiles train in fp32)", group="Devices", source=g["source"])
        return Check("bf16", PASS, f"bf16 supported on MPS (macOS {macos}, torch {t.base_version})" + gate_note(facts), group="Devices")
    if device == "cuda" and cuda_is_rocm(facts):
        return _bf16_amd(facts)
    if device == "xpu":
        return _bf16_xpu(facts)
    if device == "cuda":
        g = gates()["bf16"]["cuda"]
        # Compute capability first: is_bf16_supported() also answers True where bf16 is only
        # emulated (T4, V100), which trains slower than fp16 (gates.toml [bf16.cuda]).
        ccs = [cc for gpu in facts.nvidia_gpus if (cc := V(gpu.compute_capability))]
        if ccs and min(ccs) < known(g["min_compute_capability"]):
            said = " (torch.cuda.is_bf16_supported() says True: it counts emulation)" if rt.get("ok") and rt.get("cuda_bf16") else ""
            return Check("bf16", WARN, f"compute capability {min(ccs)} < {g['min_compute_capability']}: no bf16 tensor cores, bf16 is emulated{said}",
                         "train with precision fp16 (GradScaler is used on CUDA)", "Devices", g["source"])
        if rt.get("ok") and "cuda_bf16" in rt:
            if rt["cuda_bf16"]:
                return Check("bf16", PASS, f"bf16 supported on {device_label(facts)} (torch.cuda.is_bf16_supported())", group="Devices")
            return Check("bf16", WARN, f"{device_label(facts)} has no bf16 support", "train with precision fp16 (GradScaler is used on CUDA)",
                         "Devices", g["source"])
        return Check("bf16", PASS, f"bf16 supported on {device_label(facts)} (compute capability 8.0+)" + gate_note(facts), group="Devices")
    return Check("bf16", SKIP, "CPU training uses fp32 by default", group="Devices")


def _not_the_gpu_build(facts: Facts) -> str | None:
    """Why the installed torch cannot reach this machine's AMD or Intel GPU, or None."""
    t, rt = facts.torch, facts.runtime or {}
    if best_device(facts) == "xpu":
        ok = (t.local or "") == "xpu" or rt.get("xpu_available")
        return None if ok else f"torch {t.version} is not the XPU build, so {device_label(facts)} sits unused (see rocm-xpu)"
    ok = TorchBuild(t.local or "").kind == "rocm" or rt.get("hip_version")
    return None if ok else f"torch {t.version} is not a ROCm build, so {device_label(facts)} sits unused (see rocm-xpu)"


def _bf16_amd(facts: Facts) -> Check:
    why = _not_the_gpu_build(facts)
    if why:
        return Check("bf16", SKIP, why, group="Devices")
    g = accel.table()["bf16"]["amd"]
    gpus = device_gpus(facts)
    gfx = sorted({(gpu.arch or "").split(":")[0] for gpu in gpus})
    if gfx and all(x in g["gfx"] for x in gfx):
        return Check("bf16", PASS, f"bf16 supported on {device_label(facts)}: bf16 matrix cores (ROCm)", group="Devices", source=g["source"])
    return Check("bf16", SKIP, f"{device_label(facts)}: envkit's table holds no bf16 entry for this gfx target, and "
                 "torch.cuda.is_bf16_supported() answers True on every ROCm GPU; training.precision auto lets the trainer decide",
                 group="Devices", source=g["source"])


def _bf16_xpu(facts: Facts) -> Check:
    why = _not_the_gpu_build(facts)
    if why:
        return Check("bf16", SKIP, why, group="Devices")
    rt = facts.runtime or {}
    g = accel.table()["bf16"]["xpu"]
    if rt.get("ok") and rt.get("xpu_bf16") is False:
        return Check("bf16", WARN, f"{device_label(facts)}: torch.xpu.is_bf16_supported() is False", "train with precision fp32",
                     "Devices", g["source"])
    arches = {gpu.arch for gpu in device_gpus(facts)}
    if arches and arches <= set(g["arch"]):
        return Check("bf16", PASS, f"bf16 supported on {device_label(facts)}: bf16 XMX engines (XPU)" + gate_note(facts),
                     group="Devices", source=g["source"])
    return Check("bf16", SKIP, f"{device_label(facts)}: envkit does not know this Intel GPU's bf16 support; "
                 "torch.xpu.is_bf16_supported() tells", group="Devices", source=g["source"])


def check_compile(facts: Facts) -> Check:
    device = best_device(facts)
    t = facts.torch
    tv = V(t.base_version)  # a base version always parses (facts.parse made it)
    if tv is None:
        return Check("compile", SKIP, "torch is not installed (see the torch check)", group="Devices")
    if device == "mps" and facts.python.rosetta:
        return Check("compile", SKIP, "no MPS under Rosetta (see python-arch)", group="Devices")
    if device == "mps":
        g = gates()["compile"]["mps"]
        macos = V(facts.os.version)
        if tv < known(g["torch"]) or macos is None or macos < known(g["macos"]):
            return Check("compile", WARN, f"torch.compile on MPS is usable from torch {g['torch']} on macOS {g['macos']}+ "
                         f"(here torch {t.base_version}, macOS {facts.os.version or '?'}); training runs eager",
                         "`envkit setup --torch stable` (and macOS 14+) to enable it; meanwhile training.compile: false", "Devices", g["source"])
        return Check("compile", PASS, f"torch.compile usable on MPS (torch {t.base_version})", group="Devices", source=g["source"])
    if device == "xpu" or (device == "cuda" and cuda_is_rocm(facts)):
        why = _not_the_gpu_build(facts)
        if why:
            return Check("compile", SKIP, why, group="Devices")
    if device == "xpu":
        g = accel.table()["compile"]["xpu"]
        if tv < known(g["torch"]):
            return Check("compile", WARN,
                         f"torch.compile on {device_label(facts)} (XPU) needs torch {g['torch']}+ (installed {t.base_version}); training runs eager",
                         "`envkit setup --torch stable`", "Devices", g["source"])
        return Check("compile", PASS, f"torch.compile available on {device_label(facts)}, XPU (torch {t.base_version})",
                     group="Devices", source=g["source"])
    if device == "cuda":
        g = gates()["compile"]["cuda"]
        ccs = [cc for gpu in facts.nvidia_gpus if (cc := V(gpu.compute_capability))]
        if ccs and min(ccs) < known(g["min_compute_capability"]):
            return Check("compile", WARN, f"Triton needs compute capability {g['min_compute_capability']}+; torch.compile falls back",
                         "training.compile: false", "Devices", g["source"])
    if tv < known("2.0"):
        return Check("compile", WARN, f"torch.compile needs torch 2.0+ (installed {t.base_version})", "`envkit setup --torch stable`", "Devices")
    where = "the CPU" if device == "cpu" else f"{device_label(facts)}, {'ROCm' if cuda_is_rocm(facts) else 'CUDA'}"
    return Check("compile", PASS, f"torch.compile available on {where} (torch {t.base_version})", group="Devices")
