"""AMD (ROCm) and Intel (XPU) GPUs: which torch build runs them, and doctor's verdict on the
installed one. Rules live in envkit/data/accelerators.toml; this module only evaluates them.
`envkit setup` asks `pick()` (install/choice/variants.py turns the answer into its Choice)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from packaging.version import InvalidVersion, Version

from envkit.checks.verdict import Status
from envkit.errors import NoBuildError
from envkit.facts.model import Channel, Facts, GPUInfo, TorchDevice
from envkit.resources import data_file, load_toml
from envkit.facts.torch_build import TorchBuild


@lru_cache(maxsize=1)
def table() -> dict:
    return load_toml(data_file("accelerators.toml"))


@dataclass
class Pick:
    """The build for an AMD or Intel GPU: `device` is what torch calls it ("cuda" on ROCm:
    HIP answers torch.cuda.*; "xpu" on Intel)."""

    device: TorchDevice
    backend: TorchBuild  # rocm6.4, xpu, or cpu when the GPU cannot be used
    why: str
    notes: list[str] = field(default_factory=list)
    limit: str = ""  # a torch specifier ("<2.11") when only older releases hold this GPU

    def __post_init__(self) -> None:
        self.backend = TorchBuild(self.backend)  # the table's text becomes the value type here


def _minor(version) -> tuple[int, int] | None:
    try:
        v = Version(str(version))
    except (InvalidVersion, TypeError):
        return None
    return v.major, v.minor


def _order(version) -> tuple[int, int]:
    """A sort key of the table's release lines and backends (each parses: (0, 0) were one not to)."""
    return _minor(version) or (0, 0)


def rocm_builds(line: str | None, channel: Channel = "stable") -> tuple[str, list[tuple[str, list[str], str]]]:
    """(the release line used, [(backend, gfx targets, source)] oldest ROCm first) for "2.13", the
    newest line when None, the nightly matrix for channel nightly."""
    t = table()
    rows = t["rocm"]["release"]
    if channel == "nightly":
        key = "nightly"
    else:
        lines = sorted((k for k in rows if k != "nightly"), key=_order)
        want = _minor(line) if line else None
        key = next((k for k in lines if _minor(k) == want), lines[-1]) if want else lines[-1]
    out = []
    for backend, set_name in rows[key].items():
        s = t["rocm_targets"][set_name]
        out.append((backend, list(s["gfx"]), s["source"]))
    return key, sorted(out, key=lambda b: _order(b[0].removeprefix("rocm")))


def _base_gfx(arch: str | None) -> str | None:
    """"gfx90a:sramecc+:xnack-" -> "gfx90a"."""
    return arch.split(":", 1)[0] if arch else None


def rocm_usable(facts: Facts) -> bool:
    """Whether an AMD GPU here has a ROCm build of the newest torch (or an older one) to run on."""
    if not facts.amd_gpus:
        return False
    try:
        return pick(facts, None, "stable").backend.kind == "rocm"
    except NoBuildError:
        return False


def xpu_usable(facts: Facts) -> bool:
    """Whether an Intel GPU here is one PyTorch's XPU build supports."""
    return any(xpu_supported(g) for g in facts.intel_gpus)


def xpu_supported(gpu: GPUInfo) -> bool:
    return any(word.lower() in gpu.name.lower() for word in table()["xpu"]["supported"])


def pick(facts: Facts, line: str | None, channel: Channel) -> Pick:
    """The build for this machine's AMD or Intel GPU (callers ask only where facts.other_gpus has
    one: ValueError otherwise). Raises NoBuildError (exit 1) when the GPU is known but no build of
    that release holds it."""
    amd, intel = facts.amd_gpus, facts.intel_gpus
    if amd:
        return _pick_rocm(amd[0], facts, line, channel)
    if intel:
        return _pick_xpu(intel[0], line)
    raise ValueError("accel.pick: this machine has no AMD or Intel GPU")


def _pick_rocm(gpu: GPUInfo, facts: Facts, line: str | None, channel: Channel) -> Pick:
    gfx = _base_gfx(gpu.arch)
    if gfx is None:
        return Pick("cpu", TorchBuild("cpu"),
                    "PyTorch's CPU index: an AMD GPU was seen (lspci) but ROCm's rocminfo is missing, so its gfx target is unknown",
                    [f"{gpu.name}: install ROCm (rocminfo) and run setup again to get a ROCm build"])
    key, builds = rocm_builds(line, channel)
    found = _holding(builds, gfx)
    limit = ""
    if found is None and line is None and channel == "stable":
        # The newest release drops this GPU: an older release line may still hold it.
        lines = sorted((k for k in table()["rocm"]["release"] if k != "nightly"), key=_order, reverse=True)
        for older in lines[1:]:
            found = _holding(rocm_builds(older)[1], gfx)
            if found is not None:
                nxt = lines[lines.index(older) - 1]
                key, limit = older, f"<{nxt}"
                break
    if found is None:
        have = ", ".join(b for b, _, _ in builds)
        holding = sorted((k for k in table()["rocm"]["release"] if k != "nightly" and _holding(rocm_builds(k)[1], gfx)), key=_order)
        if not holding:  # no release ever held it: the CPU build is the best there is
            first = min((k for k in table()["rocm"]["release"] if k != "nightly"), key=_order)
            return Pick("cpu", TorchBuild("cpu"), f"PyTorch's CPU index: no ROCm build of torch {first}+ holds {gpu.name} ({gfx})",
                        [f"no ROCm build of torch holds {gfx} kernels ('HIP error: invalid device function'): the CPU build is installed"])
        raise NoBuildError(f"no ROCm build of torch {key} ({have}) holds kernels for {gfx}: it would fail with 'HIP error: invalid device function'",
                           fix=f"ask for --torch {holding[-1]} (its ROCm build lists {gfx}), or --torch stable")
    backend, source = found
    notes = [f"{backend} holds {gfx} ({source})"]
    if limit:
        notes.append(f"torch stays {limit}: newer ROCm builds hold no {gfx} kernels")
    if facts.rocm_version:
        notes.append(f"ROCm {facts.rocm_version} is installed; the wheel brings its own ROCm libraries and needs only the amdgpu kernel driver")
    ver = table()["rocm"]["verified"]
    if key not in ver["lines"]:
        notes.append(f"the ROCm builds of torch {key} come from envkit's table, not read off the index: {ver['note']}")
    return Pick("cuda", TorchBuild(backend), f"PyTorch's {backend} index: the newest ROCm build of torch {key} that holds {gpu.name} ({gfx})",
                notes, limit)


def _holding(builds: list[tuple[str, list[str], str]], gfx: str) -> tuple[str, str] | None:
    """(backend, source) of the newest build that holds this gfx target."""
    return next(((b, src) for b, targets, src in reversed(builds) if gfx in targets), None)


def _pick_xpu(gpu: GPUInfo, line: str | None) -> Pick:
    x = table()["xpu"]
    if line and _order(line) < _order(x["first"]):
        raise NoBuildError(f"torch {line} has no Intel GPU (XPU) build: the first is {x['first']} ({x['source']})",
                           fix=f"ask for --torch {x['first']} or newer, or use a CPU build")
    if not xpu_supported(gpu):
        return Pick("cpu", TorchBuild("cpu"), f"PyTorch's CPU index: {gpu.name} is not a GPU PyTorch's XPU build supports",
                    ["torch's XPU build wants Intel Arc (Alchemist) or newer, or a Data Center GPU Max/Flex, "
                     f"not {gpu.name}: the CPU build is installed"])
    return Pick("xpu", x["index_backend"], f"PyTorch's {x['index_backend']} index: the Intel GPU build ({gpu.name})",
                [f"{gpu.name}: XPU build of torch ({x['source']}); envkit's trainer runs on cuda, mps or cpu, "
                 "so `envkit run` trains on the CPU here"])


def describe(facts: Facts) -> str | None:
    """"AMD Radeon RX 7900 XTX (gfx1100), ROCm 6.4.1", "4 x AMD Instinct MI300X (gfx942)" for doctor."""
    if not facts.other_gpus:
        return None
    g = facts.other_gpus[0]
    n = sum(1 for o in facts.other_gpus if (o.vendor, o.name) == (g.vendor, g.name))
    bits = [(f"{n} x " if n > 1 else "") + g.name + (f" ({g.arch})" if g.arch and g.vendor == "amd" else "")]
    if g.vendor == "amd" and facts.rocm_version:
        bits.append(f"ROCm {facts.rocm_version}")
    if g.vendor == "intel" and g.driver:
        bits.append(f"driver {g.driver}")
    return ", ".join(bits)


def verdict(facts: Facts) -> tuple[Status, str, str | None, str | None]:
    """Doctor's (status, message, fix, source) for an AMD or Intel GPU and the installed torch."""
    g = facts.other_gpus[0]
    t, rt = facts.torch, facts.runtime or {}
    what = describe(facts)
    setup = "`envkit setup --torch stable`"
    try:
        planned = pick(facts, None, "stable")
        plan = f"setup plans the {planned.backend} build" if planned.backend != "cpu" else planned.why
    except NoBuildError as exc:  # stable never raises for a GPU some release holds: kept for safety
        return "fail", f"{what}: {exc.message}", exc.fix, None
    if g.vendor == "amd" and not g.arch:  # often a Ryzen's integrated graphics: not worth a warning
        return ("skip", f"{what}: seen by lspci only (no amd-smi or rocminfo), so its gfx target is unknown: install ROCm to have it judged",
                None, None)
    if g.vendor == "intel" and planned.backend == "cpu" and not (t.local or "") == "xpu":
        return "skip", f"{what}: {planned.notes[0]}", None, table()["xpu"]["supported_source"]
    if planned.backend == "cpu":
        # No build runs this GPU: a CPU build is the best there is (a warning, not a failure),
        # and a ROCm/XPU build installed anyway is a failure.
        if TorchBuild(t.local or "").kind in ("rocm", "xpu"):
            return ("fail", f"{what}: torch {t.version} cannot run on it: {planned.notes[0]}",
                    "`envkit setup --torch stable` installs the CPU build", None)
        fix = "train on the CPU (envkit setup installs the CPU build)" + (", or use a supported Intel GPU" if g.vendor == "intel" else "")
        return "warn", f"{what}: {planned.notes[0]}", fix, table()["xpu"]["supported_source"] if g.vendor == "intel" else None
    if not t.version:
        return "warn", f"{what}: torch is not installed; {plan}", setup, None
    local = t.local or ""
    if g.vendor == "amd":
        if TorchBuild(local).kind != "rocm" and not rt.get("hip_version"):
            return "fail", f"{what}: torch {t.version} is not a ROCm build, so the GPU sits unused; {plan}", setup, None
        if rt.get("ok") and not rt.get("cuda_available"):
            return "fail", f"{what}: torch {t.version} cannot use the GPU (torch.cuda.is_available() is False under ROCm)", \
                   "check `rocminfo` lists the GPU and that your user is in the render and video groups", None
        gfx = _base_gfx(g.arch)
        if rt.get("ok") and rt.get("arch_list") is not None:  # torch ran: its own list is the truth
            problems = gfx_problems(rt["arch_list"], [{"name": g.name, "gfx": gfx}])
            if problems:
                return "fail", f"{what}: torch {t.version}: {problems[0]}", setup, "torch.cuda.get_arch_list()"
        _, builds = rocm_builds(t.base_version, t.channel or "stable")
        row = next((b for b in builds if b[0] == local), None)
        if row is not None and gfx not in row[1]:
            return "fail", f"{what}: torch {t.version} holds no kernels for {gfx} (its {local} build holds {', '.join(row[1])})", setup, row[2]
        return "pass", f"{what}: torch {t.version}" + (f" ({local} holds {gfx})" if row else ""), None, row[2] if row else None
    if local != "xpu" and not rt.get("xpu_available"):
        return "fail", f"{what}: torch {t.version} is not the XPU build, so the GPU sits unused; {plan}", setup, table()["xpu"]["source"]
    return "pass", f"{what}: torch {t.version} (XPU build)", None, None


def gfx_problems(arch_list: list[str] | None, gpus: list[dict]) -> list[str]:
    """After installing a ROCm build: every GPU's gfx target (torch.cuda.get_device_properties().
    gcnArchName, "gfx90a:sramecc+:xnack-") must be among the build's torch.cuda.get_arch_list()."""
    if arch_list is None:
        return []
    have = {_base_gfx(a) for a in arch_list}
    out = []
    for g in gpus:
        gfx = _base_gfx(g.get("gfx"))
        if gfx and gfx not in have:
            out.append(f"{g.get('name', 'the GPU')} ({gfx}) is not in this ROCm build's torch.cuda.get_arch_list() "
                       f"({', '.join(arch_list)}): every GPU operation would fail with 'HIP error: invalid device function'")
    return out
