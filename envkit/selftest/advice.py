"""What a probe's failure means and what to do about it: the doctor check or profile setting.

The probes report facts (`kind`: wrong, nan, crash, timeout, unsupported, ...); this module, on
envkit's side, turns them into a fix. Sources are in docs/knowledge/mps.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envkit.config.schema import DeviceType

DOCTOR = "`envkit doctor`"


def _device_check(device: DeviceType) -> str:
    return {"mps": "mps", "cuda": "cuda"}.get(device, "torch")


def _wrong_numbers(device: DeviceType) -> tuple[str, str]:
    if device == "mps":
        return ("known MPS bugs give wrong numbers or NaN (pytorch#96602, #109457, #116601)",
                "upgrade torch and macOS (`envkit setup`), then run the self-test again; until then train this model "
                "on the CPU (profile train.device = \"cpu\")")
    if device == "cuda":
        return ("wrong numbers on CUDA point to a driver/build mismatch or failing hardware",
                f"{DOCTOR} (check `cuda`), then `nvidia-smi -q -d ECC` for memory errors")
    return ("wrong numbers on the CPU point to a broken torch build or two OpenMP runtimes",
            f"{DOCTOR} (checks `torch` and `openmp`), then reinstall torch (`envkit setup`)")


def _neighbour(result: dict, device: DeviceType) -> tuple[str, str]:
    """A probe that failed after another in one process and passed alone (runner.py's second run)."""
    before = result.get("details", {}).get("after", "the probe before it")
    return (f"the device works for this probe alone; after {before} in the same process it failed, which a "
            "training that does both may meet: upgrade torch (`envkit setup`), and report it with "
            "`envkit selftest --json` (both runs are in its details)"), _device_check(device)


def advise(result: dict, device: DeviceType) -> tuple[str | None, str | None]:
    """(fix, check) for a non-passing probe result; (None, None) for a pass or a plain skip."""
    status, kind, name = result.get("status"), result.get("kind") or "", result.get("name")
    if status in ("pass", "skip"):
        return None, None
    stderr = " ".join(result.get("details", {}).get("stderr_tail", []) or []) + " " + (result.get("message") or "")

    if "OMP: Error #15" in stderr:
        return ("two OpenMP runtimes are loaded (torch plus another package's copy): "
                f"{DOCTOR} (check `openmp`) says which; do not rely on KMP_DUPLICATE_LIB_OK"), "openmp"
    if name == "torch":
        return f"{DOCTOR} (check `torch`); `envkit setup` installs a working torch", "torch"
    if kind == "neighbour":
        return _neighbour(result, device)
    if name == "compile":
        if kind == "no-compiler":
            return ("torch.compile needs a C/C++ compiler: `xcode-select --install` on macOS, build-essential on Linux; "
                    f"or set train.compile = false in the profile ({DOCTOR} check `compile`)"), "compile"
        if kind in ("unsupported", "timeout"):
            return (f"train eagerly: set train.compile = false in the profile ({DOCTOR} check `compile` says which "
                    "torch and OS support it)"), "compile"
        if kind == "wrong":
            return "the compiled model computes wrong numbers: set train.compile = false and upgrade torch", "train.compile"
    if name == "dataloader":
        if kind in ("timeout", "hang"):
            return ("set dataloader.num_workers = 0 in the profile (or fewer workers with persistent_workers = true); "
                    "under spawn (macOS) the training script needs the `if __name__ == \"__main__\":` guard (pytorch#70344)",
                    "dataloader.num_workers")
        if kind == "pin-memory":
            return "set dataloader.pin_memory = false in the profile: pinned memory only helps CUDA", "dataloader.pin_memory"
        if kind == "crash":
            return "set dataloader.num_workers = 0 in the profile and run the self-test again", "dataloader.num_workers"
    if name == "memory":
        if kind == "oom":
            return ("free device memory (another process holds it?) or lower train.batch_size; on MPS see "
                    f"PYTORCH_MPS_HIGH_WATERMARK_RATIO ({DOCTOR} check `env-vars`)"), "train.batch_size"
        if kind in ("leak", "allocator"):
            return f"the allocator's figures are off: upgrade torch; {DOCTOR} (check `{_device_check(device)}`)", _device_check(device)
    if name in ("throughput", "bandwidth") and kind == "slow":
        return ("the device is slower than the CPU: ops may be falling back to the CPU (PYTORCH_ENABLE_MPS_FALLBACK) "
                f"or the device is busy; {DOCTOR} (check `{_device_check(device)}`)"), _device_check(device)

    if kind == "oom":
        return "free device memory (close other jobs) or lower train.batch_size in the profile", "train.batch_size"
    if kind == "not-implemented":
        return (f"set PYTORCH_ENABLE_MPS_FALLBACK=1 in the profile's [env] so missing ops run on the CPU ({DOCTOR} check "
                "`env-vars`); it must be set before Python starts (`envkit run` does that)"), "env-vars"
    if kind == "unsupported-precision":
        has = {"cpu": "\"bf16\" or \"fp32\"", "mps": "\"fp16\" or \"fp32\" (bf16 needs macOS 14)"}.get(device, "\"fp16\" or \"fp32\"")
        return f"set train.precision = {has} in the profile, one this device has ({DOCTOR} check `bf16`)", "train.precision"
    if kind == "bf16-mps":
        return ("set train.precision = \"fp16\" or \"fp32\" in the profile: bf16 on MPS needs macOS 14 "
                f"(pytorch#104191; {DOCTOR} check `bf16`)"), "bf16"
    if kind in ("wrong-lowp", "nan-lowp"):
        return (f"only bf16/fp16 are off: set train.precision = \"fp32\" in the profile ({DOCTOR} check `bf16`), and "
                "upgrade torch"), "train.precision"
    if kind in ("wrong-noncontig", "nan-noncontig"):
        return ("only non-contiguous inputs are wrong (an MPS bug class: pytorch#118115, PR #139006): upgrade torch and "
                "macOS; until then call .contiguous() before the op"), _device_check(device)
    if kind == "wrong-optimizer":
        return ("AdamW's step is wrong on this device (addcdiv on non-contiguous tensors, pytorch#118115): upgrade torch; "
                "until then use foreach=False"), _device_check(device)
    if name == "autocast" and kind in ("wrong", "nan", "exception"):
        return (f"mixed precision is broken here (SDPA under autocast: pytorch#141774; GradScaler on MPS: pytorch#142397): "
                f"set train.precision = \"fp32\" in the profile, or upgrade torch ({DOCTOR} check `bf16`)"), "train.precision"
    if kind in ("wrong", "nan"):
        meaning, fix = _wrong_numbers(device)
        return f"{meaning}: {fix}", _device_check(device)
    if kind == "crash":
        if device == "mps":
            return ("torch crashed inside Metal: upgrade torch and macOS; "
                    f"{DOCTOR} (checks `mps`, `python-arch`) and attach `envkit doctor --record snap.json` to a bug report"), "mps"
        return (f"torch crashed the interpreter: {DOCTOR} (checks `torch`, `{_device_check(device)}`, `openmp`); "
                "it crashed with no other probe before it in its interpreter (a crash after others is run again alone)"), _device_check(device)
    if kind == "timeout":
        return (f"the device stopped responding: {DOCTOR} (check `{_device_check(device)}`); close other jobs on it and "
                "run the self-test again"), _device_check(device)
    return (f"{DOCTOR} (check `{_device_check(device)}`); `envkit selftest --json` shows the traceback"), _device_check(device)
