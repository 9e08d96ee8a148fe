"""Time from `envkit run` to its first step with torch.compile on, cold and warm, against a plain
compiled loop of the same model; and the throughput after the warm-up.

    python benchmarks/bench_time_to_first_step.py --steps 60                  # GPT-2 small, batch 16 (CUDA)
    python benchmarks/bench_time_to_first_step.py --steps 60 --cifar          # ResNet-18 on CIFAR-10, batch 128
    python benchmarks/bench_time_to_first_step.py --steps 60 --set training.compile_scope=blocks
    python benchmarks/bench_time_to_first_step.py --device cpu --small --steps 4   # a smoke check on the CPU

Each measurement is a fresh process on data the script writes to a temporary folder (random uint16
tokens for templates/train/gpt2_small_tokens.yaml, random CIFAR-10 binary records for
templates/train/cifar10.yaml), the clock started when the process is and stopped at the plain progress
line `step 1/` (printed when the first step has ended, compilation included):
- cold: envkit's cache (ENVKIT_CACHE_DIR), Inductor's (TORCHINDUCTOR_CACHE_DIR) and Triton's
  (TRITON_CACHE_DIR) all fresh and empty: a new machine;
- warm: envkit's cache kept from the cold run, Inductor's and Triton's fresh again: another machine
  that got envkit's compile cache (training.compile_cache), the case it is for. Its summary.json's
  median window rate is the throughput after the warm-up;
- again: the same machine's second run, every cache as the cold run left it (Triton's compiled
  kernels too, which envkit's cache does not carry where torch's artifacts leave them out);
- plain: a hand-written loop of the same model (envkit's GPT or ResNet-18 definition, torch.compile
  of the forward and the loss as one graph, bf16 autocast on CUDA, fused AdamW / SGD), caches cold;
- plain again: the plain loop's second run, Inductor's and Triton's caches as its first left them:
  the fastest known warm start of the same model, beside envkit's `again`.
Prints a table (`--json`: one object) with the compile cache's lines and torch's compile counters.

The breakdown (on unless --no-breakdown): every run is timed with ENVKIT_TIMING=1 (envkit/train/run/
timing.py), so the trainer's process writes when each phase ended; the plain loop writes the same lines.
They are put on this script's clock (the start of `envkit run` is 0) and printed, phase by phase, with
torch's own compile timers of the first step (Dynamo's trace, guards, the cached graphs' load, CUDA-graph
recording) and the next two steps, each waited for (their CUDA-graph recording). --repeat N runs warm and
again N times (medians in the table, the breakdown of the median run). --variant NAME:VAR=VALUE[,...]
runs warm and again once more each with those environment variables (a switch measured against the
same cold run's cache); NAME:VAR=VALUE:cold gives the variant its own caches and cold run too (a switch
that changes what the cold run saves). --profile-warm runs one more warm start under cProfile (to its
first step) and prints the functions that took longest.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "templates" / "train"
SMALL_GPT = ["model.n_layer=2", "model.n_head=2", "model.n_embd=64", "model.block_size=64", "dataset.vocab_size=512"]
SMALL_CIFAR = ["model.width=8"]


def write_data(tmp: Path, cifar: bool, vocab: int) -> Path:
    sys.path.insert(0, str(ROOT))
    import torch

    if cifar:
        from bench_resnet_cifar import write_random_cifar10

        return write_random_cifar10(tmp / "cifar-10-batches-bin", per_file=2000, test=500)
    from envkit.train.data.tokens import write_tokens

    folder = tmp / "tokens"
    g = torch.Generator().manual_seed(0)
    for name, n in (("train.bin", 1 << 22), ("val.bin", 1 << 16)):
        write_tokens(folder / name, torch.randint(vocab, (n,), generator=g), "uint16")
    return folder


def settings(args, data: Path) -> list[str]:
    batch = args.batch or (128 if args.cifar else 16)
    out = [f"dataset.path={data}", f"training.max_steps={args.steps}", f"training.batch_size={batch}", "training.grad_accum=1",
           "training.epochs=null", "training.compile=true", "eval.every_steps=0", "checkpoint.every_steps=0",
           f"logging.every_steps={args.log_every}", "logging.progress=plain", "experiment.name=ttfs"]
    if args.cifar:
        out += ["dataset.augment=false"]  # the same batches for the plain loop, no crop/flip work in the timing
    if args.device:
        out.append(f"device.type={args.device}")
    if args.small:
        out += SMALL_CIFAR if args.cifar else SMALL_GPT
    return out + list(args.set)


def fresh_env(tmp: Path, name: str, envkit_cache: Path, torch_caches: str | None = None, tree: Path = ROOT) -> dict:
    d = tmp / f"caches-{torch_caches or name}"
    return dict(os.environ, PYTHONPATH=str(tree), PYTHONUNBUFFERED="1", ENVKIT_CACHE_DIR=str(envkit_cache),
                TORCHINDUCTOR_CACHE_DIR=str(d / "inductor"), TRITON_CACHE_DIR=str(d / "triton"))


LOGS: Path | None = None  # --logs: where each run's log is copied as it ends
TIMING = re.compile(r"^envkit-timing (?P<t>[0-9.]+) (?P<phase>.*?)(?: (?P<json>\{.*\}))?$")


def timed(argv: list[str], env: dict, cwd: Path, marker: str, log: Path) -> tuple[float, str, list]:
    """(seconds from the start to the first line starting with `marker`, the whole output, the timing
    lines as (seconds from the start, phase, torch's timers or None))."""
    wall0, t0 = time.time(), time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd, text=True)
    seen, lines, stamped, phases = None, [], [], []
    for line in proc.stdout:
        lines.append(line)
        stamped.append(f"{time.perf_counter() - t0:8.2f}s {line}")  # the log says when each line came: a timeline of the start
        if seen is None and line.startswith(marker):
            seen = time.perf_counter() - t0
        m = TIMING.match(line.rstrip("\n"))
        if m:
            phases.append((float(m["t"]) - wall0, m["phase"], json.loads(m["json"]) if m["json"] else None))
    text = "".join(lines)
    log.write_text("".join(stamped))
    if LOGS is not None:  # kept as each run ends: a run cut by a time limit leaves the ones before it
        shutil.copy(log, LOGS / log.name)
    if phases:
        print(breakdown(log.stem, phases) + "\n", flush=True)
    if proc.wait() != 0 or seen is None:
        raise SystemExit(f"{' '.join(argv[:4])} failed (exit {proc.returncode}); its output: {log}\n{text[-3000:]}")
    return seen, text, phases


def envkit_run(args, tmp: Path, data: Path, name: str, envkit_cache: Path, torch_caches: str | None = None,
               extra_env: dict | None = None) -> dict:
    template = TEMPLATES / ("cifar10.yaml" if args.cifar else "gpt2_small_tokens.yaml")
    argv = [sys.executable, "-m", "envkit", "run", str(template), "--run-id", name, "--resume", "never"]
    for s in settings(args, data):
        argv += ["--set", s]
    env = fresh_env(tmp, name, envkit_cache, torch_caches, Path(args.tree).resolve())
    env.update(extra_env or {})
    if not args.no_breakdown:
        env["ENVKIT_TIMING"] = "1"
    seconds, text, phases = timed(argv, env, tmp, "step 1/", tmp / f"{name}.log")
    s = json.loads((tmp / "runs" / "ttfs" / name / "summary.json").read_text())
    unit = "tokens" if not args.cifar else "samples"
    return {"first_step_s": round(seconds, 2), "per_second": s.get(f"{unit}_per_second_median_window"), "unit": unit,
            "compile": s.get("compile"), "mode": s.get("derived", {}).get("training.compile_mode"),
            "cache": (s.get("compile_cache") or {}).get("notes"), "counters": s.get("compile_stats"),
            "device_name": s.get("device_name"), "phases": phases, "losses": losses(tmp / "runs" / "ttfs" / name)}


def losses(run_dir: Path) -> list:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r and "step" in r]


def plain_run(args, tmp: Path, name: str = "plain") -> dict:
    argv = [sys.executable, str(Path(__file__).resolve()), "--plain-child", "--steps", str(args.steps),
            "--batch", str(args.batch or (128 if args.cifar else 16))] + (["--cifar"] if args.cifar else []) \
        + (["--small"] if args.small else []) + (["--device", args.device] if args.device else [])
    env = fresh_env(tmp, name, tmp / "plain-envkit-cache", torch_caches="plain")
    if not args.no_breakdown:
        env["ENVKIT_TIMING"] = "1"
    seconds, text, phases = timed(argv, env, tmp, "first step done", tmp / f"{name}.log")
    rate = [line for line in text.splitlines() if line.startswith("median ")]
    return {"first_step_s": round(seconds, 2), "per_second": float(rate[-1].split()[1]) if rate else None, "phases": phases}


def plain_child(args) -> None:
    """The plain loop: model, compile, one optimizer, steps; `first step done` after the first step's sync."""
    sys.path.insert(0, str(ROOT))
    from envkit.train.run import timing

    timing.child_started()
    import torch
    import torch.nn.functional as F

    timing.mark("import torch")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        torch.zeros(1, device=device)
    timing.mark("CUDA's start")
    torch.manual_seed(0)
    if args.cifar:
        from envkit.train.run.resnets import build_resnet

        model, _ = build_resnet(18, 10, 3, "cifar", 8 if args.small else 64)
        model = model.to(device, memory_format=torch.channels_last)
        x = torch.randn(args.batch, 3, 32, 32, device=device).to(memory_format=torch.channels_last)
        y = torch.randint(10, (args.batch,), device=device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
        per_step = args.batch
    else:
        from envkit.train.run.models import GPT

        vocab, T = (512, 64) if args.small else (50304, 1024)
        model = (GPT(vocab, T, 2, 2, 64) if args.small else GPT(vocab, T, 12, 12, 768)).to(device)
        x = torch.randint(vocab, (args.batch, T), device=device)
        y = torch.randint(vocab, (args.batch, T), device=device)
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda)
        per_step = args.batch * T

    timing.mark("model built (on the CPU), moved, data, optimizer")

    def loss_fn(x, y):
        logits = model(x)
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))

    step = torch.compile(loss_fn)
    timing.mark("torch.compile's wrapper")
    ctx = torch.autocast(device, dtype=torch.bfloat16) if cuda else torch.autocast(device, enabled=False)
    times = []
    for i in range(args.steps):
        t = time.perf_counter()
        with ctx:
            loss = step(x, y)
        if i == 0:
            timing.mark("first step: forward (Dynamo's trace and guards, the graph compiled or loaded, its first run)")
        loss.backward()
        if i == 0:
            timing.mark("first step: backward")
        opt.step()
        opt.zero_grad(set_to_none=True)
        float(loss)  # a sync, as envkit's logged steps
        times.append(time.perf_counter() - t)
        if i == 0:
            timing.mark("first step: optimizer step, the device waited for")
            timing.first_step_ended()
            print("first step done", flush=True)
        elif i < timing.STEPS:
            timing.mark(f"step {i + 1}, waited for")
    later = times[len(times) // 3:] or times
    print(f"median {per_step / statistics.median(later):.1f} per second", flush=True)


def table(results: dict) -> str:
    rows = [f"{'':<16} {'first step':>11} {'after warm-up':>16}  compile / cache"]
    for name, r in results.items():
        rate = f"{r['per_second']:,.0f}/s" if r.get("per_second") else "n/a"
        cache = "; ".join(r.get("cache") or [])
        misses = (r.get("counters") or {}).get("fxgraph_cache_miss")
        extra = f"{r.get('compile') or 'plain torch.compile'}" + (f" | {cache}" if cache else "") \
            + (f" | graphs compiled here: {misses}" if misses is not None else "")
        spread = f" ({', '.join(f'{x:.1f}' for x in r['all_s'])})" if len(r.get("all_s") or []) > 1 else ""
        rows.append(f"{name:<16} {r['first_step_s']:>10.1f}s {rate:>16}  {extra}{spread}")
        seconds = (r.get("counters") or {}).get("seconds") or {}
        if seconds:  # torch's own phase timers, the longest first (they nest: compile_inner holds the rest)
            rows.append(f"{'':<16} compile phases: " + ", ".join(f"{k} {v:.1f}s" for k, v in list(seconds.items())[:6]))
    return "\n".join(rows)


# torch's timers shown under the first step, in this order where present (they nest: compile_inner holds the
# trace, the guards and the backend's call; the backend's call holds the cached graphs' load)
TORCH_TIMERS = ("_compile.compile_inner", "bytecode_tracing", "build_guards", "OutputGraph.call_user_compiler", "inductor_import",
                "create_aot_dispatcher_function", "AOTAutogradCache.inductor_load", "compile_fx.<locals>.fw_compiler_base",
                "compile_fx.<locals>.bw_compiler", "async_compile.wait", "PyCodeCache.load_by_key_path",
                "CUDAGraphNode.record", "cudagraphify.get_container")


def breakdown(name: str, phases: list) -> str:
    """The phases of one run, each with when it ended and how long it took since the one before."""
    if not phases:
        return f"{name}: no timing lines (ENVKIT_TIMING not read by this tree?)"
    rows = [f"{name}: where the time to the first step went (s from the start of the command)",
            f"  {'at':>7} {'took':>6}  phase"]
    before = 0.0
    for at, phase, timers in phases:
        if timers is not None:
            shown = [f"{k} {timers[k]:.2f}" for k in TORCH_TIMERS if k in timers]
            rest = sorted(((v, k) for k, v in timers.items() if k not in TORCH_TIMERS and v >= 0.1), reverse=True)[:5]
            rows.append(f"  {'':>7} {'':>6}    torch's timers so far (s; they nest): " + ", ".join(shown))
            if rest:
                rows.append(f"  {'':>7} {'':>6}    and: " + ", ".join(f"{k} {v:.2f}" for v, k in rest))
            continue
        rows.append(f"  {at:7.2f} {at - before:6.2f}  {phase}")
        before = at
    return "\n".join(rows)


def median_run(runs: list[dict]) -> dict:
    """The run of the median first step (the lower middle of an even count), with every figure beside it."""
    ordered = sorted(runs, key=lambda r: r["first_step_s"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["all_s"] = [r["first_step_s"] for r in runs]
    chosen["first_step_s"] = round(statistics.median(r["first_step_s"] for r in runs), 2)
    return chosen


def parse_variant(text: str) -> tuple[str, dict, bool]:
    name, _, rest = text.partition(":")
    rest, cold = (rest[:-5], True) if rest.endswith(":cold") else (rest, False)
    env = dict(pair.split("=", 1) for pair in rest.split(",") if pair)
    return name, env, cold


def profile_table(path: Path, top: int = 40) -> str:
    import io
    import pstats

    out = io.StringIO()
    pstats.Stats(str(path), stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60, help="steps per run (the throughput is the median window after the first)")
    ap.add_argument("--cifar", action="store_true", help="ResNet-18 on CIFAR-10 (templates/train/cifar10.yaml) instead of GPT-2 small")
    ap.add_argument("--batch", type=int, default=None, help="micro-batch (default: 16 for GPT-2 small, 128 for ResNet-18)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: what envkit picks (CUDA where there is one)")
    ap.add_argument("--small", action="store_true", help="a tiny model of the same kind: a smoke check on the CPU")
    ap.add_argument("--log-every", type=int, default=1, help="logging.every_steps of the envkit runs")
    ap.add_argument("--set", action="append", default=[], help="more `envkit run --set` KEY=VALUE (e.g. training.compile_scope=blocks)")
    ap.add_argument("--tree", default=str(ROOT), help="the envkit tree the runs import (another commit's `git archive`, "
                    "measured beside this one in the same lease); the plain loop always uses this one's model code")
    ap.add_argument("--skip-plain", action="store_true", help="leave out the plain loop")
    ap.add_argument("--repeat", type=int, default=1, help="warm, again and plain again this many times each (medians)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:VAR=VALUE[,...][:cold]",
                    help="warm and again once more with these environment variables (:cold: with its own caches and cold run)")
    ap.add_argument("--profile-warm", action="store_true", help="one more warm start under cProfile; prints the longest functions")
    ap.add_argument("--no-breakdown", action="store_true", help="runs without ENVKIT_TIMING (no phase lines, no waits after steps 2-3)")
    ap.add_argument("--logs", default=None, help="copy every run's log (and the profile) into this folder")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plain-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.plain_child:
        plain_child(args)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="bench-ttfs-"))
    global LOGS
    if args.logs:
        LOGS = Path(args.logs)
        LOGS.mkdir(parents=True, exist_ok=True)
    data = write_data(tmp, args.cifar, 512 if args.small else 50304)
    cache = tmp / "envkit-cache"  # fresh and empty for the cold run, kept for the warm one
    n = max(1, args.repeat)
    # the order puts one of each first, then the variants, then the repeats: a run cut short keeps what matters most
    results = {"cold": envkit_run(args, tmp, data, "cold", cache)}
    warm = [envkit_run(args, tmp, data, "warm0", cache)]
    # the same machine again: envkit's, Inductor's and Triton's caches all as the cold run left them
    again = [envkit_run(args, tmp, data, "again0", cache, torch_caches="cold")]
    plain, plain_again = [], []
    if not args.skip_plain:
        plain = [plain_run(args, tmp)]
        plain_again = [plain_run(args, tmp, "plain-again0")]  # Inductor's and Triton's caches as "plain" left them
    variants = {}
    for text in args.variant:
        name, env, own = parse_variant(text)
        vcache, vtorch = (tmp / f"envkit-cache-{name}", f"{name}-cold") if own else (cache, "cold")
        if own:
            variants[f"{name} cold"] = envkit_run(args, tmp, data, f"{name}-cold", vcache, extra_env=env)
        variants[f"{name} warm"] = envkit_run(args, tmp, data, f"{name}-warm", vcache, extra_env=env)
        variants[f"{name} again"] = envkit_run(args, tmp, data, f"{name}-again", vcache, torch_caches=vtorch, extra_env=env)
    for i in range(1, n):
        warm.append(envkit_run(args, tmp, data, f"warm{i}", cache))
        again.append(envkit_run(args, tmp, data, f"again{i}", cache, torch_caches="cold"))
        if not args.skip_plain:
            plain_again.append(plain_run(args, tmp, f"plain-again{i}"))
    results["warm"], results["again"] = median_run(warm), median_run(again)
    if plain:
        results["plain"], results["plain again"] = plain[0], median_run(plain_again)
    results.update(variants)
    profile = None
    if args.profile_warm:
        profile = tmp / "warm-profile.pstats"
        envkit_run(args, tmp, data, "warm-profiled", cache, extra_env={"ENVKIT_TIMING_PROFILE": str(profile)})
        if LOGS is not None and profile.exists():
            shutil.copy(profile, LOGS / profile.name)
    out = {"model": "resnet18-cifar" if args.cifar else "gpt2-small", "steps": args.steps, "settings": list(args.set),
           "folder": str(tmp), "results": results}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        if profile is not None and profile.exists():
            print("the warm start under cProfile, to its first step (cumulative):\n" + profile_table(profile))
        first = results["cold"].get("losses")
        same = {name: r.get("losses") == first for name, r in results.items() if r.get("losses") is not None}
        print("losses identical to the cold run's at every logged step: "
              + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in same.items()))
        print(table(results))
        print(f"logs, each line with its time from the start: {tmp}/*.log")
    if LOGS is not None:
        (LOGS / "results.json").write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
