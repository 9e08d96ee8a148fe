"""`envkit exec`, `envkit stop` and envkit.track, with real processes: the user's script runs under
the CLI as a user would start it (tests/conftest.py's `envkit`), and what they would see is read
back from the exit code, the output and the run folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import envkit, scratch_dir

PYBIN = str(Path(sys.executable).parent)
# envkit's cache for this file's runs, not the user's: shared by its tests, so the environment's lock
# that each run's record holds (envkit/record/envlock.py: hashes of every installed wheel, seconds of
# CPU or of index reads) is made once, not once per test in a background process.
CACHE = scratch_dir("envkit-test-exec-cache-")


def _env(tmp_path: Path, **extra) -> dict:
    """No managed env (ENVKIT_HOME names none), this interpreter's `python` first on PATH."""
    env = {"ENVKIT_HOME": str(tmp_path / "no-managed-env"), "ENVKIT_CACHE_DIR": CACHE,
           "PATH": PYBIN + os.pathsep + os.environ.get("PATH", "")}
    env.update(extra)
    return env


def _clean_environ(tmp_path, **extra) -> dict:
    """The caller's shell without envkit's, PyTorch's and the profile's variables (a CI runner may
    export OMP_NUM_THREADS), plus _env's."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTORCH_", "ENVKIT_")) and k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(_env(tmp_path), PYTHONUNBUFFERED="1", ENVKIT_CONFIG_DIR=str(tmp_path / "no-user-profiles"))
    env.update(extra)
    return env


def _exec(tmp_path, *args, env_extra=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, cwd=tmp_path, timeout=timeout,
                          env=_clean_environ(tmp_path, **(env_extra or {})))


def _script(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / name
    p.write_text(body)
    return p


def _only_run(tmp_path: Path, name: str) -> Path:
    runs = sorted((tmp_path / "runs" / name).iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def _wait_for(predicate, seconds=60.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


MYTRAIN = """\
import os, sys
import envkit.track as track
print("OMP_NUM_THREADS=" + str(os.environ.get("OMP_NUM_THREADS")))
print("python=" + sys.executable)
for step in range(1, 4):
    track.log(step=step, loss=1.0 / step, lr=0.1)
print("to stderr", file=sys.stderr)
sys.exit(3)
"""


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory):
    """A user's script that prints OMP_NUM_THREADS and exits 3, run through `envkit exec`."""
    tmp = tmp_path_factory.mktemp("exec")
    _script(tmp, "mytrain.py", MYTRAIN)
    r = _exec(tmp, "exec", "--profile", "cpu", "--", "python", "mytrain.py", "--token", "https://bob:hunter2@example.com/x",
              env_extra={"HF_TOKEN": "hf_secret_value", "MKL_NUM_THREADS": "5"})
    return tmp, r, _only_run(tmp, "mytrain")


def test_exec_exits_with_the_commands_code_and_sets_the_profiles_variables(failed_run):
    tmp, r, run = failed_run
    from envkit.profiles import load_profile

    want = load_profile("cpu").env["OMP_NUM_THREADS"]
    assert r.returncode == 3, r.stderr
    assert f"OMP_NUM_THREADS={want}" in r.stdout  # shown live
    assert "to stderr" in r.stderr
    log = (run / "train.log").read_text()
    assert f"OMP_NUM_THREADS={want}" in log and "to stderr" in log  # and tee'd into the run folder
    s = _summary(run)
    assert s["status"] == "failed" and s["exit_code"] == 3 and s["steps"] == 3


def test_runs_lists_the_exec_run_as_failed(failed_run):
    tmp, _, run = failed_run
    r = envkit("runs", "--json", cwd=tmp)
    states = json.loads(r.stdout)
    assert [(s["experiment"], s["run"], s["status"]) for s in states] == [("mytrain", run.name, "failed")]
    assert envkit("runs", cwd=tmp).stdout.splitlines()[1].split()[:3] == ["mytrain", run.name, "failed"]


def test_the_run_folder_records_what_ran_and_keeps_no_secret(failed_run):
    tmp, _, run = failed_run
    cfg = json.loads((run / "config.json").read_text())
    env = json.loads((run / "environment.json").read_text())
    assert cfg["kind"] == "exec" and cfg["command"][:2] == ["python", "mytrain.py"] and cfg["cwd"] == str(tmp)
    assert env["profile"] == "cpu" and env["versions"]["envkit"] and env["versions"]["python"]
    assert env["profile_env"]["OMP_NUM_THREADS"]["by"] == "profile"
    assert env["environ"]["MKL_NUM_THREADS"] == "5"
    text = "".join(p.read_text() for p in run.iterdir() if p.suffix in (".json", ".jsonl", ".log"))
    assert "hf_secret_value" not in text and "hunter2" not in text
    assert cfg["command"] == ["python", "mytrain.py", "--token", "***"]  # a --token's value is a secret, URL or not


def test_track_feeds_metrics_and_plot(failed_run):
    tmp, _, run = failed_run
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"]) for r in rows] == [(1, 1.0), (2, 0.5), (3, 1.0 / 3)]
    r = envkit("plot", str(run), cwd=tmp)
    assert r.returncode == 0, r.stderr
    assert (run / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_track_does_nothing_outside_exec(tmp_path, monkeypatch):
    monkeypatch.delenv("ENVKIT_RUN_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    import envkit.track as track

    track.log(step=1, loss=0.5)
    assert list(tmp_path.iterdir()) == []


def test_a_variable_the_user_exported_wins_and_is_recorded(tmp_path):
    _script(tmp_path, "omp.py", "import os\nprint('OMP=' + os.environ['OMP_NUM_THREADS'])\n")
    r = _exec(tmp_path, "exec", "--profile", "cpu", "--", "python", "omp.py", env_extra={"OMP_NUM_THREADS": "7"})
    assert r.returncode == 0, r.stderr
    assert "OMP=7" in r.stdout
    env = json.loads((_only_run(tmp_path, "omp") / "environment.json").read_text())
    assert env["profile_env"]["OMP_NUM_THREADS"]["by"] == "user"
    assert env["profile_env"]["OMP_NUM_THREADS"]["value"] == "7"


@pytest.mark.parametrize("args, words", [
    ((), "no command"),
    (("--", "no-such-program-here"), "command not found"),
    (("--profile", "no-such-profile", "--", "python", "-c", "pass"), "unknown profile"),
    (("--stall-timeout", "soon", "--", "python", "-c", "pass"), "--stall-timeout"),
])
def test_bad_input_is_one_line_exit_2_and_no_run_folder(tmp_path, args, words):
    r = _exec(tmp_path, "exec", *args)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and words in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()


SLOW = """\
import sys, time
print("start", flush=True)
try:
    for i in range(int(sys.argv[1])):
        time.sleep(0.5)
        print("tick", i, flush=True)
except KeyboardInterrupt:
    print("got SIGINT, saving", flush=True)
    sys.exit(130)
"""


# Runs until the test creates the file "go": alive while the test looks at it, on a fast or a slow machine.
UNTIL_GO = """\
import pathlib, time
print("start", flush=True)
i = 0
while not pathlib.Path("go").exists():
    time.sleep(0.1)
    print("tick", i, flush=True)
    i += 1
print("done after", i, "ticks", flush=True)
"""


def test_detach_returns_while_the_command_runs_and_the_run_completes(tmp_path):
    _script(tmp_path, "slow.py", UNTIL_GO)
    r = _exec(tmp_path, "exec", "--profile", "cpu", "--detach", "--json", "--", "python", "slow.py")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    pid = out["pid"]
    os.kill(pid, 0)  # exec has returned and the command is still alive
    run = Path(tmp_path / out["run_dir"]) if not os.path.isabs(out["run_dir"]) else Path(out["run_dir"])
    assert (run / "record.json").is_file()  # --detach too returns once the run's record is whole
    assert json.loads(envkit("runs", "--json", cwd=tmp_path).stdout)[0]["status"] == "running"
    (tmp_path / "go").touch()
    assert _wait_for(lambda: (run / "summary.json").is_file())
    assert _summary(run)["status"] == "completed"
    assert "done after" in (run / "train.log").read_text()
    assert json.loads(envkit("runs", "--json", cwd=tmp_path).stdout)[0]["status"] == "completed"


# prints the value it has, then edits itself at once, as an editor saving in the run's first second would
EDITS_ITSELF = """\
import pathlib
print("value 2", flush=True)
me = pathlib.Path(__file__)
me.write_text(me.read_text().replace("value " + "2", "value " + str(3)))
"""


def test_the_record_holds_the_code_that_ran_though_the_script_is_edited_as_it_runs_and_after(tmp_path):
    """The code state is taken before the command starts and exec returns with the record whole:
    neither an edit while the script runs nor one right after exec returns is recorded as the run's."""
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.email=t@e", "-c", "user.name=t", *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / ".gitignore").write_text("runs/\nno-managed-env/\nno-user-profiles/\n")
    _script(tmp_path, "train.py", 'print("value 1")\n')
    git("add", "-A")
    git("commit", "-qm", "one")
    _script(tmp_path, "train.py", EDITS_ITSELF)
    r = _exec(tmp_path, "exec", "--profile", "cpu", "--", "python", "train.py")
    assert r.returncode == 0 and "value 2" in r.stdout, r.stderr
    run = _only_run(tmp_path, "train")
    _script(tmp_path, "train.py", 'print("value 4")\n')  # right after exec returned
    assert (run / "record.json").is_file() and not (run / ".record-pending.json").exists()  # whole, nothing still writing
    time.sleep(0.5)  # nothing writes the record after exec has returned
    rec = json.loads((run / "record.json").read_text())
    project = next(s for s in rec["code"] if s["role"] == "project")
    patch = (run / project["patch"]).read_text()
    assert '+print("value 2", flush=True)' in patch and "value 3" not in patch and "value 4" not in patch, patch


def test_stop_sends_sigint_to_a_detached_run(tmp_path):
    _script(tmp_path, "slow.py", SLOW)
    r = _exec(tmp_path, "exec", "--profile", "cpu", "--detach", "--restart-on-failure", "3", "--", "python", "slow.py", "600")
    assert r.returncode == 0, r.stderr
    run = _only_run(tmp_path, "slow")
    assert _wait_for(lambda: "start" in (run / "train.log").read_text())
    r = envkit("stop", str(run), "--grace", "10", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("interrupted")
    s = _summary(run)
    assert s["status"] == "interrupted" and s["signal"] == "SIGINT" and len(s["attempts"]) == 1  # not restarted
    assert "got SIGINT, saving" in (run / "train.log").read_text()


def test_a_signal_to_foreground_exec_reaches_the_command(tmp_path):
    _script(tmp_path, "slow.py", SLOW)
    env = _clean_environ(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "envkit", "exec", "--profile", "cpu", "--restart-on-failure", "2", "--",
                             "python", "slow.py", "600"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for(lambda: (tmp_path / "runs").is_dir() and any((tmp_path / "runs").glob("slow/*/train.log"))
                         and "start" in next((tmp_path / "runs").glob("slow/*/train.log")).read_text())
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM  # the command died of the SIGTERM envkit passed on
    s = _summary(_only_run(tmp_path, "slow"))
    assert s["status"] == "interrupted" and s["signal"] == "SIGTERM" and len(s["attempts"]) == 1


SAVES = """\
import sys, time
print("start", flush=True)
try:
    time.sleep(600)
except KeyboardInterrupt:
    print("got SIGINT, saved", flush=True)
    sys.exit(0)  # saved and stopped, as many training scripts do
"""


def test_ctrl_c_exits_130_even_when_the_command_saves_and_exits_0(tmp_path):
    """Ctrl-C at the terminal (envkit's process group): envkit passes it to the command, which saves
    and exits 0; envkit exec exits 130, so `envkit exec ... && next` does not go on as if it had finished."""
    from conftest import default_sigint

    _script(tmp_path, "saves.py", SAVES)
    proc = subprocess.Popen([sys.executable, "-m", "envkit", "exec", "--profile", "cpu", "--", "python", "saves.py"], cwd=tmp_path,
                            env=_clean_environ(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=default_sigint)
    try:
        assert _wait_for(lambda: any("start" in p.read_text() for p in (tmp_path / "runs").glob("saves/*/train.log")))
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    s = _summary(_only_run(tmp_path, "saves"))
    assert (s["status"], s["signal"], s["exit_code"]) == ("interrupted", "SIGINT", 0)
    assert "got SIGINT, saved" in out
    assert "interrupted (exit code 130)" in err


FLAKY = """\
import pathlib, sys
count = pathlib.Path("attempts.txt")
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
print("attempt", n, flush=True)
sys.exit(0 if n >= int(sys.argv[1]) else 1)
"""


def test_restart_on_failure_reruns_until_it_succeeds(tmp_path):
    _script(tmp_path, "flaky.py", FLAKY)
    r = _exec(tmp_path, "exec", "--profile", "cpu", "--restart-on-failure", "3", "--restart-delay", "0", "--",
              "python", "flaky.py", "2")
    assert r.returncode == 0, r.stderr
    s = _summary(_only_run(tmp_path, "flaky"))
    assert s["status"] == "completed"
    assert [(a["attempt"], a["exit_code"]) for a in s["attempts"]] == [(1, 1), (2, 0)]


def test_restarts_stop_after_the_limit(tmp_path):
    _script(tmp_path, "flaky.py", FLAKY)
    r = _exec(tmp_path, "exec", "--profile", "cpu", "--restart-on-failure", "1", "--restart-delay", "0", "--",
              "python", "flaky.py", "99")
    assert r.returncode == 1
    s = _summary(_only_run(tmp_path, "flaky"))
    assert s["status"] == "failed" and len(s["attempts"]) == 2
    assert (tmp_path / "attempts.txt").read_text() == "2"


def test_a_silent_command_is_recorded_as_stalled_and_stopped(tmp_path):
    _script(tmp_path, "hang.py", "import time\nprint('loading data', flush=True)\ntime.sleep(600)\n")
    r = _exec(tmp_path, "exec", "--profile", "cpu", "--stall-timeout", "3s", "--grace", "2", "--", "python", "hang.py")
    assert r.returncode == 124, r.stderr[-2000:]  # not 130, a Ctrl-C's: the command was stopped because it hung
    run = _only_run(tmp_path, "hang")
    s = _summary(run)
    assert s["status"] == "stalled"
    stall = s["attempts"][0]["stall"]
    assert stall["quiet_seconds"] >= 3 and "loading data" in stall["last_lines"]
    assert "recorded as stalled" in (run / "train.log").read_text()


FALLBACK_LINE = ("{path}/torch/_tensor.py:12: UserWarning: The operator '{op}' is not currently supported on the MPS backend "
                 "and will fall back to run on the CPU. This may have performance implications. "
                 "(Triggered internally at /Users/runner/work/pytorch/aten/src/ATen/mps/MPSFallback.mm:13.)")


def test_cpu_fallback_operators_are_collected_into_the_summary(tmp_path):
    lines = [FALLBACK_LINE.format(path="/x", op="aten::nonzero")] * 2 + [FALLBACK_LINE.format(path="/x", op="aten::_linalg_eigh.eigenvalues")]
    _script(tmp_path, "fb.py", "import sys\n" + "".join(f"print({line!r}, file=sys.stderr)\n" for line in lines))
    r = _exec(tmp_path, "exec", "--profile", "cpu", "--", "python", "fb.py")
    assert r.returncode == 0
    s = _summary(_only_run(tmp_path, "fb"))
    assert s["cpu_fallbacks"] == [{"operator": "aten::nonzero", "count": 2}, {"operator": "aten::_linalg_eigh.eigenvalues", "count": 1}]
    hint = [h for h in s["hints"] if h["id"] == "cpu-fallback"]
    assert hint and "aten::nonzero" in hint[0]["message"]
    assert "cpu-fallback" in r.stderr


def test_the_trainers_watch_collects_cpu_fallback_warnings(tmp_path):
    import warnings

    from envkit.train.watching.watch import RunWatch

    logged, shown = [], []
    text = ("The operator 'aten::nonzero' is not currently supported on the MPS backend and will fall back to run "
            "on the CPU. This may have performance implications.")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *args, **kwargs: shown.append(str(message))  # the user's stderr
        watch = RunWatch(tmp_path, {"logging": {"device_seconds": 0}}, "mps", None, logged.append)
        warnings.warn(text, UserWarning, stacklevel=1)
        out = watch.finish()
    assert out["cpu_fallbacks"] == [{"operator": "aten::nonzero", "count": 1}]
    assert any("aten::nonzero" in line for line in logged)
    assert shown == [text]  # counted, and still shown as torch shows it


def test_torchrun_with_two_cpu_processes(tmp_path):
    pytest.importorskip("torch")
    # Each print writes its words one by one (the profile runs Python unbuffered): without
    # torchrun's tee, two ranks printing at once splice their lines ("rankrank 1 of 2").
    _script(tmp_path, "ddp.py", "import os\nimport envkit.track as t\n"
                                 "for i in range(40):\n    print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], 'line', i)\n"
                                 "t.log(step=1, loss=float(os.environ['RANK']))\n")
    r = _exec(tmp_path, "exec", "--profile", "cpu", "--nproc-per-node", "2", "--", "python", "ddp.py", timeout=300)
    assert r.returncode == 0, r.stderr
    run = _only_run(tmp_path, "ddp")
    lines = set((run / "train.log").read_text().splitlines())
    for rank in (0, 1):
        assert all(f"[default{rank}]:rank {rank} of 2 line {i}" in lines for i in range(40)), sorted(lines)[:20]
        own = list((run / "ranks").glob(f"*/attempt_0/{rank}/stdout.log"))
        assert len(own) == 1 and own[0].read_text().splitlines() == [f"rank {rank} of 2 line {i}" for i in range(40)]
    assert json.loads((run / "config.json").read_text())["launched"][1:3] == ["-m", "torch.distributed.run"]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{**rows[0], "step": 1, "loss": 0.0}] and len(rows) == 1  # rank 0 alone logs


def test_the_managed_env_comes_first_and_a_swapped_torch_is_reported(tmp_path):
    home = tmp_path / ".envkit"
    (home / "venv" / "bin").mkdir(parents=True)
    venv_python = home / "venv" / "bin" / "python"
    venv_python.symlink_to(sys.executable)  # the managed venv's interpreter, not on the caller's PATH
    (home / "state.json").write_text(json.dumps({"profile": "cpu", "venv": str(home / "venv"), "torch": "1.0.0"}))
    (tmp_path / "envkit.lock").write_text("# the project's lock\n")
    args = ("exec", "--", "python", "-c", "import sys; print('exe=' + sys.executable)")
    r = _exec(tmp_path, *args, env_extra={"ENVKIT_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    assert f"exe={venv_python}" in r.stdout
    # this bare venv holds no torch at all, where setup installed 1.0.0
    line = [ln for ln in r.stderr.splitlines() if "torch is no longer installed in the managed env (setup installed 1.0.0)" in ln]
    assert len(line) == 1 and "fix: `envkit setup`" in line[0]
    env = json.loads((_only_run(tmp_path, "python") / "environment.json").read_text())
    assert env["profile"] == "cpu" and env["venv"] == str(home / "venv")
    assert env["lock"]["sha256"] == __import__("hashlib").sha256(b"# the project's lock\n").hexdigest()
    r = _exec(tmp_path, "exec", "--no-check", "--", "python", "-c", "pass", env_extra={"ENVKIT_HOME": str(home)})
    assert "1.0.0" not in r.stderr


# ---- pure pieces

def test_caffeinate_on_a_mac_keeps_it_awake_without_holding_the_display():
    from envkit.exec.supervise import caffeinate_command

    assert caffeinate_command(4242, "Darwin") == ["caffeinate", "-i", "-s", "-w", "4242"]
    assert caffeinate_command(4242, "Darwin", enabled=False) is None  # --no-caffeinate
    assert caffeinate_command(4242, "Linux") is None


def test_the_process_groups_usage_is_summed_from_ps():
    from envkit.exec.heartbeat import group_usage

    ps = "  100  204800  50.0\n  100  102400  25.5\n  200  999999  99.0\n garbage\n"
    assert group_usage(ps, 100) == (300.0, 75.5)
    assert group_usage(ps, 300) == (None, None)


def test_run_names_come_from_the_script():
    from envkit.exec.start_files import run_name

    assert run_name(["python", "-u", "src/train.py", "--optimizer", "lion"]) == "train"
    assert run_name(["python3", "-m", "pkg.curriculum_learning"]) == "curriculum_learning"
    assert run_name(["./launch.sh"]) == "launch"


def test_torch_drift_names_what_changed():
    from envkit.exec.torch_check import torch_drift

    assert torch_drift("2.5.1", "2.5.1", None) is None
    assert "2.5.1+cpu" in torch_drift("2.5.1+cpu", "2.5.1+cu124", None)
    assert "the lock names 2.4.0" in torch_drift("2.5.1", "2.5.1", "2.4.0")
    assert "no longer installed" in torch_drift(None, "2.5.1", None)


def _write_json(path, data):
    path.write_text(json.dumps(data))


def test_monitor_says_when_an_exec_run_has_printed_nothing(tmp_path):
    write_json = _write_json

    run = tmp_path / "runs" / "quiet" / "r1"
    run.mkdir(parents=True)
    write_json(run / "config.json", {"kind": "exec"})
    now = time.time()
    write_json(run / "heartbeat.json", {"status": "running", "pid": os.getpid(), "updated_at": now, "last_output_at": now - 600,
                                        "last_metric_at": None, "device": {"device": "cpu", "cpu_pct": 99.0, "rss_mb": 2048.0}})
    r = envkit("monitor", "--once", str(run), cwd=tmp_path)
    assert "no output for 10 minutes" in r.stdout and "cpu 99%" in r.stdout


def test_monitor_without_a_run_follows_the_run_started_last_not_the_folder_touched_last(tmp_path):
    """A finished run whose folder is written to late (its record, its summary) is not "the newest":
    `envkit monitor` with no RUN_DIR shows the run started after it (the exec.md tour's order)."""
    write_json = _write_json

    now = time.time()
    done, live = tmp_path / "runs" / "train_demo" / "r1", tmp_path / "runs" / "long_demo" / "r2"
    for run in (done, live):
        run.mkdir(parents=True)
        write_json(run / "config.json", {"kind": "exec"})
    os.utime(done / "config.json", (now - 60, now - 60))
    write_json(done / "heartbeat.json", {"status": "completed", "pid": None, "updated_at": now - 30, "step": 3})
    write_json(live / "heartbeat.json", {"status": "running", "pid": os.getpid(), "updated_at": now, "step": 6})
    (done / "record.json").write_text("{}")  # the finished run's folder is now the most recently changed
    os.utime(live, (now - 10, now - 10))
    r = envkit("monitor", "--once", cwd=tmp_path)
    assert r.stdout.startswith("long_demo/r2 | running"), r.stdout
