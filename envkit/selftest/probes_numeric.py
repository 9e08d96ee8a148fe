"""Numerical probes: device basics, op correctness against a float64 CPU reference (contiguous
and non-contiguous inputs, every dtype the device has), backward + AdamW, autocast, torch.compile.

Loaded by probes.py under the name `envkit_probes_numeric`; needs only torch and the standard library.
"""

from __future__ import print_function

import math
import time

from envkit_probe_kit import (AUTOCAST_TOL, TOL, ProbeSkip, as_reference, compare_cases, dtype_name, fmt_sci, perturb, rel_err,
                              sync_device, wrong_injected)


def probe_device(ctx):
    torch, dev = ctx.torch, ctx.device
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    d = a.to(dev)
    ones = torch.ones(3, 4, device=dev)
    s = (d + ones).sum().item()
    back = (d * 2).to("cpu")
    expect = float((a + 1).sum().item())
    if wrong_injected("device"):
        s += 1.0
    if s != expect or not torch.equal(back, a * 2):
        return {"status": "fail", "kind": "wrong", "message": "arithmetic on %s gave %s, expected %s" % (dev, s, expect)}
    r = torch.randn(64, device=dev)
    if not bool(torch.isfinite(r).all().item()):
        return {"status": "fail", "kind": "nan", "message": "torch.randn on %s returned non-finite values" % dev}
    for dt in ctx.dtypes[1:]:
        t = torch.ones(4, dtype=dt, device=dev)
        if t.sum().item() != 4:
            return {"status": "fail", "kind": "wrong-lowp", "message": "%s tensors on %s are wrong" % (dtype_name(dt), dev)}
    name = ctx.info.get("device_name", {}).get(dev) or dev
    return {"message": "%s: create, compute, copy back (%s)" % (name, ", ".join(dtype_name(d) for d in ctx.dtypes))}


def probe_matmul(ctx):
    torch, dev = ctx.torch, ctx.device
    n = 256 if ctx.quick else 768
    g = ctx.gen(1)
    cases = []
    for dt in ctx.dtypes:
        a = torch.randn(n, n + 64, generator=g).to(dt)
        b = torch.randn(n + 64, n // 2, generator=g).to(dt)
        ref = as_reference(torch, a) @ as_reference(torch, b)
        ad, bd = a.to(dev), b.to(dev)
        cases.append(("contiguous", dt, ad @ bd, ref, ctx.tol(dt)))
        # transposed views: the storage is (k, n) and (m, k); the matmul reads them transposed
        at = a.t().contiguous().to(dev).t()
        bt = b.t().contiguous().to(dev).t()
        cases.append(("transposed", dt, at @ bt, ref, ctx.tol(dt)))
        # strided views: every other column of a wider tensor
        wide = torch.randn(n, 2 * (n + 64), generator=g).to(dt)
        aw = wide[:, ::2]
        refw = as_reference(torch, aw) @ as_reference(torch, b)
        cases.append(("strided", dt, wide.to(dev)[:, ::2] @ bd, refw, ctx.tol(dt)))
        # batched (bmm) on a permuted view
        x = torch.randn(4, 64, 8, 96, generator=g).to(dt)
        w = torch.randn(4, 8, 96, 32, generator=g).to(dt)
        refb = as_reference(torch, x).permute(0, 2, 1, 3) @ as_reference(torch, w)
        cases.append(("bmm-permuted", dt, x.to(dev).permute(0, 2, 1, 3) @ w.to(dev), refb, ctx.tol(dt)))
    return compare_cases(ctx, "matmul", cases)


def probe_softmax(ctx):
    torch, dev = ctx.torch, ctx.device
    F = torch.nn.functional
    g = ctx.gen(2)
    big_cols = 1 << (16 if (ctx.quick or dev == "cpu") else 19)
    cases = []
    for dt in ctx.dtypes:
        tol = ctx.tol(dt, "pointwise")
        x = (torch.randn(64, 1000, generator=g) * 3).to(dt)
        cases.append(("normal", dt, F.softmax(x.to(dev), dim=-1), F.softmax(as_reference(torch, x), dim=-1), tol))
        # extreme logits: huge magnitudes (softmax must subtract the row max), masked -inf
        # entries (never a whole row), values near the dtype's limit
        lim = torch.finfo(dt).max / 4 if dt == torch.float16 else 1e4
        e = torch.randn(32, 512, generator=g) * lim / 4
        e[:, 0] = lim
        e[::2, 1::3] = float("-inf")
        e = e.to(dt)
        cases.append(("extreme", dt, F.softmax(e.to(dev), dim=-1), F.softmax(as_reference(torch, e), dim=-1), tol))
        # a large last dimension (NaN on MPS for large tensors, pytorch#96602)
        lg = (torch.randn(4, big_cols, generator=g) * 10).to(dt)
        cases.append(("large", dt, F.softmax(lg.to(dev), dim=-1), F.softmax(as_reference(torch, lg), dim=-1), tol))
        # non-contiguous: softmax over dim 0 of a transposed view
        t = torch.randn(300, 48, generator=g).to(dt)
        cases.append(("transposed", dt, F.softmax(t.to(dev).t(), dim=-1), F.softmax(as_reference(torch, t).t(), dim=-1), tol))
    return compare_cases(ctx, "softmax", cases)


def probe_layernorm(ctx):
    torch, dev = ctx.torch, ctx.device
    F = torch.nn.functional
    g = ctx.gen(3)
    dim = 512 if ctx.quick else 1024
    cases = []
    for dt in ctx.dtypes:
        tol = ctx.tol(dt, "pointwise")
        x = (torch.randn(64, dim, generator=g) * 4 + 2).to(dt)
        w = (torch.randn(dim, generator=g) * 0.5 + 1).to(dt)
        b = (torch.randn(dim, generator=g) * 0.1).to(dt)
        ref = F.layer_norm(as_reference(torch, x), (dim,), as_reference(torch, w), as_reference(torch, b))
        y = F.layer_norm(x.to(dev), (dim,), w.to(dev), b.to(dev))
        cases.append(("contiguous", dt, y, ref, tol))
        xt = x.t().contiguous().to(dev).t()  # same values, transposed storage
        cases.append(("transposed", dt, F.layer_norm(xt, (dim,), w.to(dev), b.to(dev)), ref, tol))
    return compare_cases(ctx, "layernorm", cases)


def probe_conv2d(ctx):
    torch, dev = ctx.torch, ctx.device
    F = torch.nn.functional
    g = ctx.gen(4)
    hw = 16 if ctx.quick else 32
    cases = []
    for dt in ctx.dtypes:
        tol = ctx.tol(dt, "conv")
        x = torch.randn(4, 16, hw, hw, generator=g).to(dt)
        w = (torch.randn(32, 16, 3, 3, generator=g) * 0.2).to(dt)
        b = torch.randn(32, generator=g).to(dt)
        ref = F.conv2d(as_reference(torch, x), as_reference(torch, w), as_reference(torch, b), padding=1)
        cases.append(("contiguous", dt, F.conv2d(x.to(dev), w.to(dev), b.to(dev), padding=1), ref, tol))
        xl = x.to(dev).contiguous(memory_format=torch.channels_last)
        cases.append(("channels_last", dt, F.conv2d(xl, w.to(dev), b.to(dev), padding=1), ref, tol))
        ref2 = F.conv2d(as_reference(torch, x)[:, :, ::2, ::2], as_reference(torch, w), None, stride=1)
        cases.append(("strided", dt, F.conv2d(x.to(dev)[:, :, ::2, ::2], w.to(dev), None), ref2, tol))
    return compare_cases(ctx, "conv2d", cases)


def _attention_ref(torch, q, k, v, causal):
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        T = q.shape[-2]
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def probe_sdpa(ctx):
    torch, dev = ctx.torch, ctx.device
    F = torch.nn.functional
    if not hasattr(F, "scaled_dot_product_attention"):
        raise ProbeSkip("this torch has no scaled_dot_product_attention (torch < 2.0)")
    g = ctx.gen(5)
    B, T, H, D = (2, 64, 4, 32) if ctx.quick else (4, 256, 8, 64)
    cases = []
    for dt in ctx.dtypes:
        tol = ctx.tol(dt)
        if dev == "cuda" and dt == torch.float32:
            tol = max(tol, TOL["tf32"])  # fused fp32 attention kernels may use TF32 tensor cores
        # (B, T, H, D) -> (B, H, T, D): the non-contiguous layout GPT-style models feed SDPA
        qkv = torch.randn(B, T, 3, H, D, generator=g).to(dt)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        for causal in (True, False):
            ref = _attention_ref(torch, as_reference(torch, q), as_reference(torch, k), as_reference(torch, v), causal)
            qd = qkv.to(dev)
            qq, kk, vv = (qd[:, :, i].transpose(1, 2) for i in range(3))
            y = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
            cases.append(("%s-transposed" % ("causal" if causal else "full"), dt, y, ref, tol))
        y = F.scaled_dot_product_attention(qq.contiguous(), kk.contiguous(), vv.contiguous(), is_causal=False)
        cases.append(("full-contiguous", dt, y, ref, tol))
    return compare_cases(ctx, "sdpa", cases)


def _mlp(torch, dim, seed):
    """A small MLP with one deliberately non-contiguous parameter (Adam's addcdiv bug, pytorch#118115)."""
    nn = torch.nn
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.LayerNorm(2 * dim), nn.Linear(2 * dim, dim))
    return m


def _params_noncontig(torch, model):
    with torch.no_grad():
        w = model[3].weight
        model[3].weight = torch.nn.Parameter(w.detach().t().contiguous().t())
    return model


def probe_backward(ctx):
    torch, dev = ctx.torch, ctx.device
    import copy

    dim = 32 if ctx.quick else 128
    # The backward and the optimizer step are judged at full fp32 precision (TF32 is the matmul
    # probe's business); restore the profile's settings afterwards.
    saved = torch.get_float32_matmul_precision()
    saved_cudnn = torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    try:
        base = _mlp(torch, dim, 11)
        g = ctx.gen(6)
        x = torch.randn(16, dim, generator=g)
        target = torch.randn(16, dim, generator=g)
        variants = [("foreach", {}), ("fused", {"fused": True})]  # the trainer uses fused on CUDA
        cases, notes = [], []
        lr = 1e-2
        for label, kw in variants:
            ref = _params_noncontig(torch, copy.deepcopy(base).double())
            mdl = _params_noncontig(torch, copy.deepcopy(base).to(dev))
            try:
                opt = torch.optim.AdamW(mdl.parameters(), lr=lr, eps=1e-6, weight_decay=0.1, **kw)
            except (RuntimeError, TypeError, ValueError) as exc:
                notes.append("%s AdamW unavailable (%s)" % (label, str(exc).splitlines()[0][:80]))
                continue
            ropt = torch.optim.AdamW(ref.parameters(), lr=lr, eps=1e-6, weight_decay=0.1, foreach=False)
            for model, o, xx, tt in ((ref, ropt, x.double(), target.double()), (mdl, opt, x.to(dev), target.to(dev))):
                o.zero_grad()
                loss = torch.nn.functional.mse_loss(model(xx), tt)
                loss.backward()
            grads = [p.grad.detach().clone() for p in mdl.parameters()]
            rgrads = [p.grad for p in ref.parameters()]
            try:
                opt.step()
                sync_device(torch, dev)
            except RuntimeError as exc:
                if label != "fused":
                    raise
                notes.append("fused AdamW unavailable (%s)" % str(exc).splitlines()[0][:80])
                continue
            ropt.step()
            gerr = max(rel_err(torch, a, b) for a, b in zip(grads, rgrads))
            # parameter error relative to the step size: one AdamW step moves each weight ~lr
            perr = max((a.detach().cpu().double() - b.detach()).abs().max().item() for a, b in zip(mdl.parameters(), ref.parameters())) / lr
            if wrong_injected("backward"):
                perr += 1.0
            cases.append((label, gerr, perr))
        if not cases:
            raise ProbeSkip("; ".join(notes))
        gtol, ptol = 1e-4, 1e-2

        details = {"variants": {v: {"grad_error": g_, "param_error_over_lr": p_} for v, g_, p_ in cases}}
        bad = [(v, g_, p_) for v, g_, p_ in cases if not (g_ <= gtol and p_ <= ptol)]
        worst_g = max(c[1] for c in cases)
        worst_p = max(c[2] for c in cases)
        if bad:
            parts = []
            for v, g_, p_ in bad:
                if not g_ <= gtol:
                    parts.append("%s: gradients off by %s (tolerance %s)" % (v, fmt_sci(g_), fmt_sci(gtol)))
                if not p_ <= ptol:
                    parts.append("%s: AdamW step off by %s x lr (tolerance %s)" % (v, fmt_sci(p_), fmt_sci(ptol)))
            nan = any(not (math.isfinite(g_) and math.isfinite(p_)) for _, g_, p_ in bad)
            kind = "nan" if nan else ("wrong-optimizer" if all(g_ <= gtol for _, g_, _ in bad) else "wrong")
            return {"status": "fail", "error": max(worst_g, worst_p), "tolerance": gtol if worst_g > gtol else ptol,
                    "message": "; ".join(parts), "kind": kind, "details": details}
        msg = "grads and one AdamW step (%s) match float64 CPU; param error %s x lr" % ("+".join(c[0] for c in cases), fmt_sci(worst_p))
        if notes:
            msg += "; " + "; ".join(notes)
        return {"status": "pass", "error": worst_g, "tolerance": gtol, "message": msg, "details": details}
    finally:
        torch.set_float32_matmul_precision(saved)
        torch.backends.cudnn.allow_tf32 = saved_cudnn


def _block(torch, dim, heads, seed):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super(Block, self).__init__()
            self.ln = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

        def forward(self, x):
            B, T, C = x.shape
            h = self.ln(x)
            q, k, v = self.qkv(h).split(C, dim=2)
            q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2) for t in (q, k, v))
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).contiguous().view(B, T, C))
            return x + self.mlp(x)

    torch.manual_seed(seed)
    return Block()


def probe_autocast(ctx):
    torch, dev = ctx.torch, ctx.device
    import copy

    prec = ctx.cfg.get("precision_resolved")
    why = ctx.cfg.get("precision_note") or ""
    if prec in (None, "fp32"):
        raise ProbeSkip("no autocast: the profile trains in fp32 here%s" % (" (%s)" % why if why else ""))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[prec]
    if dtype not in ctx.dtypes:
        return {"status": "fail", "kind": "unsupported-precision",
                "message": "the profile asks for %s but %s has no %s here" % (prec, dev, dtype_name(dtype))}
    dim, heads, T = (64, 4, 32) if ctx.quick else (128, 4, 128)
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        base = _block(torch, dim, heads, 21)
        g = ctx.gen(7)
        x = torch.randn(4, T, dim, generator=g)
        tgt = torch.randn(4, T, dim, generator=g)
        ref = copy.deepcopy(base).double()
        rloss = torch.nn.functional.mse_loss(ref(x.double()), tgt.double())
        rloss.backward()
        mdl = copy.deepcopy(base).to(dev)
        opt = torch.optim.AdamW(mdl.parameters(), lr=1e-3)
        scaler = None
        if dtype == torch.float16:
            scaler = torch.amp.GradScaler(dev) if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler()
        with torch.autocast(device_type=dev, dtype=dtype):
            out = mdl(x.to(dev))
            loss = torch.nn.functional.mse_loss(out.float(), tgt.to(dev))
            inner = mdl.qkv(x[:1].to(dev)).dtype  # a Linear under autocast must run in `dtype`
        if inner != dtype:
            return {"status": "fail", "kind": "wrong-lowp", "message": "autocast(%s, %s) ran a Linear in %s: mixed precision is not in effect"
                    % (dev, dtype_name(dtype), dtype_name(inner))}
        note = ""
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
        else:
            loss.backward()
        grads = [p.grad.detach().float().cpu() if p.grad is not None else None for p in mdl.parameters()]
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        sync_device(torch, dev)
        lval = loss.item()
        if wrong_injected("autocast"):
            lval *= 1.5
        lerr = abs(lval - rloss.item()) / max(abs(rloss.item()), 1e-12)
        gnum = sum(((a.double() - p.grad) ** 2).sum().item() for a, p in zip(grads, ref.parameters()) if a is not None)
        gden = sum((p.grad ** 2).sum().item() for p in ref.parameters())
        gerr = math.sqrt(gnum / max(gden, 1e-30)) if math.isfinite(gnum) else float("inf")
        params_ok = all(bool(torch.isfinite(p).all().item()) for p in mdl.parameters())
        tol = AUTOCAST_TOL[dtype_name(dtype)]
        err = max(lerr, gerr)
        details = {"dtype": dtype_name(dtype), "loss_error": lerr, "grad_error": gerr, "grad_scaler": scaler is not None}
        what = "%s autocast: linear + causal SDPA + layernorm + MLP, backward%s" % (prec, " + GradScaler step" if scaler else " + AdamW step")
        if not (math.isfinite(err) and params_ok):
            return {"status": "fail", "error": err, "tolerance": tol, "kind": "nan", "details": details,
                    "message": "%s gave NaN/inf (loss %s)" % (what, lval)}
        if err > tol:
            return {"status": "fail", "error": err, "tolerance": tol, "kind": "wrong", "details": details,
                    "message": "%s: loss off by %s, gradients by %s (tolerance %s)" % (what, fmt_sci(lerr), fmt_sci(gerr), fmt_sci(tol))}
        return {"status": "pass", "error": err, "tolerance": tol, "details": details, "message": what + note}
    finally:
        torch.set_float32_matmul_precision(saved)


def probe_compile(ctx):
    torch, dev = ctx.torch, ctx.device
    if ctx.quick:
        raise ProbeSkip("skipped with --quick (compiling takes long); run without --quick to test torch.compile")
    if not hasattr(torch, "compile"):
        return {"status": "warn", "kind": "unsupported", "message": "this torch has no torch.compile (torch < 2.0)"}
    tv = ctx.info.get("torch_version_tuple") or [0, 0]
    if dev == "mps" and tuple(tv[:2]) < (2, 8):
        return {"status": "warn", "kind": "unsupported",
                "message": "torch.compile on MPS is usable from torch 2.8 (this is %s): train with compile = false" % ctx.info.get("torch")}
    import copy

    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        base = _mlp(torch, 32, 31).to(dev)
        eager = copy.deepcopy(base)
        x = torch.randn(8, 32, device=dev)
        t0 = time.perf_counter()
        try:
            cm = torch.compile(base)
            y = cm(x)
            y.sum().backward()
            sync_device(torch, dev)
        except Exception as exc:  # the many ways a backend can be missing: warn, not fail
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            low = str(exc).lower()
            kind = "no-compiler" if any(s in low for s in ("compiler", "cc1plus", "g++", "clang", "xcrun", "cpp")) else "unsupported"
            return {"status": "warn", "kind": kind, "message": "torch.compile failed: %s: %s" % (type(exc).__name__, first)}
        secs = time.perf_counter() - t0
        ye = eager(x)
        ye.sum().backward()
        if wrong_injected("compile"):
            y = perturb(torch, y)
        err = rel_err(torch, y, ye)
        gerr = max(rel_err(torch, a.grad, b.grad) for a, b in zip(base.parameters(), eager.parameters()))
        tol = 1e-4
        e = max(err, gerr)
        if not e <= tol:
            return {"status": "fail", "kind": "wrong", "error": e, "tolerance": tol,
                    "message": "compiled model differs from eager: output %s, gradients %s (tolerance %s)"
                               % (fmt_sci(err), fmt_sci(gerr), fmt_sci(tol))}
        return {"error": e, "tolerance": tol, "details": {"compile_seconds": secs},
                "message": "inductor, forward + backward match eager (first compile %.1f s)" % secs}
    finally:
        torch.set_float32_matmul_precision(saved)
