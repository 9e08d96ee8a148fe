"""Where the device time of a profiled window went, read from the Chrome trace that torch.profiler
writes (`envkit run --profile-steps A:B`): GPU kernel time by kind (matmul, attention, fused
Inductor kernels, optimizer, embedding, communication, copies), how long the GPU sat idle, and how
much of the all-reduce was not hidden behind computation.

Why a breakdown and not only torch's operator table: the table sums CPU-side operators, and on a
compiled model most of the work is a handful of "CompiledFunction" rows. The kernels on the device
timeline say what is actually slow: an idle fraction means the host or the input pipeline is the
limit; exposed communication means the gradient all-reduce is not overlapped with the backward.

    python -m envkit.train.watching.trace_breakdown runs/NAME/RUN/profile_steps_20-22.json
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# first match wins; the names are CUDA kernel names as cuBLAS, cuDNN, FlashAttention, NCCL and Inductor emit them
KINDS = (
    ("communication", re.compile(r"nccl", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|sdpa|_attn", re.I)),
    ("matmul", re.compile(r"gemm|cutlass|xmma|nvjet|cublas|triton_tem_|matmul|_mm_|\bmm\b", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor_apply|foreach|_fused_sgd", re.I)),
    ("embedding", re.compile(r"embedding|indexing_backward|index_put|radix|sort|scatter|segment", re.I)),
    ("fused (Inductor)", re.compile(r"^triton_", re.I)),
)
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def kind_of(event: dict) -> str:
    if event.get("cat") in ("gpu_memcpy", "gpu_memset"):
        return "copies"
    name = event.get("name", "")
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "other kernels"


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def _length(intervals) -> float:
    return sum(b - a for a, b in intervals)


def _subtract(intervals, cover) -> float:
    """Length of `intervals` (a union) not covered by `cover` (a union)."""
    out, j = 0.0, 0
    for a, b in intervals:
        while j < len(cover) and cover[j][1] <= a:
            j += 1
        cur, k = a, j
        while k < len(cover) and cover[k][0] < b:
            if cover[k][0] > cur:
                out += cover[k][0] - cur
            cur = max(cur, cover[k][1])
            k += 1
        if cur < b:
            out += b - cur
    return out


def breakdown(trace: dict | list, steps: int | None = None) -> dict | None:
    """The summary of one trace's GPU timeline (one device), in milliseconds; None without GPU events."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    dev = [e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS and e.get("dur") is not None]
    if not dev:
        return None
    by_kind: dict[str, float] = {}
    spans, compute, comm = [], [], []
    for e in dev:
        a, b = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        k = kind_of(e)
        by_kind[k] = by_kind.get(k, 0.0) + (b - a)
        spans.append((a, b))
        (comm if k == "communication" else compute).append((a, b))
    busy, compute_u, comm_u = _union(spans), _union(compute), _union(comm)
    window = max(b for _, b in spans) - min(a for a, _ in spans)
    ms = 1e-3  # trace times are microseconds
    out = {
        "window_ms": window * ms,
        "steps": steps,
        "busy_ms": _length(busy) * ms,
        "idle_ms": (window - _length(busy)) * ms,
        "compute_ms": _length(compute_u) * ms,
        "communication_ms": _length(comm_u) * ms,
        "communication_exposed_ms": _subtract(comm_u, compute_u) * ms,
        "kinds_ms": {k: v * ms for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "kernels": len(dev),
        # host side: one CompiledFunction per compiled forward graph called; more than one a step
        # means graph breaks, or DDP's bucket-by-bucket split (seen on 2 x H200: 14 a step)
        "compiled_graph_calls": sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"
                                    and e.get("name") == "CompiledFunction"),
        "longest_idle": [(a * ms - min(x for x, _ in spans) * ms, length * ms, name)
                         for a, length, name in _longest_gaps(busy, dev, 3)],
    }
    return out


def _longest_gaps(busy: list[tuple[float, float]], dev: list[dict], n: int) -> list[tuple[float, float, str]]:
    """(start, length, the kernel that ended it) of the n longest stretches with nothing on the device."""
    starts = sorted((float(e["ts"]), e.get("name", "")) for e in dev)
    gaps = [(busy[i][1], busy[i + 1][0] - busy[i][1]) for i in range(len(busy) - 1)]
    out = []
    for a, length in sorted(gaps, key=lambda g: -g[1])[:n]:
        nxt = next((name for ts, name in starts if ts >= a + length), "")
        out.append((a, length, nxt))
    return out


def top_kernels(trace: dict | list, n: int = 12) -> list[tuple[str, str, float, int]]:
    """(kind, name, total ms, calls) of the kernels that took the most device time."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    acc: dict[str, list] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS and e.get("dur") is not None:
            row = acc.setdefault(e["name"], [kind_of(e), 0.0, 0])
            row[1] += float(e["dur"]) * 1e-3
            row[2] += 1
    rows = sorted(((k, name, t, c) for name, (k, t, c) in acc.items()), key=lambda r: -r[2])
    return rows[:n]


def render(summary: dict, top: list | None = None) -> str:
    w = summary["window_ms"]
    per = f", {w / summary['steps']:.2f} ms a step" if summary.get("steps") else ""
    lines = [f"device timeline: {w:.2f} ms over {summary['kernels']} kernels and copies{per}",
             f"  busy {summary['busy_ms']:.2f} ms ({100 * summary['busy_ms'] / w:.1f}%), "
             f"idle {summary['idle_ms']:.2f} ms ({100 * summary['idle_ms'] / w:.1f}%: the host, the input pipeline or a sync)"]
    if summary["communication_ms"]:
        lines.append(f"  communication {summary['communication_ms']:.2f} ms, of which not overlapped with computation "
                     f"{summary['communication_exposed_ms']:.2f} ms ({100 * summary['communication_exposed_ms'] / w:.1f}% of the window)")
    calls = summary.get("compiled_graph_calls")
    if calls:
        steps = summary.get("steps")
        each = f"{calls / steps:g} a step" if steps else f"{calls} in the window"
        lines.append(f"  compiled graphs called: {each}" + (" (more than one a step: graph breaks, or DDP splitting the graph at its "
                                                             "gradient buckets, see training.ddp_bucket_mb)" if steps and calls > steps else ""))
    if summary.get("longest_idle"):
        lines.append("  longest idle stretches: " + "; ".join(f"{length:.2f} ms at {at:.2f} ms, before {name[:60]}"
                                                              for at, length, name in summary["longest_idle"]))
    lines.append("  kernel time by kind (streams overlap, so the sum can exceed the busy time):")
    for k, v in summary["kinds_ms"].items():
        lines.append(f"    {k:<18} {v:10.2f} ms  {100 * v / w:5.1f}%")
    if top:
        lines.append("  kernels that took the most time:")
        for kind, name, t, calls in top:
            lines.append(f"    {t:9.2f} ms  {calls:6d}x  {kind:<18} {name[:110]}")
    return "\n".join(lines)


def main(argv=None) -> int:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    if not paths:
        print("usage: python -m envkit.train.watching.trace_breakdown TRACE.json [...]", file=sys.stderr)
        return 2
    for p in paths:
        trace = json.loads(p.read_text())
        s = breakdown(trace)
        print(f"== {p}")
        print(render(s, top_kernels(trace)) if s else "no GPU kernels in this trace (a CPU run?)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
