"""The attention kernels a deterministic GPT-2 small step can use on CUDA: each one's forward and
forward + backward time for one layer at GPT-2 small's shape (batch 16, 12 heads, 1,024 tokens, head 64,
bf16, causal, q/k/v the strided views of one qkv projection, as envkit's gpt makes them), and whether
its gradients are bit for bit the same on every repeat.

    python benchmarks/bench_det_attention.py [--repeats 20] [--batch 16] [--json]

Kernels: SDPA's cuDNN, FlashAttention-2 and memory-efficient kernels (each alone, math as nothing else),
with torch.use_deterministic_algorithms off and on; cuDNN under use_deterministic_algorithms(True,
warn_only=True), the only way PyTorch lets it run there (it refuses it otherwise: its backward is not
deterministic); FlexAttention compiled (Inductor's Triton kernels) with a causal block mask, with
Inductor's deterministic mode and deterministic algorithms on and off. A kernel is identical when the
qkv gradient of each of `--repeats` backward passes on the same inputs equals the first's in every bit.
Times are the median of CUDA-event timings after a warm-up. The error is against SDPA's math kernel
in float32 on the same inputs (|grad - ref| / |ref|).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=20, help="backward passes compared bit for bit")
    ap.add_argument("--timed", type=int, default=50, help="timed iterations (median)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    import torch
    import torch._inductor.config as inductor
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    assert torch.cuda.is_available(), "a CUDA GPU is needed"
    B, H, T, D = args.batch, args.heads, args.seq, args.head_dim
    C = H * D
    g = torch.Generator(device="cuda").manual_seed(0)
    qkv0 = torch.randn(B, T, 3 * C, device="cuda", generator=g, dtype=torch.bfloat16)
    dy = torch.randn(B, T, C, device="cuda", generator=g, dtype=torch.bfloat16)
    mask = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, T, T, device="cuda")

    def split(qkv):
        q, k, v = qkv.split(C, dim=2)
        return (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))

    def sdpa(backend):
        def run(qkv):
            q, k, v = split(qkv)
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return run

    def flex_compiled():
        fn = torch.compile(flex_attention, dynamic=False)

        def run(qkv):
            q, k, v = split(qkv)
            return fn(q, k, v, block_mask=mask)
        return run

    # the reference: math in float32
    ref_in = qkv0.float().requires_grad_(True)
    with sdpa_kernel([SDPBackend.MATH]):
        q, k, v = split(ref_in)
        ref_out = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
    ref_out.backward(dy.float())
    ref_grad = ref_in.grad
    assert ref_grad is not None

    variants = [
        ("sdpa cudnn", False, False, lambda: sdpa(SDPBackend.CUDNN_ATTENTION)),
        ("sdpa flash", False, False, lambda: sdpa(SDPBackend.FLASH_ATTENTION)),
        ("sdpa efficient", False, False, lambda: sdpa(SDPBackend.EFFICIENT_ATTENTION)),
        ("flex (compiled)", False, False, flex_compiled),
        ("sdpa flash, deterministic", True, False, lambda: sdpa(SDPBackend.FLASH_ATTENTION)),
        ("sdpa efficient, deterministic", True, False, lambda: sdpa(SDPBackend.EFFICIENT_ATTENTION)),
        ("sdpa cudnn, deterministic warn_only", True, True, lambda: sdpa(SDPBackend.CUDNN_ATTENTION)),
        ("flex (compiled), deterministic", True, False, flex_compiled),
    ]
    rows = []
    for name, det, warn_only, make in variants:
        torch.use_deterministic_algorithms(det, warn_only=warn_only)
        inductor.deterministic = det
        row: dict = {"kernel": name, "deterministic_mode": det}
        try:
            fn = make()

            def fwd_bwd(fn=fn):
                x = qkv0.detach().requires_grad_(True)
                y = fn(x).transpose(1, 2).reshape(B, T, C)
                y.backward(dy)
                return y, x.grad

            def fwd(fn=fn):
                with torch.no_grad():
                    return fn(qkv0)

            y, first = fwd_bwd()
            torch.cuda.synchronize()
            same = sum(bool(torch.equal(fwd_bwd()[1], first)) for _ in range(args.repeats))
            row["identical"] = f"{same}/{args.repeats}"
            row["grad_error"] = float((first.float() - ref_grad).norm() / ref_grad.norm())
            row["out_error"] = float((y.float() - ref_out).norm() / ref_out.norm())
            row["fwd_ms"] = timed(torch, fwd, args.timed)
            row["fwd_bwd_ms"] = timed(torch, fwd_bwd, args.timed)
            row["bwd_ms"] = round(row["fwd_bwd_ms"] - row["fwd_ms"], 4)
        except Exception as exc:  # noqa: BLE001 - a kernel this torch or GPU refuses: said in its row
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    torch.use_deterministic_algorithms(False)
    if args.json:
        print(json.dumps({"shape": [B, H, T, D], "device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}))
        return 0
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; attention of one layer, B={B} H={H} T={T} D={D} bf16 causal")
    print(f"{'kernel':<38} {'fwd ms':>8} {'bwd ms':>8} {'fwd+bwd':>8} {'identical':>10} {'grad err':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['kernel']:<38} {r['error']}")
            continue
        print(f"{r['kernel']:<38} {r['fwd_ms']:8.3f} {r['bwd_ms']:8.3f} {r['fwd_bwd_ms']:8.3f} {r['identical']:>10} {r['grad_error']:9.2e}")
    return 0


def timed(torch, fn, n: int) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return round(statistics.median(times), 4)


if __name__ == "__main__":
    sys.exit(main())
