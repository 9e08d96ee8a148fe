"""Soak test (not in the default suite): one training run killed with SIGKILL at 20 random moments,
each followed by `envkit run --resume auto`; the losses must equal those of the run never killed.

    python benchmarks/soak_kill_resume.py [--kills 20] [--steps 300] [--seed 0]

A tiny MLP on the CPU (a few minutes). SIGKILL gives the trainer no chance to checkpoint: every
resume starts from the last periodic checkpoint (every 5 steps) and redoes the steps after it.
Prints the kills, the resumes and whether every step's loss (the last one logged for it) and the
final loss match; exit 0 when they do.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = str(ROOT / "templates" / "train" / "mlp_quick_test.yaml")


def args_for(steps: int) -> list[str]:
    return ["--profile", "cpu", "--set", f"training.max_steps={steps}", "--set", "training.batch_size=16",
            "--set", "dataset.num_samples=4000", "--set", "model.hidden=64", "--set", "eval.every_steps=50",
            "--set", "checkpoint.every_steps=5", "--set", "checkpoint.keep_last=2", "--set", "logging.every_steps=1",
            "--set", "logging.progress=none", "--set", "model.dropout=0.1"]


def start(cwd: Path, run_id: str, steps: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}
    return subprocess.Popen([sys.executable, "-m", "envkit", "run", TEMPLATE, "--run-id", run_id, *args_for(steps)],
                            cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own process group: the kill reaches the trainer too


def last_step(run_dir: Path) -> int:
    try:
        rows = (run_dir / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return 0
    steps = [json.loads(r).get("step", 0) for r in rows[-5:] if r.strip().endswith("}")]
    return max(steps, default=0)


def rows(run_dir: Path) -> int:
    try:
        return (run_dir / "metrics.jsonl").read_text().count("\n")
    except OSError:
        return 0


def losses(run_dir: Path) -> dict[int, float]:
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut by the kill
        if "loss" in row:
            out[row["step"]] = row["loss"]  # the last value logged for a step wins (steps after a checkpoint are redone)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = Path(tempfile.mkdtemp(prefix="envkit-soak-"))
    exp = work / "runs" / "mlp-quick-test"

    t0 = time.perf_counter()
    straight = start(work, "straight", a.steps)
    if straight.wait() != 0:
        print(straight.stderr.read()[-2000:])
        return 1
    print(f"uninterrupted run: {a.steps} steps in {time.perf_counter() - t0:.1f} s")

    # kill points: sorted random steps, at least 2 apart, spread over the run
    targets = sorted(rng.sample(range(3, a.steps - 3, 2), a.kills))
    run_dir, kills, resumes = exp / "killed", 0, 0
    t0 = time.perf_counter()
    for target in targets:
        before = rows(run_dir)
        p = start(work, "killed", a.steps)
        resumes += (run_dir / "checkpoints").is_dir()
        # wait until THIS process trains (a new metrics row) and has reached the target step
        while (rows(run_dir) <= before or last_step(run_dir) < target) and p.poll() is None:
            time.sleep(0.02)
        time.sleep(rng.uniform(0, 0.3))  # anywhere in the step: mid-write of a checkpoint or a metrics line included
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            kills += 1
            print(f"kill {kills:2d}: SIGKILL at step ~{last_step(run_dir)}")
    p = start(work, "killed", a.steps)
    resumes += 1
    rc = p.wait()
    s = json.loads((run_dir / "summary.json").read_text())
    print(f"killed run: {kills} SIGKILLs, {resumes} resumes (--resume auto), status {s['status']}, rc {rc}, "
          f"{time.perf_counter() - t0:.1f} s")
    want, got = losses(exp / "straight"), losses(run_dir)
    differ = [k for k in want if got.get(k) != want[k]]
    final_want = json.loads((exp / "straight" / "summary.json").read_text())["final_loss"]
    print(f"steps compared: {len(want)}; differing: {len(differ)}{' ' + str(differ[:10]) if differ else ''}")
    print(f"final loss: uninterrupted {final_want!r}, killed {kills}x {s['final_loss']!r}: "
          f"{'EQUAL' if final_want == s['final_loss'] else 'DIFFERENT'}")
    ok = rc == 0 and s["status"] == "completed" and not differ and final_want == s["final_loss"] and kills == a.kills
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
