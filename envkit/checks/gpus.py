"""The checks of the GPU that trains: MPS on a Mac, CUDA on NVIDIA (the driver, the build's
kernels for this GPU's architecture), ROCm and XPU on AMD and Intel GPUs."""

from __future__ import annotations

from envkit.checks import accel, builds
from envkit.checks.device import cuda_is_rocm, gate_note
from envkit.checks.gates import (V, capability_problem, gates, known, macos_floor_for_mps, min_driver_for_cuda, newest_torch_spec_for_macos,
                                 older_than)
from envkit.checks.system import NATIVE_PYTHON_FIX
from envkit.checks.verdict import FAIL, PASS, SKIP, WARN, Check
from envkit.facts.model import Facts


def check_mps(facts: Facts) -> Check:
    if not facts.is_macos:
        return Check("mps", SKIP, "not a Mac", group="Devices")
    if not facts.is_apple_silicon:
        return Check("mps", SKIP, "Intel Mac: MPS training needs Apple silicon", group="Devices")
    if facts.python.rosetta:
        return Check("mps", FAIL, "an x86_64 Python under Rosetta never sees MPS", NATIVE_PYTHON_FIX, "Devices", "Lightning-AI#14634")
    t = facts.torch
    if not t.base_version:
        return Check("mps", SKIP, "torch is not installed or its version is unreadable (see the torch check)", group="Devices")
    g = gates()["mps"]
    tv = V(t.base_version)
    if tv is not None and tv < known(g["min_torch"]):
        return Check("mps", FAIL, f"torch {t.version} predates MPS (needs {g['min_torch']}+)", "`envkit setup --torch stable`",
                     "Devices", g["source"])
    macos = V(facts.os.version)
    floor, source = macos_floor_for_mps(t.version)
    if macos is None:
        return Check("mps", WARN, f"macOS version unknown; torch {t.base_version} needs macOS {floor}+ for MPS",
                     "run `sw_vers -productVersion` and check it", "Devices", source)
    if macos < floor:
        older = newest_torch_spec_for_macos(macos)
        fix = f"upgrade macOS to {floor} or newer"
        if older:
            fix += f", or install a torch that still supports macOS {macos}: `envkit setup --torch '{older}'`"
        return Check("mps", FAIL, f"torch {t.base_version} needs macOS {floor}+ for MPS; this Mac runs macOS {macos}", fix, "Devices", source)
    rt = facts.runtime
    if rt and rt.get("ok"):
        if rt.get("mps_available"):
            return Check("mps", PASS, f"MPS available (torch {t.base_version}, macOS {macos})", group="Devices")
        why = "torch was built without MPS" if not rt.get("mps_built") else "torch reports MPS unavailable"
        return Check("mps", FAIL, f"{why} although the version gates hold", "reinstall torch from PyPI: `envkit setup --torch stable`", "Devices")
    return Check("mps", PASS, f"MPS should work: torch {t.base_version} on macOS {macos} (needs {floor}+)" + gate_note(facts),
                 group="Devices", source=source)


def check_cuda(facts: Facts) -> Check:
    rt = facts.runtime or {}
    if cuda_is_rocm(facts):
        return Check("cuda", SKIP, "no NVIDIA GPU found: torch.cuda speaks of the AMD GPU under ROCm (see rocm-xpu)", group="Devices")
    if not facts.nvidia_gpus and not rt.get("cuda_available"):
        return Check("cuda", SKIP, "no NVIDIA GPU found (nvidia-smi absent or empty)", group="Devices")
    gpu = facts.nvidia_gpus[0] if facts.nvidia_gpus else None
    names = ", ".join(sorted({g.name for g in facts.nvidia_gpus})) or "an NVIDIA GPU"
    t = facts.torch
    if not t.version:
        return Check("cuda", SKIP, f"{names} found; torch is not installed (see the torch check)", group="Devices")
    cuda = t.cuda or (rt.get("cuda_version") if rt.get("ok") else None)
    if t.local == "cpu" or (rt.get("ok") and not rt.get("cuda_built") and not cuda):
        return Check("cuda", FAIL, f"torch {t.version} is a CPU build: {names} sits unused",
                     "install a CUDA build chosen for this driver: `envkit setup --torch stable`", "Devices")
    if gpu and gpu.driver and cuda:
        need = min_driver_for_cuda(cuda)
        if need and older_than(gpu.driver, need):
            return Check("cuda", FAIL, f"torch {t.version} is built for CUDA {cuda}, which needs NVIDIA driver {need}+; this driver is {gpu.driver}",
                         f"upgrade the driver to {need}+, or let envkit pick a build this driver runs: `envkit setup --torch stable`",
                         "Devices", "NVIDIA CUDA release notes, table 2")
    arch = _arch_check(facts, rt)
    if arch:
        return arch
    for g in facts.nvidia_gpus:
        problem = capability_problem(g.compute_capability, cuda)
        if problem:
            return Check("cuda", FAIL, f"{g.name} (sm_{str(g.compute_capability).replace('.', '')}) cannot run this CUDA {cuda} build: {problem}",
                         "`envkit setup --torch stable` picks a build for this GPU", "Devices")
    if rt.get("ok"):
        if rt.get("cuda_available"):
            devs = rt.get("devices") or []
            listed = ", ".join(d.get("name", "?") for d in devs) or names
            return Check("cuda", PASS, f"CUDA {rt.get('cuda_version')} available: {rt.get('device_count', len(devs))} x {listed}", group="Devices")
        return Check("cuda", FAIL, f"torch {t.version} cannot use {names} (torch.cuda.is_available() is False)",
                     "check `nvidia-smi` works, then `envkit setup --torch stable`", "Devices")
    driver = f", driver {gpu.driver}" if gpu and gpu.driver else ""
    return Check("cuda", PASS, f"{names}{driver}; torch built for CUDA {cuda or '?'}" + gate_note(facts), group="Devices")


def _arch_check(facts: Facts, rt: dict) -> Check | None:
    """A GPU the installed build holds no kernels for: judged by torch's own get_arch_list() when
    torch ran, else by the build table (torch_variants.toml). "no kernel image is available"."""
    t = facts.torch
    arch_list = rt.get("arch_list") if rt.get("ok") else None
    build = builds.build_of(t.version, t.local)
    for g in facts.nvidia_gpus:
        sm = builds.sm_name(g.compute_capability)
        if arch_list is not None:
            have, ptx = builds.parse_arch_list(arch_list)
            if builds.arch_list_runs(have, ptx, g.compute_capability) is not False:
                continue
            message = (f"{g.name} ({sm}) is not in torch.cuda.get_arch_list() of torch {t.version} "
                       f"({', '.join(arch_list)}): every CUDA operation fails with 'no kernel image is available'")
        elif build is not None and builds.runs_on(build, g.compute_capability) is False:
            message = (f"{g.name} ({sm}) has no kernels in torch {t.version}: the {build.backend} build holds {build.arch_text()}"
                       + gate_note(facts))
        else:
            continue
        fit = builds.newest_fit(g.compute_capability, g.driver)
        if fit:
            message += f"; torch {fit[0]}'s {fit[1]} build holds {sm} and runs on this driver"
        fix = (f"`envkit setup --torch stable` installs a build that holds {sm} (torch {fit[0]}, {fit[1]} for this GPU and driver)"
               if fit else "no published build runs this GPU: build torch from source with TORCH_CUDA_ARCH_LIST")
        return Check("cuda", FAIL, message, fix, "Devices", build.source if build else "torch.cuda.get_arch_list()")
    return None


def check_amd_intel(facts: Facts) -> Check:
    """AMD (ROCm) and Intel (XPU) GPUs: the GPU, the build setup plans, the installed build's fit."""
    if not facts.other_gpus:
        return Check("rocm-xpu", SKIP, "no AMD or Intel GPU found (amd-smi, rocminfo, xpu-smi, sycl-ls, lspci)", group="Devices")
    status, message, fix, source = accel.verdict(facts)
    return Check("rocm-xpu", status, message, fix, "Devices", source)  # status: pass, warn, fail or skip
