"""Soak test (not in the default suite): one owner per run folder, under fire. One training run is
killed with SIGKILL at 20 random moments, each time hitting either `envkit run` (the supervisor) or
its trainer child, chosen at random, and each kill is followed by `envkit run --resume auto`; at 5
of those moments, while it trains, a second `envkit run` of the same config must refuse.

    python benchmarks/soak_owner.py [--kills 20] [--collisions 5] [--steps 300] [--seed 0]

Builds on soak_kill_resume.py (the same tiny MLP on the CPU, a checkpoint every 5 steps, its
helpers). Checked and printed:
- collisions refused: the second `envkit run` exits 2 naming the owner ("is in use");
- duplicate steps: metrics.jsonl is append-only and each process writes strictly increasing steps,
  so within the rows written while one process owned the folder a step that does not increase is a
  second writer (an orphan of an earlier kill, or a collision that trained);
- the final loss, and every step's last logged loss, equal to an uninterrupted run of the same config;
- leftover processes: after each kill, `ps` must show no process of that run once the killed
  process's partner has had 60 s to die with it.
Exit 0 when all hold.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from soak_kill_resume import TEMPLATE, args_for, last_step, losses, rows, start  # noqa: E402

LEFTOVER_DEADLINE = 60.0


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def run_processes(run_dir: Path, pgid: int) -> list[str]:
    """`ps` lines of processes of this run: in the killed launch's process group, or naming its folder."""
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,stat=,args="], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) < 4 or int(parts[0]) == os.getpid() or parts[2].startswith("Z"):
            continue
        if int(parts[1]) == pgid or str(run_dir) in parts[3]:
            found.append(line.strip())
    return found


def wait_no_processes(run_dir: Path, pgid: int) -> list[str]:
    deadline = time.monotonic() + LEFTOVER_DEADLINE
    while time.monotonic() < deadline:
        left = run_processes(run_dir, pgid)
        if not left:
            return []
        time.sleep(0.1)
    return run_processes(run_dir, pgid)


def duplicates(run_dir: Path, windows: list[int]) -> int:
    """Rows whose step does not increase within the rows one owner wrote (window starts: row counts)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    bounds = sorted(set(windows)) + [len(lines)]
    dup = 0
    for a, b in zip(bounds, bounds[1:]):
        prev = None
        for line in lines[a:b]:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if "loss" not in row:
                continue
            if prev is not None and row["step"] <= prev:
                dup += 1
            prev = row["step"]
    return dup


def collide(work: Path, steps: int, with_run_id: bool) -> subprocess.Popen:
    """A second `envkit run` of the same config, started beside the one training (with its --run-id,
    or with none: --resume auto picks the same unfinished folder)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}
    extra = ["--run-id", "killed"] if with_run_id else []
    return subprocess.Popen([sys.executable, "-m", "envkit", "run", TEMPLATE, *extra, *args_for(steps)], cwd=work, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)


def refused(c: subprocess.Popen) -> tuple[bool, str]:
    err = c.communicate(timeout=300)[1]
    errors = [line for line in err.splitlines() if line.startswith("envkit: error")]
    return c.returncode == 2 and len(errors) == 1 and "is in use" in errors[0], (errors[0] if errors else err[-300:])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--collisions", type=int, default=5)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = Path(tempfile.mkdtemp(prefix="envkit-soak-owner-"))
    exp = work / "runs" / "mlp-quick-test"
    t_all = time.perf_counter()

    t0 = time.perf_counter()
    straight = start(work, "straight", a.steps)
    if straight.wait() != 0:
        print(straight.stderr.read()[-2000:])
        return 1
    print(f"uninterrupted run: {a.steps} steps in {time.perf_counter() - t0:.1f} s")

    targets = sorted(rng.sample(range(3, a.steps - 3, 2), a.kills))
    # collisions where the run has at least half its steps to go: it still trains when the second one asks
    early = [i for i, t in enumerate(targets) if t < a.steps // 2]
    collide_at = set(rng.sample(early, min(a.collisions, len(early))))
    run_dir = exp / "killed"
    kills = {"supervisor": 0, "trainer": 0}
    n_refused, collisions, leftovers, windows = 0, 0, [], []
    t0 = time.perf_counter()
    for i, target in enumerate(targets):
        before = rows(run_dir)
        windows.append(before)
        p = start(work, "killed", a.steps)
        while rows(run_dir) <= before and p.poll() is None:  # this process trains
            time.sleep(0.02)
        second = None
        if i in collide_at and p.poll() is None:
            collisions += 1
            second = collide(work, a.steps, with_run_id=collisions % 2 == 1)
        while (last_step(run_dir) < target or (second is not None and second.poll() is None)) and p.poll() is None:
            time.sleep(0.02)
        if second is not None:
            ok, line = refused(second)
            n_refused += ok
            print(f"collision {collisions}: a second envkit run{' --run-id killed' if collisions % 2 == 1 else ''} while "
                  f"the first trains (step ~{last_step(run_dir)}): {'refused' if ok else 'NOT REFUSED'}: ...{line[-150:]}")
        time.sleep(rng.uniform(0, 0.3))  # anywhere in the step: mid-write of a checkpoint or a metrics line included
        if p.poll() is not None:
            continue
        trainer = children(p.pid)
        who = rng.choice(["supervisor", "trainer"]) if trainer else "supervisor"
        victim = p.pid if who == "supervisor" else trainer[0]
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            continue
        kills[who] += 1
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pass
        left = wait_no_processes(run_dir, p.pid)
        n = sum(kills.values())
        print(f"kill {n:2d}: SIGKILL to the {who:<10} (pid {victim}) at step ~{last_step(run_dir)}; "
              f"processes left after: {len(left)}")
        if left:
            leftovers.extend(left)
            for line in left:
                try:
                    os.kill(int(line.split()[0]), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
    windows.append(rows(run_dir))
    p = start(work, "killed", a.steps)
    rc = p.wait()
    left = wait_no_processes(run_dir, p.pid)
    leftovers.extend(left)
    s = json.loads((run_dir / "summary.json").read_text())
    total = sum(kills.values())
    print(f"killed run: {total} SIGKILLs ({kills['supervisor']} to envkit run, {kills['trainer']} to its trainer), "
          f"{total + 1} starts with --resume auto, status {s['status']}, rc {rc}, {time.perf_counter() - t0:.1f} s")
    dup = duplicates(run_dir, windows)
    want, got = losses(exp / "straight"), losses(run_dir)
    differ = [k for k in want if got.get(k) != want[k]]
    final_want = json.loads((exp / "straight" / "summary.json").read_text())["final_loss"]
    print(f"collisions refused: {n_refused}/{collisions}")
    print(f"duplicate steps found (a second writer): {dup}")
    print(f"steps compared: {len(want)}; differing: {len(differ)}{' ' + str(differ[:10]) if differ else ''}")
    last = max(got, default=None)
    same = final_want == s["final_loss"] and last == a.steps and got.get(last) == want.get(last)
    print(f"final loss: uninterrupted {final_want!r}, killed {total}x {s['final_loss']!r} (summary.json; metrics.jsonl's "
          f"step {last}: {want.get(last)!r} vs {got.get(last)!r}): {'EQUAL' if same else 'DIFFERENT'}")
    print(f"leftover processes after kills: {len(leftovers)}" + "".join(f"\n  {x}" for x in leftovers[:10]))
    print(f"soak: {time.perf_counter() - t_all:.0f} s in all")
    ok = (rc == 0 and s["status"] == "completed" and total == a.kills and n_refused == collisions == a.collisions
          and dup == 0 and not differ and same and not leftovers)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
