"""One owner per run folder beyond `envkit run`, no orphans, and what `envkit runs`/`stop` say after
a supervisor died: `kill -9` of `envkit exec` or `envkit sweep` leaves none of their processes; a
second sweep skips the run the first trains; a folder whose supervisor died is `orphaned` while its
command still lives and `killed` (with a summary.json written after the fact) once nothing runs;
`envkit stop` sends nothing to a process that merely has the recorded PID. Real processes, polled
with generous deadlines (no timing assertions)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import envkit, scratch_dir
from processes import LONG, alive as _alive, wait_for as _wait_for

PYBIN = str(Path(sys.executable).parent)
# envkit's cache for this file's runs, not the user's: shared by its tests, so the environment's lock
# that each run's record holds (envkit/record/envlock.py: hashes of every installed wheel, seconds of
# CPU or of index reads) is made once, not once per test.
CACHE = scratch_dir("envkit-test-owner-cache-")

# The user's script: writes its pid and its own child's pid (same process group), then sits quietly
# (it prints nothing: the old supervisor's death only reached a command when it next printed).
QUIET = """\
import os, pathlib, signal, subprocess, sys, time
if "ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
pathlib.Path("pids.txt").write_text(f"{os.getpid()} {kid.pid}")
time.sleep(600)
"""

SWEEP = LONG.replace("{name: own,", "{name: sw,") + """\
sweep:
  grid:
    experiment.seed: [0, 1]
"""


def _env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTORCH_", "ENVKIT_")) and k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(PYTHONUNBUFFERED="1", ENVKIT_HOME=str(tmp_path / "no-managed-env"), ENVKIT_CACHE_DIR=CACHE,
               ENVKIT_CONFIG_DIR=str(tmp_path / "no-user-profiles"), PATH=PYBIN + os.pathsep + os.environ.get("PATH", ""))
    return env


def _pids(tmp_path: Path) -> list[int] | None:
    try:
        return [int(x) for x in (tmp_path / "pids.txt").read_text().split()]
    except (OSError, ValueError):
        return None


def _start_exec(tmp_path: Path, *args: str) -> subprocess.Popen:
    (tmp_path / "quiet.py").write_text(QUIET)
    return subprocess.Popen([sys.executable, "-m", "envkit", "exec", "--profile", "cpu", *args, "--", "python", "quiet.py",
                             *(["ignore-term"] if "--grace" in args else [])],
                            cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _runs(tmp_path: Path) -> list[dict]:
    r = envkit("runs", "--json", cwd=tmp_path, env={"ENVKIT_HOME": str(tmp_path / "no-managed-env")})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _kill_all(pids) -> None:
    for pid in pids or []:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_sigkill_of_exec_leaves_no_user_process_and_runs_says_killed(tmp_path):
    sup = _start_exec(tmp_path)
    pids = None
    try:
        assert _wait_for(lambda: _pids(tmp_path) is not None)
        pids = _pids(tmp_path)
        assert all(_alive(p) for p in pids)
        sup.send_signal(signal.SIGKILL)
        sup.wait(timeout=60)
        assert _wait_for(lambda: not any(_alive(p) for p in pids), seconds=120), f"{pids} outlived envkit exec"
    finally:
        if sup.poll() is None:
            sup.kill()
        _kill_all(pids)
    run = next((tmp_path / "runs" / "quiet").iterdir())
    states = _runs(tmp_path)
    assert [s["status"] for s in states] == ["killed"]
    summary = json.loads((run / "summary.json").read_text())  # written by `envkit runs`, which noticed
    assert summary["status"] == "killed" and summary["written_after_the_fact"] is True and summary["noticed_by"] == "envkit runs"


def _guard_of(sup: subprocess.Popen) -> int:
    """The supervisor's guard process (envkit/exec/guard.py), found among its children by its command line."""
    kids = Path(f"/proc/{sup.pid}/task/{sup.pid}/children").read_text().split()
    return next(int(k) for k in kids if b"envkit.exec.guard" in Path(f"/proc/{k}/cmdline").read_bytes())


def test_runs_says_orphaned_while_the_command_outlives_its_supervisor(tmp_path):
    """The command ignores SIGTERM: after `kill -9` of envkit exec it lives on (holding the run folder)
    until the --grace seconds end in SIGKILL; meanwhile `envkit runs` says orphaned, then killed. The
    guard is held (SIGSTOP) while `envkit runs` looks, so the command is alive then on any machine;
    the grace can be short without a race against a slow `envkit runs`."""
    sup = _start_exec(tmp_path, "--grace", "2")
    pids = guard = None
    try:
        assert _wait_for(lambda: _pids(tmp_path) is not None)
        pids = _pids(tmp_path)
        guard = _guard_of(sup)
        os.kill(guard, signal.SIGSTOP)
        sup.send_signal(signal.SIGKILL)
        sup.wait(timeout=60)
        assert _alive(pids[0])
        assert [s["status"] for s in _runs(tmp_path)] == ["orphaned"]
        os.kill(guard, signal.SIGCONT)  # it reads the supervisor's EOF: SIGTERM (ignored), the grace, SIGKILL
        assert _wait_for(lambda: not any(_alive(p) for p in pids), seconds=120), f"{pids} outlived the grace period"
    finally:
        if guard is not None and _alive(guard):
            _kill_all([guard])
        if sup.poll() is None:
            sup.kill()
        _kill_all(pids)
    assert [s["status"] for s in _runs(tmp_path)] == ["killed"]


def test_stop_sends_nothing_to_a_process_that_now_has_the_recorded_pid(tmp_path):
    sup = _start_exec(tmp_path)
    pids = sleeper = None
    try:
        assert _wait_for(lambda: _pids(tmp_path) is not None)
        pids = _pids(tmp_path)
        sup.send_signal(signal.SIGKILL)
        sup.wait(timeout=60)
        assert _wait_for(lambda: not any(_alive(p) for p in pids), seconds=120)
        run = next((tmp_path / "runs" / "quiet").iterdir())
        # the PID the run recorded now belongs to an unrelated program (PID reuse, simulated)
        sleeper = subprocess.Popen(["sleep", "300"])
        for name in ("heartbeat.json", ".owner.lock"):
            data = json.loads((run / name).read_text())
            data["pid"] = sleeper.pid
            (run / name).write_text(json.dumps(data))
        r = envkit("stop", str(run), "--grace", "5", cwd=tmp_path)
        assert r.returncode == 1, r.stderr
        errors = [line for line in r.stderr.splitlines() if line.startswith("envkit: error")]
        assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
        assert f"PID {sleeper.pid} is now another program: nothing sent" in errors[0], errors[0]
        time.sleep(1.0)  # anything sent would have landed
        assert sleeper.poll() is None and _alive(sleeper.pid)
    finally:
        if sup.poll() is None:
            sup.kill()
        _kill_all(pids)
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()


def _trainer(run: Path) -> int | None:
    try:
        beat = json.loads((run / "heartbeat.json").read_text())
    except (OSError, ValueError):
        return None
    return beat.get("pid") if isinstance(beat.get("step"), int) and beat["step"] > 0 else None


def test_a_second_sweep_skips_the_run_in_training_and_sigkill_leaves_no_trainer(tmp_path):
    """The first sweep's seed-0 trainer is held (SIGSTOP) from its start while the second sweep runs
    (the first sweep holds the folder; the second trains without a busy trainer beside it), then let
    go: once it trains, `kill -9` of the first sweep must take it along."""
    (tmp_path / "train.yaml").write_text(SWEEP)
    env = _env(tmp_path)
    first = subprocess.Popen([sys.executable, "-m", "envkit", "sweep", "train.yaml", "--profile", "cpu"], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    trainer = None
    try:
        run0 = tmp_path / "runs" / "sw" / "seed-0"
        assert _wait_for(lambda: _trainer_of(first, run0) is not None), sorted(str(p) for p in tmp_path.rglob("*"))[:40]
        trainer = _trainer_of(first, run0)
        os.kill(trainer, signal.SIGSTOP)
        try:
            # a second sweep of the same grid: skips the run the first one trains (says so), trains the
            # other one until --stop-after, and leaves the first one's folder alone
            second = envkit("sweep", "train.yaml", "--profile", "cpu", "--stop-after", "20", cwd=tmp_path, timeout=300,
                            env={"ENVKIT_HOME": str(tmp_path / "no-managed-env")})
        finally:
            os.kill(trainer, signal.SIGCONT)
        assert second.returncode == 1, second.stderr[-2000:]
        skipped = [line for line in second.stdout.splitlines() if line.startswith("skip") and "seed-0" in line]
        assert len(skipped) == 1 and f"PID {first.pid}" in skipped[0], second.stdout
        assert "in use" in skipped[0] and "envkit sweep" in skipped[0], skipped[0]
        s1 = json.loads((tmp_path / "runs" / "sw" / "seed-1" / "summary.json").read_text())
        assert (s1["status"], s1["steps"]) == ("stopped", 20)  # --stop-after: each run of the sweep stops there
        assert _alive(trainer) and first.poll() is None

        assert _wait_for(lambda: _trainer(run0) == trainer), sorted(str(p) for p in tmp_path.rglob("*"))[:40]  # training
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
        assert _wait_for(lambda: not _alive(trainer), seconds=120), f"trainer {trainer} outlived envkit sweep"
    finally:
        if first.poll() is None:
            first.kill()
        _kill_all([trainer] if trainer else [])
    steps = [json.loads(line)["step"] for line in (run0 / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    assert len(steps) == len(set(steps))  # one writer: no step twice


SHORT_SWEEP = SWEEP.replace("max_steps: 10000000", "max_steps: 60")


def _trainer_of(sup: subprocess.Popen, run: Path) -> int | None:
    """The trainer a sweep started for `run` (its child whose command line names the run folder), once it is exec'd."""
    try:
        kids = Path(f"/proc/{sup.pid}/task/{sup.pid}/children").read_text().split()
    except OSError:
        return None
    for kid in kids:
        try:
            if str(run).encode() in Path(f"/proc/{kid}/cmdline").read_bytes().split(b"\0"):
                return int(kid)
        except OSError:
            continue
    return None


def test_a_sweep_skips_a_run_another_sweep_completed_after_it_started(tmp_path):
    """Two sweeps of one grid: the first decides at its start that seed-1 is new; while its seed-0
    trainer is paused (SIGSTOP as soon as it starts: the first sweep holds seed-0's folder meanwhile),
    a second sweep skips seed-0 (in use) and completes seed-1. When the first reaches seed-1 it must
    see that, under the lock, and skip it: the old sweep reopened it and rewrote the finished run's
    summary.json with final_loss null."""
    (tmp_path / "train.yaml").write_text(SHORT_SWEEP)
    first = subprocess.Popen([sys.executable, "-m", "envkit", "sweep", "train.yaml", "--profile", "cpu"], cwd=tmp_path,
                             env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run0, run1 = tmp_path / "runs" / "sw" / "seed-0", tmp_path / "runs" / "sw" / "seed-1"
    trainer = None
    try:
        assert _wait_for(lambda: _trainer_of(first, run0) is not None), sorted(str(p) for p in tmp_path.rglob("*"))[:40]
        trainer = _trainer_of(first, run0)
        os.kill(trainer, signal.SIGSTOP)  # the first sweep's seed-0 stays in training while the second runs
        assert not (run0 / "summary.json").exists()  # stopped before it finished
        second = envkit("sweep", "train.yaml", "--profile", "cpu", cwd=tmp_path, timeout=300,
                        env={"ENVKIT_HOME": str(tmp_path / "no-managed-env")})
        assert [line for line in second.stdout.splitlines() if line.startswith("skip")] == [
            line for line in second.stdout.splitlines() if line.startswith("skip") and "seed-0" in line and f"PID {first.pid}" in line]
        finished = (run1 / "summary.json").read_bytes()
        assert json.loads(finished)["status"] == "completed", second.stdout + second.stderr[-2000:]
        os.kill(trainer, signal.SIGCONT)
        out, _ = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            _kill_all([trainer] if trainer else [])
    skips = [line for line in out.splitlines() if line.startswith("skip")]
    assert len(skips) == 1 and "seed-1" in skips[0] and "completed by another process" in skips[0], out
    assert (run1 / "summary.json").read_bytes() == finished  # untouched by the first sweep
    for run in (run0, run1):
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "completed" and isinstance(summary["final_loss"], float), summary
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
        assert steps == list(range(10, 61, 10)), steps  # trained exactly once: each logged step once
    starts = [line for line in out.splitlines() if line.startswith(("start", "resume"))]
    assert len(starts) == 1 and "seed-0" in starts[0], out


# Where prctl(PR_SET_PDEATHSIG) does not exist (macOS) the pipe is all there is: the same kills with
# spawn.die_with_parent returning None, as it does there.
NO_PRCTL = "from envkit.launch import spawn; spawn.die_with_parent = lambda *a, **k: None\n"


def test_without_pdeathsig_the_exec_guard_still_ends_the_commands_group(tmp_path):
    (tmp_path / "quiet.py").write_text(QUIET)
    code = NO_PRCTL + "import sys; from envkit.cli import main; main(sys.argv[1:])"
    sup = subprocess.Popen([sys.executable, "-c", code, "exec", "--profile", "cpu", "--", "python", "quiet.py"], cwd=tmp_path,
                           env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids = None
    try:
        assert _wait_for(lambda: _pids(tmp_path) is not None)
        pids = _pids(tmp_path)
        sup.send_signal(signal.SIGKILL)
        sup.wait(timeout=60)
        assert _wait_for(lambda: not any(_alive(p) for p in pids), seconds=120), f"{pids} outlived envkit exec"
    finally:
        if sup.poll() is None:
            sup.kill()
        _kill_all(pids)


def test_without_pdeathsig_a_trainer_still_stops_when_its_supervisor_dies(tmp_path):
    """spawn_child's pipe and the trainer's watcher thread (envkit/train/run/parent_watch.py)."""
    child = ("import os, time\nfrom envkit.train.run.parent_watch import watch_parent\nwatch_parent()\n"
             "open('child.pid', 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    code = NO_PRCTL + f"import os, sys, time\nspawn.spawn_child([sys.executable, '-c', {child!r}], dict(os.environ))\ntime.sleep(600)\n"
    sup = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=_env(tmp_path))
    pid = None
    try:
        assert _wait_for(lambda: (tmp_path / "child.pid").is_file() and (tmp_path / "child.pid").read_text().isdigit())
        pid = int((tmp_path / "child.pid").read_text())
        time.sleep(0.5)
        assert _alive(pid)  # alive while its supervisor is
        sup.send_signal(signal.SIGKILL)
        sup.wait(timeout=60)
        assert _wait_for(lambda: not _alive(pid), seconds=120), f"trainer {pid} outlived its supervisor"
    finally:
        if sup.poll() is None:
            sup.kill()
        _kill_all([pid] if pid else [])
