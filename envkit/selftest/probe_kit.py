"""Helpers shared by the self-test's probes: tolerances, the error measure, the testing hook.

Loaded by probes.py (the worker) under the name `envkit_probe_kit`; like every probe file it needs
only torch and the standard library, and stays compatible with Python 3.8. Its public names are
what the probe files (and the worker) use; the `_` ones are its own.
"""

from __future__ import print_function

import math
import os
import sys
import time

# Relative error (max |y - ref| / max |ref|) allowed per dtype, against a float64 CPU reference
# computed from the same (already rounded) inputs. Unit roundoff: fp32 6e-8, tf32 4.9e-4,
# fp16 4.9e-4, bf16 3.9e-3; the margins cover accumulation. Real bugs are off by O(1).
TOL = {"float32": 1e-4, "tf32": 5e-3, "float16": 5e-3, "bfloat16": 3e-2}
# Autocast mixes precisions through a whole block (norm-wise error of the loss and gradients).
AUTOCAST_TOL = {"float16": 2e-2, "bfloat16": 6e-2}


class ProbeSkip(Exception):
    """Raised by a probe that does not apply here (message says why)."""


# --------------------------------------------------------------------------------------------
# Injection (testing hook)

def _injections():
    spec = os.environ.get("ENVKIT_SELFTEST_INJECT", "")
    out = {}
    for part in spec.split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


_STARTED_HERE = []  # the probes this process started, for the "-shared" injections


def inject_before(name):
    """`NAME=crash` and the rest act always; `NAME=raise-shared` (crash, hang, raise or segv with
    "-shared") only where another probe ran before it in this process, as a neighbour's leftover
    state would."""
    what = _injections().get(name) or ""
    if what.endswith("-shared"):
        what = what[:-len("-shared")] if _STARTED_HERE else ""
    _STARTED_HERE.append(name)
    if what == "crash":
        sys.stderr.write("envkit selftest: injected crash in %s\n" % name)
        sys.stderr.flush()
        os.abort()
    if what == "segv":
        import signal

        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
    if what == "hang":
        while True:
            time.sleep(3600)
    if what == "raise":
        raise RuntimeError("injected error in %s" % name)


def wrong_injected(name):
    return _injections().get(name) == "wrong"


# --------------------------------------------------------------------------------------------
# Helpers

def dtype_name(dt):
    return str(dt).replace("torch.", "")


def sync_device(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


def rel_err(torch, y, ref):
    """max |y - ref| / max |ref| in float64 on the CPU; inf when y has a non-finite value where ref is finite."""
    y = y.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    finite = torch.isfinite(ref)
    if bool((~torch.isfinite(y) & finite).any()):
        return float("inf")
    scale = ref[finite].abs().max().item() if bool(finite.any()) else 1.0
    diff = (y - ref).abs()
    diff = torch.where(finite, diff, torch.zeros_like(diff))
    return diff.max().item() / max(scale, 1e-30)


def perturb(torch, y):
    """What `wrong` injection does: shift the result by 10% of its scale."""
    return y + 0.1 * y.detach().abs().max().clamp(min=1.0)


def short_dtype(name: str) -> str:
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(name, name)


def fmt_sci(x):
    return "%.1e" % x if x is not None and math.isfinite(x) else str(x)


class Ctx(object):
    """What every probe gets: torch, the device, the dtypes to test, the tolerances, settings."""

    def __init__(self, torch, cfg):
        self.torch = torch
        self.cfg = cfg
        self.device = cfg["device"]
        self.quick = bool(cfg.get("quick"))
        self.info = cfg.get("info") or {}
        self.dtypes = [getattr(torch, d) for d in self.info.get("dtypes", {}).get(self.device, ["float32"])]
        self.fp32_tol = _fp32_tol(torch, self.device)

    def tol(self, dtype, op="matmul"):
        """op: matmul, conv or pointwise (softmax, layernorm: never TF32)."""
        name = dtype_name(dtype)
        if name == "float32":
            return self.fp32_tol.get(op, TOL["float32"])
        return TOL[name]

    def gen(self, seed):
        g = self.torch.Generator()
        g.manual_seed(seed)
        return g


def _fp32_tol(torch, device):
    """fp32 tolerance for matmul-like ops and for convolutions: on CUDA, TF32 (or bf16 internally
    under matmul precision 'medium') follows the profile's settings, read back from torch."""
    mm = conv = TOL["float32"]
    if device == "cuda":
        prec = torch.get_float32_matmul_precision()
        if prec == "medium":
            mm = TOL["bfloat16"]
        elif prec == "high" or torch.backends.cuda.matmul.allow_tf32:
            mm = TOL["tf32"]
        if torch.backends.cudnn.allow_tf32:
            conv = TOL["tf32"]
    if device == "mps" and os.environ.get("PYTORCH_MPS_FAST_MATH") == "1":
        mm = conv = 1e-3
    return {"matmul": mm, "conv": conv}


def compare_cases(ctx, name, cases):
    """cases: list of (label, dtype, y_device, ref_float64, tol). One result for the probe."""
    torch = ctx.torch
    worst, worst_ratio, bad, tested = 0.0, 0.0, [], []
    per = {}
    for label, dtype, y, ref, tol in cases:
        if wrong_injected(name):
            y = perturb(torch, y)
        err = rel_err(torch, y, ref)
        key = "%s/%s" % (dtype_name(dtype), label)
        per[key] = err
        ratio = err / tol if math.isfinite(err) else float("inf")
        if ratio >= worst_ratio:
            worst_ratio, worst = ratio, err
            worst_tol = tol
        if not err <= tol:
            bad.append((key, err, tol))
        tested.append(key)
    dtypes = sorted(set(k.split("/")[0] for k in tested), key=lambda d: ["float32", "bfloat16", "float16"].index(d))
    labels = []
    for k in tested:
        lab = k.split("/", 1)[1]
        if lab not in labels:
            labels.append(lab)
    details = {"errors": per, "dtypes": dtypes}
    by_dtype = {}
    for k, e in per.items():
        d = k.split("/")[0]
        by_dtype[d] = max(by_dtype.get(d, 0.0), e) if math.isfinite(e) else float("inf")
    details["max_error_by_dtype"] = by_dtype
    if not bad:
        return {"status": "pass", "error": worst, "tolerance": worst_tol, "details": details,
                "message": "%s; %s" % (", ".join("%s %s" % (short_dtype(d), fmt_sci(by_dtype[d])) for d in dtypes), ", ".join(labels))}
    nan = any(not math.isfinite(e) for _, e, _ in bad)
    bad_dtypes = sorted(set(k.split("/")[0] for k, _, _ in bad))
    noncontig_only = all(("transposed" in k or "strided" in k or "channels_last" in k) for k, _, _ in bad)
    key, err, tol = max(bad, key=lambda b: b[1] / b[2] if math.isfinite(b[1]) else float("inf"))
    what = "NaN/inf" if nan else "wrong numbers"
    msg = "%s vs the float64 CPU reference: %s (error %s, tolerance %s)" % (what, ", ".join(k for k, _, _ in bad), fmt_sci(err), fmt_sci(tol))
    details.update({"failed": [k for k, _, _ in bad], "bad_dtypes": bad_dtypes, "noncontiguous_only": noncontig_only})
    kind = "nan" if nan else "wrong"
    if bad_dtypes and "float32" not in bad_dtypes:
        kind += "-lowp"
    elif noncontig_only:
        kind += "-noncontig"
    return {"status": "fail", "error": err, "tolerance": tol, "message": msg, "kind": kind, "details": details}


def as_reference(torch, t):
    return t.detach().to("cpu", torch.float64)
