"""Facts + gates -> checks. Each check is small, independent and knows its fix (flutter doctor).

`fail` is for what stops training on the best device this machine has; a missing optional
speed-up is `warn`. Every non-pass check carries a concrete fix.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass
from pathlib import PurePath

from envkit.checks import accel, builds
from envkit.facts.model import Facts
from envkit.checks.gates import V, capability_problem, gates, macos_floor_for_mps, min_driver_for_cuda, newest_torch_spec_for_macos, paired_versions

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
NATIVE_PYTHON_FIX = ("install a native arm64 Python and recreate the environment: "
                     "`arch -arm64 /usr/bin/python3 -m venv .venv` (or Homebrew's /opt/homebrew/bin/python3), then `envkit setup`")


@dataclass
class Check:
    id: str
    status: str
    message: str
    fix: str | None = None
    group: str = "PyTorch"
    source: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def best_device(facts: Facts) -> str:
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


def trainer_device(facts: Facts) -> str:
    """The device envkit's own trainer uses (cuda, mps or cpu): it has no xpu device, so on an Intel
    GPU `envkit run` trains on the CPU (profiles/xpu.toml)."""
    device = best_device(facts)
    return device if device in ("cuda", "mps") else "cpu"


def _rocm(facts: Facts) -> bool:
    """torch.cuda speaks of AMD GPUs here: ROCm torch ran, or AMD GPUs and no NVIDIA one."""
    rt = facts.runtime or {}
    return bool(rt.get("hip_version")) or (bool(facts.amd_gpus) and not facts.nvidia_gpus)


def device_gpus(facts: Facts) -> list:
    """The GPUs best_device() trains on."""
    device = best_device(facts)
    if device == "cuda":
        return facts.amd_gpus if _rocm(facts) else facts.nvidia_gpus
    return facts.intel_gpus if device == "xpu" else []


def device_label(facts: Facts) -> str:
    """"4 x AMD Instinct MI300X (gfx942)": the GPUs that train, as a verdict names them."""
    from envkit.facts.collect import gpu_groups

    groups = gpu_groups(device_gpus(facts))
    return ", ".join(f"{f'{n} x ' if n > 1 else ''}{name}" + (f" ({arch})" if arch else "")
                     for (name, _mem, arch), n in groups) or {"cuda": "the CUDA GPU", "xpu": "the Intel GPU"}.get(best_device(facts), "the CPU")


def _gate_note(facts: Facts) -> str:
    if facts.runtime_ok:
        return ""
    if facts.runtime is None:
        return " (judged from version gates only: torch was not imported)"
    return " (judged from version gates only: importing torch failed)"


def check_os(facts: Facts) -> Check:
    o = facts.os
    if o.system == "Darwin":
        if not o.version:
            return Check("os", WARN, "could not read the macOS version", "run `sw_vers -productVersion` and attach `envkit doctor --record snapshot.json` to a bug report", "System")
        text = f"macOS {o.version}" + (f" ({o.build})" if o.build else "")
        return Check("os", PASS, text + (f"; {o.note}" if o.note else ""), group="System")
    if o.system == "Linux":
        return Check("os", PASS, f"{o.name or 'Linux'}", group="System")
    return Check("os", WARN, f"{o.system}: envkit knows macOS and Linux best", "use macOS or Linux, or report what fails", "System")


def check_python_version(facts: Facts) -> Check:
    """torch's Python floor rose with its releases (torch_variants.toml: 3.9 up to 2.8, 3.10 from
    2.9): judged against the installed torch, else against the newest release."""
    pv = V(facts.python.version)
    if pv is None:
        return Check("python-version", WARN, "could not read the Python version", "run `python3 --version`", "Python")
    installed = facts.torch.base_version
    floor, source = builds.python_floor(installed)
    newest = builds.releases()[-1]
    if pv < V(floor):
        what = f"torch {installed}" if installed else f"torch {newest['torch']}"
        return Check("python-version", FAIL, f"Python {pv} is older than {floor}, the oldest {what} has wheels for",
                     "install Python 3.12 and run `envkit setup --python python3.12`", "Python", source)
    if installed and pv < V(newest["python"]):
        return Check("python-version", WARN, f"Python {pv} runs torch {installed}, but torch {newest['torch']} needs Python "
                     f"{newest['python']}+: this environment cannot move past its torch line",
                     "install Python 3.12 and run `envkit setup --python python3.12`", "Python", source)
    return Check("python-version", PASS, f"{facts.python.implementation or 'Python'} {pv}", group="Python")


def check_python_arch(facts: Facts) -> Check:
    p, c = facts.python, facts.chip
    if not p.machine:
        return Check("python-arch", WARN, "could not read the interpreter's architecture", "run `python3 -c 'import platform; print(platform.machine())'`", "Python")
    if facts.is_macos and c.arm64_hardware:
        if p.rosetta:
            return Check("python-arch", FAIL,
                         f"this Python is x86_64 running under Rosetta on an {c.name or 'Apple silicon'} Mac: it never sees MPS and runs slower",
                         NATIVE_PYTHON_FIX, "Python", "Lightning-AI#14634; comfy-cli PR #568")
        return Check("python-arch", PASS, f"native {p.machine} interpreter", group="Python")
    return Check("python-arch", PASS, f"{p.machine} interpreter" + (" (Intel Mac)" if facts.is_macos else ""), group="Python")


def check_torch(facts: Facts) -> Check:
    t, rt = facts.torch, facts.runtime
    if not t.version:
        if rt and rt.get("ok"):  # importable but without metadata (a source build on sys.path)
            return Check("torch", PASS, f"torch {rt.get('torch_version')} (no installed metadata)")
        if rt and not rt.get("missing"):
            return Check("torch", FAIL, f"importing torch failed: {rt.get('error')}", "reinstall it: `envkit setup --torch stable`")
        return Check("torch", FAIL, "torch is not installed in this interpreter", "`envkit setup` creates an environment with the right torch build")
    if t.base_version is None:
        return Check("torch", WARN, f"installed torch reports an unreadable version {t.version!r}",
                     "reinstall it: `envkit setup --torch stable`")
    desc = f"torch {t.version} ({t.channel or 'unknown channel'}" + (f", {t.local} build" if t.local else "") + ")"
    if rt is not None and not rt.get("ok") and not rt.get("missing"):
        return Check("torch", FAIL, f"{desc} is installed but importing it failed: {rt.get('error')}",
                     "reinstall it: `envkit setup --torch stable`")
    if facts.is_macos and facts.chip.vendor == "intel":
        g = gates()["intel_mac"]
        return Check("torch", WARN, f"{desc}; Intel Mac: torch stops at {g['max_torch']} and trains on the CPU only",
                     "use an Apple silicon Mac or a CUDA machine for current torch", source=g["source"])
    return Check("torch", PASS, desc)


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
    if tv is not None and tv < V(g["min_torch"]):
        return Check("mps", FAIL, f"torch {t.version} predates MPS (needs {g['min_torch']}+)", "`envkit setup --torch stable`", "Devices", g["source"])
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
    return Check("mps", PASS, f"MPS should work: torch {t.base_version} on macOS {macos} (needs {floor}+)" + _gate_note(facts), group="Devices", source=source)


def check_cuda(facts: Facts) -> Check:
    rt = facts.runtime or {}
    if _rocm(facts):
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
        if need and V(gpu.driver) is not None and V(gpu.driver) < V(need):
            return Check("cuda", FAIL, f"torch {t.version} is built for CUDA {cuda}, which needs NVIDIA driver {need}+; this driver is {gpu.driver}",
                         f"upgrade the driver to {need}+, or let envkit pick a build this driver runs: `envkit setup --torch stable`",
                         "Devices", "NVIDIA CUDA release notes, table 2")
    arch = _arch_check(facts, rt)
    if arch:
        return arch
    for g in facts.nvidia_gpus:
        problem = capability_problem(g.compute_capability, cuda)
        if problem:
            return Check("cuda", FAIL, f"{g.name} (sm_{g.compute_capability.replace('.', '')}) cannot run this CUDA {cuda} build: {problem}",
                         "`envkit setup --torch stable` picks a build for this GPU", "Devices")
    if rt.get("ok"):
        if rt.get("cuda_available"):
            devs = rt.get("devices") or []
            listed = ", ".join(d.get("name", "?") for d in devs) or names
            return Check("cuda", PASS, f"CUDA {rt.get('cuda_version')} available: {rt.get('device_count', len(devs))} x {listed}", group="Devices")
        return Check("cuda", FAIL, f"torch {t.version} cannot use {names} (torch.cuda.is_available() is False)",
                     "check `nvidia-smi` works, then `envkit setup --torch stable`", "Devices")
    driver = f", driver {gpu.driver}" if gpu and gpu.driver else ""
    return Check("cuda", PASS, f"{names}{driver}; torch built for CUDA {cuda or '?'}" + _gate_note(facts), group="Devices")


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
                       + _gate_note(facts))
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


def check_bf16(facts: Facts) -> Check:
    device = best_device(facts)
    t, rt = facts.torch, facts.runtime or {}
    if not t.base_version:
        return Check("bf16", SKIP, "torch is not installed (see the torch check)", group="Devices")
    if device == "mps":
        g = gates()["bf16"]["mps"]
        macos = V(facts.os.version)
        if facts.python.rosetta:
            return Check("bf16", SKIP, "no MPS under Rosetta (see python-arch)", group="Devices")
        if macos is None or macos < V(g["macos"]):
            return Check("bf16", WARN, f"bf16 on MPS needs macOS {g['macos']}+ (this Mac: {facts.os.version or 'unknown'}); use fp16 or fp32",
                         f"upgrade macOS to {g['macos']}+; until then keep training.precision at fp32 or fp16", "Devices", g["source"])
        if V(t.base_version) < V(g["autocast_torch"]):
            return Check("bf16", WARN, f"bf16 autocast on MPS needs torch {g['autocast_torch']}+ (installed {t.base_version})",
                         "`envkit setup --torch stable`", "Devices", g["source"])
        if rt.get("ok") and rt.get("mps_bf16") is False:
            return Check("bf16", WARN, f"MPS refused a bf16 tensor: {rt.get('mps_bf16_error', '')}", "keep training.precision at fp32", "Devices")
        if facts.chip.family in g["emulated_families"]:
            return Check("bf16", PASS, f"bf16 works but is emulated on {facts.chip.family}: no speed-up over fp32 (the {facts.chip.family.lower()} profiles train in fp32)", group="Devices", source=g["source"])
        return Check("bf16", PASS, f"bf16 supported on MPS (macOS {macos}, torch {t.base_version})" + _gate_note(facts), group="Devices")
    if device == "cuda" and _rocm(facts):
        return _bf16_amd(facts)
    if device == "xpu":
        return _bf16_xpu(facts)
    if device == "cuda":
        g = gates()["bf16"]["cuda"]
        # Compute capability first: is_bf16_supported() also answers True where bf16 is only
        # emulated (T4, V100), which trains slower than fp16 (gates.toml [bf16.cuda]).
        ccs = [V(gpu.compute_capability) for gpu in facts.nvidia_gpus if gpu.compute_capability]
        if ccs and min(ccs) < V(g["min_compute_capability"]):
            said = " (torch.cuda.is_bf16_supported() says True: it counts emulation)" if rt.get("ok") and rt.get("cuda_bf16") else ""
            return Check("bf16", WARN, f"compute capability {min(ccs)} < {g['min_compute_capability']}: no bf16 tensor cores, bf16 is emulated{said}",
                         "train with precision fp16 (GradScaler is used on CUDA)", "Devices", g["source"])
        if rt.get("ok") and "cuda_bf16" in rt:
            if rt["cuda_bf16"]:
                return Check("bf16", PASS, f"bf16 supported on {device_label(facts)} (torch.cuda.is_bf16_supported())", group="Devices")
            return Check("bf16", WARN, f"{device_label(facts)} has no bf16 support", "train with precision fp16 (GradScaler is used on CUDA)", "Devices", g["source"])
        return Check("bf16", PASS, f"bf16 supported on {device_label(facts)} (compute capability 8.0+)" + _gate_note(facts), group="Devices")
    return Check("bf16", SKIP, "CPU training uses fp32 by default", group="Devices")


def _not_the_gpu_build(facts: Facts) -> str | None:
    """Why the installed torch cannot reach this machine's AMD or Intel GPU, or None."""
    t, rt = facts.torch, facts.runtime or {}
    if best_device(facts) == "xpu":
        ok = (t.local or "") == "xpu" or rt.get("xpu_available")
        return None if ok else f"torch {t.version} is not the XPU build, so {device_label(facts)} sits unused (see rocm-xpu)"
    ok = (t.local or "").startswith("rocm") or rt.get("hip_version")
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
        return Check("bf16", PASS, f"bf16 supported on {device_label(facts)}: bf16 XMX engines (XPU)" + _gate_note(facts),
                     group="Devices", source=g["source"])
    return Check("bf16", SKIP, f"{device_label(facts)}: envkit does not know this Intel GPU's bf16 support; "
                 "torch.xpu.is_bf16_supported() tells", group="Devices", source=g["source"])


def check_compile(facts: Facts) -> Check:
    device = best_device(facts)
    t = facts.torch
    if not t.base_version:
        return Check("compile", SKIP, "torch is not installed (see the torch check)", group="Devices")
    tv = V(t.base_version)
    if device == "mps" and facts.python.rosetta:
        return Check("compile", SKIP, "no MPS under Rosetta (see python-arch)", group="Devices")
    if device == "mps":
        g = gates()["compile"]["mps"]
        macos = V(facts.os.version)
        if tv < V(g["torch"]) or macos is None or macos < V(g["macos"]):
            return Check("compile", WARN, f"torch.compile on MPS is usable from torch {g['torch']} on macOS {g['macos']}+ (here torch {t.base_version}, macOS {facts.os.version or '?'}); training runs eager",
                         "`envkit setup --torch stable` (and macOS 14+) to enable it; meanwhile training.compile: false", "Devices", g["source"])
        return Check("compile", PASS, f"torch.compile usable on MPS (torch {t.base_version})", group="Devices", source=g["source"])
    if device == "xpu" or (device == "cuda" and _rocm(facts)):
        why = _not_the_gpu_build(facts)
        if why:
            return Check("compile", SKIP, why, group="Devices")
    if device == "xpu":
        g = accel.table()["compile"]["xpu"]
        if tv < V(g["torch"]):
            return Check("compile", WARN, f"torch.compile on {device_label(facts)} (XPU) needs torch {g['torch']}+ (installed {t.base_version}); training runs eager",
                         "`envkit setup --torch stable`", "Devices", g["source"])
        return Check("compile", PASS, f"torch.compile available on {device_label(facts)}, XPU (torch {t.base_version})", group="Devices", source=g["source"])
    if device == "cuda":
        g = gates()["compile"]["cuda"]
        ccs = [V(gpu.compute_capability) for gpu in facts.nvidia_gpus if gpu.compute_capability]
        if ccs and min(ccs) < V(g["min_compute_capability"]):
            return Check("compile", WARN, f"Triton needs compute capability {g['min_compute_capability']}+; torch.compile falls back", "training.compile: false", "Devices", g["source"])
    if tv < V("2.0"):
        return Check("compile", WARN, f"torch.compile needs torch 2.0+ (installed {t.base_version})", "`envkit setup --torch stable`", "Devices")
    where = "the CPU" if device == "cpu" else f"{device_label(facts)}, {'ROCm' if _rocm(facts) else 'CUDA'}"
    return Check("compile", PASS, f"torch.compile available on {where} (torch {t.base_version})", group="Devices")


def check_pairing(facts: Facts) -> Check:
    t = facts.torch
    if not t.base_version:
        return Check("torch-pairing", SKIP, "torch is not installed (see the torch check)")
    want = paired_versions(t.version)
    installed = {n: facts.packages.get(n) for n in ("torchvision", "torchaudio") if facts.packages.get(n)}
    if not installed:
        return Check("torch-pairing", PASS, "no torchvision/torchaudio installed")
    if want is None:
        return Check("torch-pairing", WARN, f"no known pairing for torch {t.version}", "check PyTorch's compatibility matrix")
    bad = []
    for name, ver in installed.items():
        v = V(ver)
        if v is None or f"{v.major}.{v.minor}" != want[name]:
            bad.append(f"{name} {ver} (torch {t.base_version} pairs with {want[name]}.x)")
    if bad:
        pins = " ".join(f"'{n}=={want[n]}.*'" for n in installed)
        return Check("torch-pairing", FAIL, "mismatched with torch: " + "; ".join(bad) + " — importing it fails (e.g. 'operator torchvision::nms does not exist')",
                     f"`envkit setup --with {','.join(installed)}` installs the paired releases (or pip install {pins} from torch's index)",
                     source=gates()["pairing"]["source"])
    return Check("torch-pairing", PASS, ", ".join(f"{n} {v}" for n, v in installed.items()) + f" paired with torch {t.base_version}")


def check_env_vars(facts: Facts) -> Check:
    g = gates()["env"]
    known = set(g["known"])
    env = facts.env
    problems, fixes = [], []
    not_read = g.get("not_read", {})
    for name, value in env.items():
        if name in not_read:
            problems.append(f"{name} is set, but PyTorch never reads it: it changes nothing ({not_read[name]})")
            fixes.append(f"unset {name}")
            continue
        if name.startswith("PYTORCH_") and name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.85)
            if close:
                problems.append(f"{name} is not a PyTorch variable (did you mean {close[0]}?)")
                fixes.append(f"unset {name}; export {close[0]}={_sh(value)}")
    for name in ("PYTORCH_MPS_HIGH_WATERMARK_RATIO", "PYTORCH_MPS_LOW_WATERMARK_RATIO"):
        if name in env:
            try:
                ratio = float(env[name])
            except ValueError:
                problems.append(f"{name}={env[name]!r} is not a number")
                fixes.append(f"unset {name}")
                continue
            if name.endswith("HIGH_WATERMARK_RATIO") and ratio == 0.0:
                problems.append(f"{name}=0.0 removes the MPS memory cap, which PyTorch says 'may cause system failure'")
                fixes.append(f"unset {name} (default 1.7), or lower the batch size / use gradient accumulation")
    if "KMP_DUPLICATE_LIB_OK" in env:
        problems.append("KMP_DUPLICATE_LIB_OK is set: it hides a duplicate OpenMP runtime and is unsafe (pytorch#78490)")
        fixes.append("unset KMP_DUPLICATE_LIB_OK and remove the duplicate runtime (see the openmp check)")
    if facts.is_apple_silicon and not facts.python.rosetta:
        for name, value in g.get("recommended_mps", {}).items():
            if env.get(name) != value:
                problems.append(f"{name} is not {value}: an operator MPS lacks raises NotImplementedError instead of running on the CPU")
                fixes.append('eval "$(envkit env)" (or `envkit env --write .envkit`) sets the profile\'s variables')
    if problems:
        return Check("env-vars", WARN, "; ".join(problems), "; ".join(dict.fromkeys(fixes)), "Environment", g["source"])
    shown = [k for k in env if k.startswith(("PYTORCH_", "OMP_", "MKL_"))]
    return Check("env-vars", PASS, "variables look right" + (f" ({', '.join(shown)})" if shown else ""), group="Environment")


def _omp_kind(path: str) -> str | None:
    name = PurePath(path).name
    if name.startswith("libiomp5"):
        return "intel"
    if name.startswith("libgomp"):
        return "gnu"
    if name.startswith("libomp"):
        return "llvm"
    return None


def _owner(path: str) -> str:
    parts = PurePath(path).parts
    if "site-packages" in parts:
        i = parts.index("site-packages")
        if i + 1 < len(parts):
            return re.sub(r"\.libs$|\.dylibs$", "", parts[i + 1])
    return str(PurePath(path).parent)


def check_openmp(facts: Facts) -> Check:
    libs = [p for p in facts.openmp_libs if _omp_kind(p)]
    if not libs:
        return Check("openmp", PASS, "no bundled OpenMP runtime found in site-packages", group="Environment")
    kinds: dict[str, list[str]] = {}
    for p in libs:
        kinds.setdefault(_omp_kind(p), []).append(_owner(p))
    intel_llvm = kinds.get("intel", []) + kinds.get("llvm", [])
    owners = sorted(set(intel_llvm), key=lambda o: (o == "torch", o))  # torch's own copy is the one to keep
    source = "pytorch#78490, #83540"
    if facts.is_macos and len(intel_llvm) > 1:
        return Check("openmp", FAIL, f"{len(intel_llvm)} OpenMP runtimes in site-packages ({', '.join(owners)}): loading both aborts with 'OMP: Error #15'",
                     f"keep one: reinstall the other package from a build that uses torch's runtime (`pip uninstall {owners[0]}` and reinstall it), not KMP_DUPLICATE_LIB_OK",
                     "Environment", source)
    if kinds.get("intel") and kinds.get("llvm"):
        return Check("openmp", WARN, f"both Intel (libiomp5: {', '.join(sorted(set(kinds['intel'])))}) and LLVM (libomp: {', '.join(sorted(set(kinds['llvm'])))}) OpenMP runtimes are installed",
                     "if you see 'OMP: Error #15', uninstall one of those packages; never set KMP_DUPLICATE_LIB_OK", "Environment", source)
    summary = ", ".join(f"{k}: {', '.join(sorted(set(v)))}" for k, v in kinds.items())
    return Check("openmp", PASS, f"one OpenMP runtime per kind ({summary})", group="Environment")


def _sh(value: str) -> str:
    import shlex

    return shlex.quote(value)


ALL_CHECKS = (check_os, check_python_version, check_python_arch, check_torch, check_pairing, check_mps, check_cuda,
              check_amd_intel, check_bf16, check_compile, check_env_vars, check_openmp)


def run_checks(facts: Facts) -> list[Check]:
    return [fn(facts) for fn in ALL_CHECKS]


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.status == FAIL for c in checks) else 0
