"""System probes: the profile's DataLoader, the allocator, matmul throughput, host-to-device
bandwidth (each beside the CPU's figure).

Loaded by probes.py under the name `envkit_probes_system`; needs only torch and the standard library.
"""

from __future__ import print_function

import os
import statistics
import time
import warnings

from envkit_probe_kit import TOL, dtype_name, short_dtype, sync_device, wrong_injected


def probe_dataloader(ctx):
    torch = ctx.torch
    dl = dict(ctx.cfg.get("dataloader") or {})
    workers = int(dl.get("num_workers") or 0)
    n_batches = 8 if ctx.quick else 24
    bs, dim = 16, 32
    kw = {"batch_size": bs, "num_workers": workers, "shuffle": False}
    pin = bool(dl.get("pin_memory", False))
    kw["pin_memory"] = pin
    mp_ctx = None
    if workers > 0:
        mp_ctx = dl.get("multiprocessing_context") or "spawn"
        kw["multiprocessing_context"] = mp_ctx
        kw["persistent_workers"] = bool(dl.get("persistent_workers", False))
        if dl.get("prefetch_factor"):
            kw["prefetch_factor"] = int(dl["prefetch_factor"])
        kw["timeout"] = float(ctx.cfg.get("dataloader_batch_timeout") or 60)
    ds = ctx.dataset_cls(n_batches * bs, dim)
    caught = []
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        loader = torch.utils.data.DataLoader(ds, **kw)
        first = None
        got = 0
        epochs = 2 if kw.get("persistent_workers") else 1
        for _ in range(epochs):
            for i, (x, y) in enumerate(loader):
                if first is None:
                    first = time.perf_counter() - t0
                expect = torch.arange(i * bs, (i + 1) * bs)
                if wrong_injected("dataloader"):
                    y = y + 1
                if not torch.equal(y, expect) or float(x[0, 0].item()) != float(expect[0].item()):
                    return {"status": "fail", "kind": "wrong", "message": "batch %d arrived with the wrong samples" % i}
                x = x.to(ctx.device, non_blocking=pin)
                got += 1
        caught = [str(m.message).splitlines()[0][:160] for m in w]
    secs = time.perf_counter() - t0
    sync_device(torch, ctx.device)
    del loader
    desc = "%d workers%s, pin_memory=%s" % (workers, " (%s)" % mp_ctx if mp_ctx else "", pin)
    details = {"num_workers": workers, "batches": got, "first_batch_seconds": first, "seconds": secs,
               "pin_memory": pin, "persistent_workers": kw.get("persistent_workers", False), "context": mp_ctx}
    msg = "%d batches in %.2f s (first after %.2f s), %s" % (got, secs, first or 0.0, desc)
    pin_warn = [c for c in caught if "pin" in c.lower()]
    if pin_warn:
        details["warnings"] = pin_warn
        return {"status": "warn", "kind": "pin-memory", "message": msg + "; torch warned: " + pin_warn[0], "details": details}
    return {"message": msg, "details": details}


def _mb(x):
    return round(x / 2 ** 20, 1)


def probe_memory(ctx):
    torch, dev = ctx.torch, ctx.device
    size = (64 if ctx.quick else 256) * 2 ** 20
    n = size // 4
    if dev == "cuda":
        cuda = torch.cuda
        cuda.empty_cache()
        cuda.reset_peak_memory_stats()
        base = cuda.memory_allocated()
        t = torch.empty(n, dtype=torch.float32, device="cuda").fill_(1.0)
        sync_device(torch, dev)
        during = cuda.memory_allocated()
        peak = cuda.max_memory_allocated()
        reserved = cuda.memory_reserved()
        del t
        after = cuda.memory_allocated()
        cuda.empty_cache()
        reserved_after = cuda.memory_reserved()
        free, total = cuda.mem_get_info()
        figs = {"allocated_mb": _mb(during), "max_allocated_mb": _mb(peak), "reserved_mb": _mb(reserved),
                "allocated_after_free_mb": _mb(after), "reserved_after_empty_cache_mb": _mb(reserved_after),
                "device_free_mb": _mb(free), "device_total_mb": _mb(total)}
        grew = during - base >= size
        freed = after <= base
        msg = "%d MB: allocated %s MB (peak %s, reserved %s), freed to %s MB; device %s/%s MB free" % (
            size >> 20, figs["allocated_mb"], figs["max_allocated_mb"], figs["reserved_mb"], figs["allocated_after_free_mb"],
            figs["device_free_mb"], figs["device_total_mb"])
    elif dev == "mps":
        mps = torch.mps
        mps.empty_cache()
        base = mps.current_allocated_memory()
        t = torch.empty(n, dtype=torch.float32, device="mps").fill_(1.0)
        sync_device(torch, dev)
        during = mps.current_allocated_memory()
        driver = mps.driver_allocated_memory()
        del t
        sync_device(torch, dev)
        mps.empty_cache()
        after = mps.current_allocated_memory()
        figs = {"current_allocated_mb": _mb(during), "driver_allocated_mb": _mb(driver), "allocated_after_free_mb": _mb(after)}
        if hasattr(mps, "recommended_max_memory"):
            figs["recommended_max_mb"] = _mb(mps.recommended_max_memory())
        grew = during - base >= size
        freed = after <= base
        msg = "%d MB: allocated %s MB (driver %s MB), freed to %s MB%s" % (
            size >> 20, figs["current_allocated_mb"], figs["driver_allocated_mb"], figs["allocated_after_free_mb"],
            ("; recommended max %s MB" % figs["recommended_max_mb"]) if "recommended_max_mb" in figs else "")
    else:
        # No device allocator on the CPU: the process's resident memory is what means something.
        def rss():
            try:
                with open("/proc/self/statm") as f:
                    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, ValueError, AttributeError):
                return None
        base = rss()
        t = torch.empty(n, dtype=torch.float32).fill_(1.0)
        during = rss()
        s = t[::4096].sum().item()
        del t
        after = rss()
        figs = {"rss_before_mb": _mb(base) if base else None, "rss_with_tensor_mb": _mb(during) if during else None,
                "rss_after_free_mb": _mb(after) if after else None}
        grew = s == float(len(range(0, n, 4096)))
        freed = True
        if during:
            msg = "CPU (no device allocator): %d MB tensor, process RSS %s -> %s -> %s MB" % (
                size >> 20, figs["rss_before_mb"], figs["rss_with_tensor_mb"], figs["rss_after_free_mb"])
        else:
            msg = "CPU (no device allocator): allocated and freed a %d MB tensor" % (size >> 20)
    if wrong_injected("memory"):
        freed = False
    if not grew:
        return {"status": "fail", "kind": "allocator", "message": "the allocator did not account for a %d MB tensor: %s" % (size >> 20, msg),
                "details": figs}
    if not freed:
        return {"status": "warn", "kind": "leak", "message": "memory was not returned after freeing: " + msg, "details": figs}
    return {"message": msg, "details": figs}


def _matmul_tflops(torch, dev, dtype, n, min_runs=5, budget=0.25):
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    for _ in range(2):
        a @ b
    sync_device(torch, dev)
    times = []
    t_end = time.perf_counter() + budget
    while len(times) < min_runs or (time.perf_counter() < t_end and len(times) < 50):
        t0 = time.perf_counter()
        c = a @ b
        sync_device(torch, dev)
        times.append(time.perf_counter() - t0)
    if not bool(torch.isfinite(c[:4, :4]).all().item()):
        raise RuntimeError("matmul produced non-finite values")
    return 2.0 * n ** 3 / statistics.median(times) / 1e12


def probe_throughput(ctx):
    torch, dev = ctx.torch, ctx.device
    q = ctx.quick
    sizes = {"cuda": 2048 if q else 8192, "mps": 1024 if q else 4096, "cpu": 256 if q else 512}
    figs = {}
    parts = []
    for dt in ctx.dtypes:
        n = sizes.get(dev, 512)
        if dev == "cpu" and dt != torch.float32:
            continue  # CPU low precision is not what anyone trains with here
        tf = _matmul_tflops(torch, dev, dt, n)
        figs["%s_%s_tflops" % (dev, dtype_name(dt))] = tf
        label = short_dtype(dtype_name(dt))
        if dt == torch.float32 and ctx.fp32_tol["matmul"] > TOL["float32"] and dev == "cuda":
            label += " (tf32)"
        parts.append("%s %s %.3g" % (dev, label, tf))
    cpu_tf = figs.get("cpu_float32_tflops")
    if cpu_tf is None:
        cpu_tf = _matmul_tflops(torch, "cpu", torch.float32, sizes["cpu"], min_runs=3, budget=0.1)
        figs["cpu_float32_tflops"] = cpu_tf
        parts.append("beside CPU fp32 %.3g" % cpu_tf)
    dev_fp32 = figs.get("%s_float32_tflops" % dev)
    msg = "TFLOP/s (median): " + ", ".join(parts)
    if dev != "cpu" and dev_fp32 is not None:
        figs["speedup_vs_cpu_fp32"] = dev_fp32 / cpu_tf if cpu_tf else None
        msg += " (x%.0f)" % (dev_fp32 / cpu_tf) if cpu_tf else ""
        if dev_fp32 < cpu_tf:
            return {"status": "warn", "kind": "slow", "details": figs,
                    "message": msg + ": the device is slower than the CPU"}
    return {"message": msg, "details": figs}


def _copy_gbps(torch, src, dev, runs=5, non_blocking=False):
    times = []
    for i in range(runs + 1):
        sync_device(torch, dev)
        t0 = time.perf_counter()
        d = src.to(dev, non_blocking=non_blocking) if dev != "cpu" else src.clone()
        sync_device(torch, dev)
        if i:
            times.append(time.perf_counter() - t0)
        del d
    return src.numel() * src.element_size() / statistics.median(times) / 1e9


def probe_bandwidth(ctx):
    torch, dev = ctx.torch, ctx.device
    mb = 32 if ctx.quick else (256 if dev != "cpu" else 64)
    host = torch.empty(mb * 2 ** 18, dtype=torch.float32).fill_(1.0)
    figs = {"size_mb": mb}
    parts = []
    if dev == "cuda":
        figs["h2d_pageable_gbps"] = _copy_gbps(torch, host, dev)
        pinned = host.pin_memory()
        figs["h2d_pinned_gbps"] = _copy_gbps(torch, pinned, dev, non_blocking=True)
        parts.append("host->cuda pinned %.1f GB/s, pageable %.1f GB/s" % (figs["h2d_pinned_gbps"], figs["h2d_pageable_gbps"]))
    elif dev == "mps":
        figs["h2d_gbps"] = _copy_gbps(torch, host, dev)
        parts.append("host->mps %.1f GB/s (unified memory)" % figs["h2d_gbps"])
    figs["cpu_copy_gbps"] = _copy_gbps(torch, host, "cpu")
    parts.append(("beside CPU memcpy %.1f GB/s" if dev != "cpu" else "CPU memcpy %.1f GB/s") % figs["cpu_copy_gbps"])
    return {"message": "%d MB: %s" % (mb, ", ".join(parts)), "details": figs}
