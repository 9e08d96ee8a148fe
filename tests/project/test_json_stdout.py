"""`--json` is a contract: stdout holds one JSON document and nothing else, whatever the trainer,
a sweep's runs or the user's own script print (their lines go to stderr and the run folder)."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, envkit

# A credential planted where a user might paste one (a note with a private URL): no --json output shows it,
# every command prints its document through envkit.console.print_json, which redacts.
SECRET = "SEKRET-planted-4711"
PLANTED = f"https://ci-user:{SECRET}@data.example.org/set"
QUICK = ["--set", f"experiment.notes=see {PLANTED}", "--set", "training.max_steps=6", "--set", "training.batch_size=16",
         "--set", "logging.every_steps=2", "--set", "eval.every_steps=6", "--set", "eval.accuracy_samples=16",
         "--set", "checkpoint.every_steps=6", "--profile", "cpu"]


def parse(res) -> dict:
    assert res.returncode == 0, res.stderr[-2000:]
    assert SECRET not in res.stdout
    return json.loads(res.stdout)  # fails on any line that is not part of the document


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One quick training with --json and --selftest (its result, and its folder for the commands
    that read runs: runs, monitor)."""
    folder = tmp_path_factory.mktemp("trained")
    res = envkit("run", str(ROOT / "templates" / "train" / "gpt_quick_test.yaml"), "--run-id", "j", "--json", "--selftest",
                 *QUICK, cwd=folder, timeout=900)
    return folder, res


def test_run_json_is_json_alone_and_the_progress_goes_to_stderr(trained):
    _, res = trained
    summary = parse(res)
    assert summary["status"] == "completed" and summary["steps"] == 6
    assert "step 2/6" in res.stderr  # the trainer's lines still reach the user
    assert "envkit selftest" in res.stderr  # and so does the self-test's report


def test_sweep_json_is_json_alone(tmp_path):
    """A grid of one run: its trainer's lines are what could reach stdout (each run of a longer grid prints the same way)."""
    (tmp_path / "c.yaml").write_text((ROOT / "templates" / "train" / "gpt_quick_test.yaml").read_text()
                                     + "\nsweep:\n  grid:\n    experiment.seed: [1]\n")
    res = envkit("sweep", "c.yaml", "--json", *QUICK, cwd=tmp_path, timeout=900)
    out = parse(res)
    assert [r["status"] for r in out["runs"]] == ["completed"]
    assert "step 2/6" in res.stderr  # the run's lines went to stderr


def test_exec_json_is_json_alone_whatever_the_script_prints(tmp_path):
    (tmp_path / "train.py").write_text("print('epoch 1 loss 0.5')\nprint('{not json')\n")
    res = envkit("exec", "--json", "--", "python", "train.py", "--data", PLANTED, cwd=tmp_path, timeout=300)
    out = parse(res)
    assert out["status"] == "completed" and out["run_dir"].startswith(str(tmp_path))
    assert "epoch 1 loss 0.5" in res.stderr  # the script's lines still reach the user
    detached = parse(envkit("exec", "--detach", "--json", "--", "python", "train.py", cwd=tmp_path, timeout=300))
    assert detached["run_dir"].startswith(str(tmp_path)) and detached["pid"] > 0


def test_runs_doctor_check_and_validate_json(trained, tmp_path):
    assert [r["status"] for r in parse(envkit("runs", "--json", cwd=trained[0]))] == ["completed"]
    res = envkit("doctor", "--json", "--no-runtime", cwd=tmp_path)
    assert res.returncode in (0, 1) and {"facts", "checks"} <= set(json.loads(res.stdout))  # 1: a check fails on this machine
    check = parse(envkit("check", "--json", "--require", "python>=3.8", cwd=tmp_path))
    assert check["ok"] is True and [r["requirement"] for r in check["results"]] == ["python>=3.8"]
    valid = parse(envkit("validate", str(ROOT / "templates" / "train" / "gpt_quick_test.yaml"), "--json", cwd=tmp_path))
    assert valid["config"]["model"]["type"] == "gpt"
    planted = parse(envkit("validate", str(ROOT / "templates" / "train" / "gpt_quick_test.yaml"), "--json", *QUICK, cwd=tmp_path))
    assert planted["config"]["experiment"]["notes"] == "see https://data.example.org/set"  # the note stays, its password goes


# ---- every other command that takes --json ---------------------------------------------------------

def test_setup_json_is_json_alone_planning_installing_and_from_a_lock(server, venv, tmp_path):
    """setup's plan is the one document: the installer's lines, "wrote pylock.machine.toml", the self-test's
    report and the next step go to stderr; the same for --lock and for the lock and check commands."""
    common = ("--venv", str(venv), "--index-url", server.url("json"), "--installer", "pip")
    env = {"ENVKIT_CACHE_DIR": str(tmp_path / "cache")}
    plan = parse(envkit("setup", *common, "--dry-run", "--json", cwd=tmp_path, env=env))
    assert plan["versions"] == {"torch": "2.6.0+cpu"} and plan["create_venv"] is False
    res = envkit("setup", *common, "--yes", "--no-selftest", "--json", cwd=tmp_path, env=env, timeout=240)
    assert parse(res)["versions"] == {"torch": "2.6.0+cpu"}
    assert "wrote pylock.machine.toml" in res.stderr and "next: source .envkit/activate" in res.stderr
    # where the environment is, and how a project in another folder uses it (ENVKIT_HOME)
    home = (tmp_path / ".envkit").resolve()
    assert (f"environment: {home} (found by envkit run, exec and selftest in {home.parent} and the folders below it; "
            f"a project elsewhere uses it with: export ENVKIT_HOME={home})\n") in res.stderr
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    activate = f"{venv}/bin/activate"
    assert activate in envkit("env", "--shell", "bash", cwd=elsewhere, env={"ENVKIT_HOME": str(home)}).stdout
    assert activate not in envkit("env", "--shell", "bash", cwd=elsewhere).stdout  # without it: not found from there
    # the self-test runs after the install: the fake torch of the test index fails it (exit 1), and
    # its report is on stderr, not after the plan on stdout
    res = envkit("setup", *common, "--torch", "2.5.1", "--yes", "--json", cwd=tmp_path, env=env, timeout=300)
    assert res.returncode == 1 and "the self-test failed" in res.stderr and "envkit selftest" in res.stderr
    assert json.loads(res.stdout)["versions"] == {"torch": "2.5.1+cpu"}
    again = parse(envkit("setup", "--venv", str(venv), "--lock", "pylock.machine.toml", "--dry-run", "--json", cwd=tmp_path, env=env))
    assert again["versions"]["torch"] == "2.5.1+cpu" and again["nothing_to_do"] is True
    drift = parse(envkit("check", "--lock", "pylock.machine.toml", "--python", str(venv / "bin/python"), "--require", "python>=3.8",
                         "--json", cwd=tmp_path))["drift"]
    assert drift["changed"] is False
    locked = parse(envkit("lock", "--from", "pylock.machine.toml", "--json", cwd=tmp_path, env=env))
    assert [t["torch"] for t in locked["targets"].values()] == ["2.5.1+cpu"] and (tmp_path / "pylock.toml").is_file()


def test_lock_json_is_json_alone_while_it_resolves(tmp_path):
    """`envkit lock` says "resolving ..." and its notes on stderr."""
    import pylock_wheels
    from localindex import LocalIndex

    pytest.importorskip("packaging.pylock")
    with LocalIndex(pylock_wheels.build(tmp_path / "wheels")) as srv:
        res = envkit("lock", "--target", "this", "--target", "macos-arm64", "--torch", "2.13.0", "--index-url",
                     f"{srv.base}/pypi/simple", "--json", cwd=tmp_path, timeout=300,
                     env={"ENVKIT_PYTORCH_INDEX": f"{srv.base}/whl", "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
                          "ENVKIT_CACHE_DIR": str(tmp_path / "cache")})
    out = parse(res)
    assert {t["torch"] for t in out["targets"].values()} == {"2.13.0+cpu", "2.13.0"} and "resolving" in res.stderr


def test_tune_dry_run_json(tmp_path):
    """A budget too short for any measurement: the dry run's JSON, quickly. The JSON alone on stdout
    while rungs, candidates and probes train is checked where they are measured: test_bench_tune.py
    (bench --json, tune --json), test_bench_failures.py (tune --json cut by its budget) and
    test_selftest.py (selftest --quick --json)."""
    tune = parse(envkit("tune", "--model", "mlp", "--seconds", "0.5", "--budget", "1s", "--dry-run", "--json",
                        cwd=tmp_path, timeout=300))
    # A dry run writes nothing; the one measurement begun is cut by the budget (said so, not a failed setting).
    assert tune["path"] is None and tune["runs"] and tune["stopped"] == "budget"
    assert any("budget of 1 s reached" in n for n in tune["notes"]), tune["notes"]


def test_profile_monitor_and_print_config_json(trained, tmp_path):
    assert {p["name"] for p in parse(envkit("profile", "list", "--json", cwd=tmp_path))["profiles"]} >= {"cpu", "m3-max"}
    assert parse(envkit("profile", "show", "cpu", "--json", cwd=tmp_path))["name"] == "cpu"
    assert parse(envkit("profile", "diff", "cpu", "cuda", "--json", cwd=tmp_path))
    config = str(ROOT / "templates" / "train" / "gpt_quick_test.yaml")
    assert parse(envkit("run", config, "--print-config", "--json", *QUICK, cwd=tmp_path))["config"]["training"]["max_steps"] == 6
    assert parse(envkit("monitor", "--json", cwd=trained[0]))["status"] == "completed"
