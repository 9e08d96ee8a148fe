"""torch's ahead-of-time path against its mega cache, for the first step of a fresh process on a machine
whose Inductor and Triton caches are empty: GPT-2 small (envkit's GPT, batch 16 x 1,024, bf16 autocast,
fused AdamW), the forward and the loss compiled as one graph (mode default), as the plain loop of
bench_time_to_first_step.py.

    python benchmarks/bench_aot_first_step.py [--logs DIR]

- mega cache: one process compiles, steps once and saves torch.compiler.save_cache_artifacts(); a fresh
  process (empty Inductor and Triton caches) loads them (load_cache_artifacts), compiles (Dynamo traces,
  AOTAutograd and Inductor hit the loaded caches) and steps;
- aot: one process compiles with torch.compile(fullgraph=True).aot_compile(...) and saves the compiled
  function (save_compiled_function: the graph's code, the guards, Inductor's output); a fresh process
  loads it (torch.compiler.load_compiled_function: no Dynamo trace) and steps.
The compiled function takes the parameters as inputs (torch.func.functional_call), so the saved function
holds no module. Each process writes `envkit-timing` lines; the table gives, for each load, the time from
the process's start to the first step's end and its phases, and whether its loss equals the saving
process's first loss (the same weights and batch in all four).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


MODEL: list = []  # the module loss_fn calls: a global, so neither the saved function nor its closure holds it


def loss_fn(params, x, y):
    import torch
    import torch.nn.functional as F

    logits = torch.func.functional_call(MODEL[0], params, (x,))
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))


def child(phase: str, path: str) -> None:
    sys.path.insert(0, str(ROOT))
    from envkit.train.run import timing

    timing.child_started()
    import torch

    from envkit.train.run.models import GPT

    timing.mark("import torch, envkit's GPT")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = GPT(50304, 1024, 12, 12, 768)
        x = torch.randint(50304, (16, 1024))
        y = torch.randint(50304, (16, 1024))
    params = dict(model.named_parameters())
    opt = torch.optim.AdamW(params.values(), lr=6e-4, fused=True)
    MODEL.append(model)
    timing.mark("CUDA's start, model on the GPU, optimizer")

    if phase == "save-mega":
        step = torch.compile(loss_fn)
    elif phase == "load-mega":
        torch.compiler.load_cache_artifacts(Path(path).read_bytes())
        timing.mark("load_cache_artifacts")
        step = torch.compile(loss_fn)
    elif phase == "save-aot":
        step = torch.compile(loss_fn, fullgraph=True).aot_compile(((params, x, y), {}))
        timing.mark("aot_compile")
        step.save_compiled_function(path)
        timing.mark("save_compiled_function")
    else:  # load-aot
        with open(path, "rb") as f:
            step = torch.compiler.load_compiled_function(f, f_globals=globals())
        timing.mark("load_compiled_function")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = step(params, x, y)
    timing.mark("first step: forward")
    loss.backward()
    timing.mark("first step: backward")
    opt.step()
    opt.zero_grad(set_to_none=True)
    value = float(loss)
    timing.mark("first step: optimizer, the device waited for")
    timing.first_step_ended()
    print(f"first step done loss {value!r}", flush=True)
    if phase == "save-mega":
        blob = torch.compiler.save_cache_artifacts()
        assert blob is not None
        Path(path).write_bytes(blob[0])
    for i in range(2, 4):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step(params, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        float(loss)
        timing.mark(f"step {i}, waited for")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--path", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--logs", default=None)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.path)
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_time_to_first_step import breakdown, timed

    tmp = Path(tempfile.mkdtemp(prefix="bench-aot-"))
    results = {}
    for phase, caches in (("save-mega", "a"), ("load-mega", "b"), ("save-aot", "a"), ("load-aot", "d")):  # saves share caches
        blob = tmp / ("mega.bin" if "mega" in phase else "aot.bin")
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", ENVKIT_TIMING="1",
                   TORCHINDUCTOR_CACHE_DIR=str(tmp / caches / "inductor"), TRITON_CACHE_DIR=str(tmp / caches / "triton"))
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", phase, "--path", str(blob)]
        t = time.perf_counter()
        try:
            seconds, text, phases = timed(argv, env, tmp, "first step done", tmp / f"{phase}.log")
        except SystemExit as exc:
            results[phase] = {"error": str(exc)[-1500:], "seconds": round(time.perf_counter() - t, 1)}
            print(f"{phase}: failed\n{str(exc)[-1500:]}", flush=True)
            continue
        loss = [line.split()[-1] for line in text.splitlines() if line.startswith("first step done")]
        results[phase] = {"first_step_s": round(seconds, 2), "loss": loss[0] if loss else None, "phases": phases}
        print(breakdown(phase, phases) + "\n", flush=True)
    print(f"{'process':<10} {'first step':>11}  loss")
    for phase, r in results.items():
        print(f"{phase:<10} " + (f"{r['first_step_s']:>10.2f}s  {r['loss']}" if "first_step_s" in r
                                 else f"failed after {r['seconds']} s"))
    if args.logs:
        dest = Path(args.logs)
        dest.mkdir(parents=True, exist_ok=True)
        for f in tmp.glob("*.log"):
            (dest / f"aot-{f.name}").write_text(f.read_text())
        (dest / "aot-results.json").write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
