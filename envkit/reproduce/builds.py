"""What belongs to a torch build rather than to a run: the torch family at one base version in
another build (2.13.0 from PyPI on a Mac, 2.13.0+cpu on a CPU box) and the accelerator runtime a
build brings. Used where a run recorded on another kind of machine is rebuilt (elsewhere.py) and
checked (check.py)."""

from __future__ import annotations

import re

from envkit.facts import gather
from envkit.install.lock.machine import machine_device, platform_differences, platform_of
from envkit.install.lock.torch_pick import TORCH_FAMILY

# What a torch build brings for its accelerator (CUDA's libraries, Triton, ROCm's and XPU's): it
# belongs to the build, not to the run, so the recorded one goes and this build's comes.
RUNTIME = re.compile(r"^(nvidia-.+|triton|pytorch-triton(-rocm|-xpu)?|cuda-bindings|cuda-pathfinder|cuda-toolkit|"
                     r"intel-(cmplr|sycl|opencl|pti|openmp).*|onemkl-sycl-.+|dpcpp-cpp-rt|tcmlib|umf|impi-rt)$")


def other_machine(lock) -> list[str]:
    """How the machine the lock names differs from this one; [] for this kind of machine."""
    try:
        facts = gather(None, runtime=False, gpu_detail=False)
        return platform_differences(lock.platform, platform_of(facts, device=machine_device(facts)))
    except Exception:  # noqa: BLE001 - a lock without a platform, facts that cannot be read: held strictly
        return []


def this_machines_build(want: dict, have: dict) -> tuple[dict, dict, list[str]]:
    """(want, have, what was set aside): the torch family at the recorded base version in another
    build (2.13.0 recorded, 2.13.0+cpu here), and the recorded or installed build's own runtime
    (nvidia-*, triton), left out of the comparison and named."""
    from packaging.version import InvalidVersion, Version

    said, want, have = [], dict(want), dict(have)
    for name in TORCH_FAMILY:
        if name in want and name in have and want[name] != have[name]:
            try:
                same_base = Version(want[name]).public == Version(have[name]).public
            except InvalidVersion:
                same_base = False
            if same_base:
                said.append(f"{name} {have[name]} here for {want[name]} recorded")
                want.pop(name), have.pop(name)
    runtime = sorted(n for n in {*want, *have} if RUNTIME.match(n) and want.get(n) != have.get(n))
    if runtime:
        said.append(f"the build's runtime ({', '.join(runtime)})")
        for n in runtime:
            want.pop(n, None), have.pop(n, None)
    return want, have, said
