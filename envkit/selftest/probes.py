"""The self-test's probes: the code that runs INSIDE the interpreter being tested.

It needs only torch and the standard library, because the target (a managed venv) may not have
envkit installed: the runner starts it as a script, `python probes.py`, never `-m envkit...`.
Keep it compatible with Python 3.8 (no `match`, no `X | Y` at runtime).

Protocol (stdout carries only protocol lines, everything else goes to stderr):
  worker -> runner  `@@envkit-selftest {"kind": "info", ...}` after importing torch
  runner -> worker  one JSON line on stdin: {"device", "probes": [...], "quick", "precision", ...}
  worker -> runner  `{"kind": "start", "probe": NAME}` before each probe, `{"kind": "result", ...}`
                    after it, `{"kind": "done"}` at the end. The worker stops after a failing probe
                    (the runner starts a fresh one for the rest), so a broken state never leaks.
A probe that crashes the interpreter or hangs never sends its result: the runner sees which
probe had started and reports it as that probe's failure.

Testing hook: ENVKIT_SELFTEST_INJECT="matmul=crash,softmax=hang,layernorm=wrong" makes the named
probes abort (os.abort), sleep forever, return perturbed numbers, raise, or segfault
(crash|hang|wrong|raise|segv; crash, hang, raise or segv with "-shared", e.g. raise-shared, only
after another probe in the same process). It exists for envkit's own tests; never set it otherwise.

The probes live in probes_numeric.py and probes_system.py (helpers in probe_kit.py); this file
loads them by path under unique names, so nothing of envkit needs to be importable.

Each probe returns {"status", "error", "tolerance", "message", "kind", "details"}; `kind` names the
failure class (wrong, nan, unsupported, exception, slow, ...) that the runner turns into a fix.
"""

from __future__ import print_function

import json
import os
import platform
import sys
import time

# sys.path[0] is this script's folder (envkit/selftest): drop it so that its module names can
# never shadow a package of the target environment.
_HERE = os.path.dirname(os.path.abspath(__file__))
if sys.path and sys.path[0] and os.path.abspath(sys.path[0]) == _HERE:
    sys.path.pop(0)

MARK = "@@envkit-selftest "
PROBES = ["device", "matmul", "softmax", "layernorm", "conv2d", "sdpa", "backward", "autocast",
          "memory", "throughput", "bandwidth", "dataloader", "compile"]

# --------------------------------------------------------------------------------------------
# Dataset for the DataLoader probe. It lives in this file, which spawned DataLoader workers
# import as `__mp_main__` (the `if __name__ == "__main__"` guard at the bottom is what macOS's
# spawn start method needs, pytorch#70344); it must stay importable and cheap at top level.
class SynthDataset(object):
    """n samples of (features[dim], label): deterministic, so the batches can be checked."""

    def __init__(self, n, dim):
        self.n = n
        self.dim = dim

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        x = torch.full((self.dim,), float(i))
        return x, i


# --------------------------------------------------------------------------------------------
# Worker

def runtime_info(torch):
    """What the runner needs before it picks the device and the precision."""
    info = {"torch": torch.__version__, "python": platform.python_version(), "executable": sys.executable,
            "platform": platform.platform(), "machine": platform.machine()}
    try:
        parts = torch.__version__.split("+")[0].split(".")
        info["torch_version_tuple"] = [int("".join(c for c in p if c.isdigit()) or 0) for p in parts[:2]]
    except Exception:
        info["torch_version_tuple"] = [0, 0]
    avail = {"cpu": True, "cuda": False, "mps": False}
    names = {"cpu": platform.processor() or platform.machine() or "CPU"}
    dtypes = {"cpu": ["float32", "bfloat16"]}
    try:
        avail["cuda"] = bool(torch.cuda.is_available())
    except Exception:
        pass
    if avail["cuda"]:
        try:
            names["cuda"] = torch.cuda.get_device_name(0)
            info["cuda_capability"] = list(torch.cuda.get_device_capability(0))
            info["cuda_version"] = torch.version.cuda
        except Exception:
            names["cuda"] = "CUDA device"
        d = ["float32"]
        try:
            if torch.cuda.is_bf16_supported():
                d.append("bfloat16")
        except Exception:
            pass
        d.append("float16")
        dtypes["cuda"] = d
    try:
        mps = getattr(torch.backends, "mps", None)
        avail["mps"] = bool(mps and mps.is_available())
        info["mps_built"] = bool(mps and mps.is_built())
    except Exception:
        pass
    if avail["mps"]:
        names["mps"] = "Apple GPU (MPS)"
        d = ["float32"]
        try:  # bf16 on MPS needs macOS 14 (pytorch PR #119641)
            torch.ones(2, dtype=torch.bfloat16, device="mps").sum().item()
            d.append("bfloat16")
        except Exception as exc:
            info["mps_bf16_error"] = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        d.append("float16")
        dtypes["mps"] = d
        info["macos"] = platform.mac_ver()[0]
    info["available"] = avail
    info["device_name"] = names
    info["dtypes"] = dtypes
    return info


def _apply_settings(torch, cfg):
    t = cfg.get("torch_settings") or {}
    if t.get("matmul_precision"):
        try:
            torch.set_float32_matmul_precision(t["matmul_precision"])
        except Exception:
            pass
    if "allow_tf32" in t and t["allow_tf32"] is not None:
        torch.backends.cuda.matmul.allow_tf32 = bool(t["allow_tf32"])
        torch.backends.cudnn.allow_tf32 = bool(t["allow_tf32"])
    if "cudnn_benchmark" in t and t["cudnn_benchmark"] is not None:
        torch.backends.cudnn.benchmark = bool(t["cudnn_benchmark"])


def _load(name, filename):
    """Import a sibling probe file by path under a unique name (this folder is not on sys.path)."""
    import importlib.util

    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, filename))
        assert spec is not None and spec.loader is not None  # a .py file: the source loader
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


def _probe_modules():
    kit = _load("envkit_probe_kit", "probe_kit.py")
    return kit, [_load("envkit_probes_numeric", "probes_numeric.py"), _load("envkit_probes_system", "probes_system.py")]


def run_probe(name, torch, cfg):
    kit, modules = _probe_modules()
    fn = next((getattr(m, "probe_" + name) for m in modules if hasattr(m, "probe_" + name)), None)
    t0 = time.perf_counter()
    if fn is None:
        res: dict = {"status": "fail", "kind": "unknown", "message": "no probe named %r" % name}
    else:
        try:
            kit.inject_before(name)
            ctx = kit.Ctx(torch, cfg)
            ctx.dataset_cls = SynthDataset  # defined here so that spawned DataLoader workers can unpickle it
            res = fn(ctx) or {}
            res.setdefault("status", "pass")
        except kit.ProbeSkip as exc:
            res = {"status": "skip", "message": str(exc)}
        except Exception as exc:
            text = str(exc).strip()
            first = (text.splitlines() or [""])[0][:300]
            kind = "exception"
            if isinstance(exc, NotImplementedError) or "not currently implemented for the MPS device" in text:
                kind = "not-implemented"
            elif "out of memory" in text.lower():
                kind = "oom"
            elif "BFloat16" in text and "MPS" in text:
                kind = "bf16-mps"
            elif "timed out" in text.lower() and name == "dataloader":
                kind = "hang"
            import traceback

            tb = traceback.format_exc().strip().splitlines()[-12:]
            res = {"status": "fail", "kind": kind, "message": "%s: %s" % (type(exc).__name__, first), "details": {"traceback": tb}}
    res["name"] = name
    res["seconds"] = round(time.perf_counter() - t0, 4)
    return res


def main():
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints (ours, torch's, C libraries') go to stderr, never the protocol
    sys.stdout = sys.stderr

    def send(kind, **payload):
        payload["kind"] = kind
        proto.write(MARK + json.dumps(payload, default=str) + "\n")
        proto.flush()

    try:
        import torch
    except BaseException as exc:  # ImportError, OSError from a broken wheel, ...
        send("info", torch_error="%s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else ""),
             python=platform.python_version(), executable=sys.executable)
        return 0
    send("info", **runtime_info(torch))
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    cfg = json.loads(line)
    _apply_settings(torch, cfg)
    torch.manual_seed(0)
    for name in cfg["probes"]:
        send("start", probe=name)
        res = run_probe(name, torch, cfg)
        send("result", result=res)
        if res["status"] == "fail":
            break  # the runner starts a fresh interpreter for the rest
    send("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
