"""Doctor and check on this machine, for real: with torch, without torch, with a torch that crashes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from conftest import ROOT, envkit


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A fresh venv with no torch at all."""
    d = tmp_path_factory.mktemp("bare") / "venv"
    venv.EnvBuilder(with_pip=False).create(d)
    return str(d / "bin" / "python")


def test_doctor_on_this_machine_with_torch():
    r = envkit("doctor", "--json")
    assert r.returncode in (0, 1), r.stderr
    data = json.loads(r.stdout)
    f = data["facts"]
    assert f["python"]["version"].startswith(f"{sys.version_info.major}.{sys.version_info.minor}")
    assert f["memory_bytes"] and f["memory_bytes"] > 2**30
    assert f["torch"]["version"], "torch is installed in the test environment"
    assert f["runtime"]["ok"] is True
    checks = {c["id"]: c for c in data["checks"]}
    assert checks["torch"]["status"] == "pass"
    assert data["profile"] in ("cpu", "cuda", "cuda-hopper")


def test_doctor_plain_output_is_readable():
    r = envkit("doctor")
    assert "envkit doctor:" in r.stdout
    assert "profile:" in r.stdout
    assert "\x1b[" not in r.stdout  # no colour codes when not a terminal


def test_doctor_without_torch(bare_python):
    r = envkit("doctor", "--python", bare_python, "--json")
    assert r.returncode == 1, r.stderr
    checks = {c["id"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["torch"]["status"] == "fail"
    assert "envkit setup" in checks["torch"]["fix"]


def test_check_without_torch(bare_python):
    r = envkit("check", "--python", bare_python, "--require", "torch>=2.0", "--require", "python>=3.10")
    assert r.returncode == 1
    assert "FAIL torch>=2.0: torch is not installed" in r.stdout
    assert "ok   python>=3.10" in r.stdout


def test_torch_that_crashes_on_import_is_reported(tmp_path, bare_python):
    site = subprocess.run([bare_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "torch").mkdir()
    (Path(site) / "torch" / "__init__.py").write_text("import os\nos.abort()\n")
    try:
        r = envkit("doctor", "--python", bare_python, "--json")
        assert r.returncode == 1
        checks = {c["id"]: c for c in json.loads(r.stdout)["checks"]}
        assert checks["torch"]["status"] == "fail"
        assert "SIGABRT" in checks["torch"]["message"]
    finally:
        shutil.rmtree(Path(site) / "torch")  # with the bytecode its import wrote


def test_record_then_replay_gives_the_same_diagnosis(tmp_path):
    snap = tmp_path / "me.json"
    home = tmp_path / "home"  # a home directory that is not "/" (as it is for root in some containers), and a path under it
    home.mkdir()
    env = {"PYTORCH_MPS_FAST_MATH": "1", "MY_API_TOKEN": "s3cret", "AWS_SECRET_ACCESS_KEY": "x", "DB_PASSWORD": "pw",
           "HOME": str(home), "PYTORCH_KERNEL_CACHE_PATH": f"{home}/.cache/torch/kernels"}
    live = envkit("doctor", "--record", str(snap), "--json", env=env)
    assert live.returncode in (0, 1), live.stderr
    text = snap.read_text()
    data = json.loads(text)
    assert data["envkit_snapshot"] == 1
    assert data["env"].get("PYTORCH_MPS_FAST_MATH") == "1"
    assert "s3cret" not in text and "MY_API_TOKEN" not in text and "DB_PASSWORD" not in text
    assert str(home) not in text
    assert data["env"]["PYTORCH_KERNEL_CACHE_PATH"] == "~/.cache/torch/kernels"  # the home directory written as ~
    replay = envkit("doctor", "--replay", str(snap), "--json")
    a, b = json.loads(live.stdout), json.loads(replay.stdout)
    for key in ("os", "chip", "memory_bytes", "gpus", "torch"):
        assert a["facts"][key] == b["facts"][key], key
    assert [(c["id"], c["status"]) for c in a["checks"]] == [(c["id"], c["status"]) for c in b["checks"]]
    assert a["profile"] == b["profile"]


@pytest.mark.parametrize("content,needle", [
    (None, "snapshot file not found"),
    ("{oops", "not valid JSON (line 1"),
    ('{"hello": 1}', "not an envkit snapshot"),
    ('{"envkit_snapshot": 9}', "version 9 is not supported"),
    ('{"envkit_snapshot": 1, "commands": []}', '"commands" must be an object'),
])
def test_bad_snapshot_is_one_line_exit_2(tmp_path, content, needle):
    path = tmp_path / "snap.json"
    if content is not None:
        path.write_text(content)
    r = envkit("doctor", "--replay", str(path))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_debug_shows_traceback(tmp_path):
    r = envkit("--debug", "doctor", "--replay", str(tmp_path / "missing.json"))
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_a_debug_flag_of_the_users_own_command_is_not_envkits(tmp_path):
    """`--debug` after `--` belongs to the user's script: envkit's error stays one line."""
    r = envkit("exec", "--", "python", "missing_train.py", "--debug", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "script not found: missing_train.py" in r.stderr
    assert "Traceback" in envkit("--debug", "exec", "--", "python", "missing_train.py", cwd=tmp_path).stderr


# Every option that only means something to a Slurm job, with a value sbatch would take: given
# without --slurm it would be dropped without a word, so it is refused (one line naming it).
SLURM_ONLY = [("--nodes", "2"), ("--gpus-per-node", "1"), ("--cpus-per-task", "4"), ("--mem", "64G"), ("--time", "30"),
              ("--partition", "gpu"), ("--account", "lab"), ("--qos", "high"), ("--sbatch-arg", "--constraint=h100"),
              ("--slurm-grace", "60"), ("--no-requeue", None), ("--dry-run", None)]


@pytest.mark.parametrize("command", ["run", "sweep", "exec"])
@pytest.mark.parametrize("flag,value", SLURM_ONLY, ids=[f for f, _ in SLURM_ONLY])
def test_a_slurm_only_option_without_slurm_is_refused(tmp_path, command, flag, value):
    given = [flag] + ([value] if value is not None else [])
    where = {"run": [str(ROOT / "templates" / "train" / "gpt_quick_test.yaml"), "--print-config"],
             "sweep": [str(ROOT / "templates" / "train" / "gpt_quick_test.yaml")], "exec": ["--", "python", "-c", "pass"]}[command]
    if command == "exec":
        r = envkit(command, *given, *where, cwd=tmp_path)
    else:
        r = envkit(command, where[0], *given, *where[1:], cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == (f"envkit: error: {flag}: a Slurm option, given without --slurm "
                                f"(fix: add --slurm to submit the job, or drop {flag})")
    assert not (tmp_path / "runs").exists()


def test_help_does_not_import_torch():
    code = ("import sys\nfrom envkit.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip().endswith("NO-TORCH"), r.stdout + r.stderr
    assert "doctor" in r.stdout and "check" in r.stdout


def test_doctor_examines_the_managed_environment(tmp_path, bare_python):
    """A project set up by `envkit setup` has .envkit/state.json: doctor looks at that Python."""
    (tmp_path / ".envkit").mkdir()
    (tmp_path / ".envkit" / "state.json").write_text(json.dumps({"python": bare_python, "profile": "cpu"}))
    sub = tmp_path / "src"
    sub.mkdir()
    r = envkit("doctor", "--json", "--no-runtime", cwd=sub)
    data = json.loads(r.stdout)
    assert data["facts"]["python"]["executable"] == bare_python
    assert {c["id"]: c["status"] for c in data["checks"]}["torch"] == "fail"


@pytest.mark.parametrize("value", ["abc", "0", "-2", "4 threads"])
def test_doctor_fails_a_thread_count_that_is_not_a_positive_integer(tmp_path, value):
    """OMP_NUM_THREADS=abc is ignored by the libraries (they use their default): a failure with a fix."""
    r = envkit("doctor", "--no-runtime", "--json", cwd=tmp_path, env={"OMP_NUM_THREADS": value})
    check = {c["id"]: c for c in json.loads(r.stdout)["checks"]}["env-vars"]
    assert r.returncode == 1 and check["status"] == "fail"
    assert f"OMP_NUM_THREADS={value!r} is not a positive integer" in check["message"]
    assert "export OMP_NUM_THREADS=" in check["fix"]


def test_doctor_warns_of_more_threads_than_cores(tmp_path):
    cores = os.cpu_count()  # at least the physical cores doctor counts: 4096 is more than either here and in CI
    r = envkit("doctor", "--no-runtime", "--json", cwd=tmp_path, env={"MKL_NUM_THREADS": "4096", "OMP_NUM_THREADS": None})
    check = {c["id"]: c for c in json.loads(r.stdout)["checks"]}["env-vars"]
    assert cores < 4096 and check["status"] == "warn"
    assert "MKL_NUM_THREADS=4096 is more than this machine's" in check["message"] and "cores" in check["message"]
