"""Is a trained run with the tuned profile at least as fast as with the shipped one?

In one run: `envkit tune` writes this machine's tuned profile into a throw-away user folder, then
the same train.yaml (a quick-test template, fewer steps) is trained with `--profile SHIPPED` and
`--profile SHIPPED-tuned`, alternating, `--repeats` times each; the trainer's own median rate
(summary.json) of each run is read. Prints the medians and the ratio tuned / shipped.

    python benchmarks/bench_tuned_vs_shipped.py [--budget 2m] [--model gpt] [--steps 40] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def envkit(*args: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], env=env, cwd=cwd, capture_output=True, text=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", default="2m")
    ap.add_argument("--model", default="gpt", choices=("gpt", "mlp", "cnn"))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="envkit-tuned-vs-shipped-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_", "OMP_"))}
    env.update(ENVKIT_CONFIG_DIR=str(work / "config"), PYTHONUNBUFFERED="1")
    t = envkit("tune", "--budget", a.budget, "--model", a.model, "--json", env=env, cwd=work)
    if t.returncode != 0:
        print(t.stdout[-2000:], t.stderr[-2000:])
        return 1
    out = json.loads(t.stdout)
    tuned, shipped = out["profile"], out["profile"].removesuffix("-tuned")
    print(f"tune ({out['elapsed_s']:.0f} s, {len(out['runs'])} runs) wrote {tuned}:")
    for s in out["settings"]:
        print(f"  {'*' if s['changed'] else '='} {s['section']}.{s['key']} = {s['value']}: {s['reason']}")
    envkit("init", "train.yaml", "--template", f"{a.model}_quick_test", env=env, cwd=work)
    # no batch_size in the YAML: the profile's value applies (the template's own would hide what tune chose)
    yaml_path = Path(work) / "train.yaml"
    yaml_path.write_text(re.sub(r"(?m)^\s*batch_size:.*\n", "", yaml_path.read_text(), count=1))
    sets = ["--set", f"training.max_steps={a.steps}", "--set", "logging.every_steps=5", "--set", "eval.every_steps=0",
            "--set", f"checkpoint.every_steps={a.steps}", "--resume", "never", "--set", "logging.progress=none"]
    rates: dict[str, list[float]] = {shipped: [], tuned: []}
    unit = "samples"
    for i in range(a.repeats):
        for name in (shipped, tuned):
            r = envkit("run", "train.yaml", "--profile", name, "--run-id", f"{name}-{i}", *sets, env=env, cwd=work)
            summaries = list((work / "runs").glob(f"*/{name}-{i}/summary.json"))
            if r.returncode != 0 or not summaries:
                print(f"run {name} #{i} failed: {r.stderr[-1000:]}")
                return 1
            s = json.loads(summaries[0].read_text())
            unit = "tokens" if s.get("tokens_per_second") else "samples"
            rates[name].append(s[f"{unit}_per_second"])
            print(f"  run {i + 1}/{a.repeats} {name:<14} {rates[name][-1]:>12,.0f} {unit}/s")
    ms, mt = statistics.median(rates[shipped]), statistics.median(rates[tuned])
    print(f"median {unit}/s: shipped {shipped} {ms:,.0f}, tuned {tuned} {mt:,.0f}; ratio tuned/shipped {mt / ms:.2f}x")
    return 0 if mt >= ms else 1


if __name__ == "__main__":
    sys.exit(main())
