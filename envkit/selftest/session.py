"""One self-test run: choose the device and the precision the profile means on it, run the probes
in child interpreters (runner.py) and collect a SelftestReport. Never imports torch itself."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from envkit.errors import EnvkitError
from envkit.selftest.advice import advise
from envkit.selftest.results import ProbeResult, SelftestReport
from envkit.selftest.runner import TIMEOUTS, run_probes
from envkit.selftest.settings import load_settings

from envkit.selftest.probes import PROBES  # the worker script's own list: one list, where the probes are

if TYPE_CHECKING:
    from envkit.config.schema import DeviceType, Precision, TrainPrecision
    from envkit.facts.model import TrainDevice

DEVICES: tuple[DeviceType, ...] = ("auto", "mps", "cuda", "cpu")


def _parse_timeouts(spec: str | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in (spec or "").split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            try:
                out[k.strip()] = float(v)
            except ValueError:
                pass
    return out


def resolve_device(requested: DeviceType, profile_device: DeviceType | None, info: dict, python: str) -> TrainDevice:
    avail = info.get("available") or {"cpu": True}
    want = requested if requested != "auto" else (profile_device if profile_device not in (None, "auto") else None)
    if want is None:
        return "cuda" if avail.get("cuda") else "mps" if avail.get("mps") else "cpu"
    if avail.get(want):
        return want
    torch_v = info.get("torch", "?")
    if want == "cuda":
        raise EnvkitError(f"no CUDA device usable by torch {torch_v} in {python}",
                          fix="`envkit doctor` (check `cuda`) says why: a CPU build of torch, no GPU, or an old driver; "
                              "or use --device cpu")
    if want == "mps":
        raise EnvkitError(f"MPS is not available to torch {torch_v} in {python}",
                          fix="`envkit doctor` (checks `mps` and `python-arch`) says why: not Apple Silicon, "
                              "Rosetta, or macOS too old for this torch; or use --device cpu")
    raise EnvkitError(f"unknown device {want!r}", fix="use auto, mps, cuda or cpu")


def resolve_precision(precision: Precision | None, device: TrainDevice, info: dict) -> tuple[TrainPrecision, str | None]:
    """The autocast precision the profile means on this device: (bf16|fp16|fp32, why)."""
    precision = precision or "auto"
    dtypes = (info.get("dtypes") or {}).get(device, [])
    if precision != "auto":
        return precision, None
    version: list[int] = info.get("torch_version_tuple") or [0, 0]
    tv = tuple(version)
    if device == "cuda":
        return ("bf16", None) if "bfloat16" in dtypes else ("fp16", "this GPU has no bf16")
    if device == "mps":
        if "bfloat16" in dtypes and tv >= (2, 6):
            return "bf16", None
        if tv >= (2, 5):
            return "fp16", "bf16 autocast on MPS needs torch 2.6 and macOS 14"
        return "fp32", "autocast on MPS needs torch 2.5"
    return "fp32", "auto means fp32 on the CPU"


def run_selftest(python: str | None = None, device: DeviceType = "auto", profile: str | None = None, quick: bool = False,
                 env: dict | None = None, on_probe=None, *, isolate: bool | None = None, probes: list[str] | None = None,
                 timeout_scale: float | None = None, timeouts: dict[str, float] | None = None) -> SelftestReport:
    """Run the self-test and return its report. Raises EnvkitError for bad input (an unknown
    profile, a device this machine lacks). on_probe(ProbeResult) is called as each probe ends."""
    if device not in DEVICES:
        raise EnvkitError(f"unknown device {device!r}", fix="use auto, mps, cuda or cpu")
    if isolate is None:
        # One worker shared while probes pass: a crash, hang or failure still ends it and the rest
        # run in a fresh one, and a probe that failed after others runs again alone before it is
        # reported (runner.py), so no failure is blamed on the wrong probe. A fresh interpreter for
        # every probe (the full run's default until now) imported torch 13 times: 23 s of a 24 s
        # self-test on the 2-core CPU box. --isolate still asks for it.
        isolate = False
    names = list(probes or PROBES)
    unknown = [n for n in names if n not in PROBES]
    if unknown:
        raise EnvkitError(f"unknown probe(s): {', '.join(unknown)}", fix=f"choose from {', '.join(PROBES)}")
    settings, py = load_settings(profile, python, env)
    if not os.path.exists(py):
        raise EnvkitError(f"no such interpreter: {py}", fix="pass --python PATH to a python with torch, or run `envkit setup`")
    if timeout_scale is None:
        try:
            timeout_scale = float(os.environ.get("ENVKIT_SELFTEST_TIMEOUT_SCALE") or 1.0)
        except ValueError:
            raise EnvkitError("ENVKIT_SELFTEST_TIMEOUT_SCALE must be a number", fix="e.g. 2 on a slow machine")
    scale = timeout_scale
    tmo = {**_parse_timeouts(os.environ.get("ENVKIT_SELFTEST_TIMEOUTS")), **(timeouts or {})}
    child_env = dict(settings.env)
    child_env["PYTHONUNBUFFERED"] = "1"
    child_env.setdefault("PYTHONWARNINGS", "ignore::UserWarning")  # keep stderr for what matters (crash messages)

    report = SelftestReport(device=device, device_name="", python=py, torch=None, profile=settings.profile,
                            precision=None, quick=quick, isolate=isolate, notes=list(settings.notes))

    def make_config(info: dict) -> dict:
        dev = resolve_device(device, settings.train.get("device"), info, py)
        prec, why = resolve_precision(settings.train.get("precision"), dev, info)
        report.device = dev
        report.device_name = (info.get("device_name") or {}).get(dev, dev)
        report.precision = prec
        if why:
            report.notes.append(f"precision {prec}: {why}")
        dl_timeout = TIMEOUTS["dataloader"] * scale / 2
        return {"device": dev, "quick": quick, "info": info, "precision_resolved": prec, "precision_note": why,
                "torch_settings": settings.torch, "dataloader": settings.dataloader,
                "dataloader_batch_timeout": max(5.0, dl_timeout)}

    def on_result(res: dict) -> None:
        pr = _to_result(res, report.device)
        report.probes.append(pr)
        if on_probe:
            on_probe(pr)

    t0 = time.perf_counter()
    info, _ = run_probes(py, child_env, names, make_config, isolate=isolate, scale=scale, timeouts=tmo,
                         on_result=on_result)
    report.seconds = time.perf_counter() - t0
    report.torch = info.get("torch")
    report.runtime = {k: v for k, v in info.items() if k not in ("dtypes",)}
    if info.get("torch_error"):
        pr = _to_result({"name": "torch", "status": "fail", "kind": "crash" if info.get("startup_crash") else "import",
                         "message": f"torch does not start in {py}: {info['torch_error']}"}, report.device)
        report.probes.insert(0, pr)
        if on_probe:
            on_probe(pr)
    order = {n: i for i, n in enumerate(["torch", *names])}
    report.probes.sort(key=lambda p: order.get(p.name, 99))
    return report


def _to_result(res: dict, device: DeviceType) -> ProbeResult:
    fix, check = advise(res, device)
    err = res.get("error")
    status = res.get("status", "fail")
    if status not in ("pass", "warn", "fail", "skip"):  # none the worker sends: a failure, as when it says none
        status = "fail"
    return ProbeResult(name=res["name"], status=status, seconds=float(res.get("seconds") or 0.0),
                       error=float(err) if isinstance(err, (int, float)) else None,
                       tolerance=res.get("tolerance"), message=res.get("message") or "", fix=fix, check=check,
                       kind=res.get("kind"), details=res.get("details") or {})
