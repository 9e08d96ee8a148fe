"""`--slurm` against a real Slurm cluster (tests/slurm_cluster.py: Debian's slurm-wlm and munge,
started here as root; skipped with the reason where they are missing). One node for most tests;
two nodes, each slurmd in its own network namespace, for the rendezvous that crosses hosts.

Every run trains the same small MLP with two gloo processes, so the losses of each scenario
(two nodes, a USR1 warning, a SIGTERM, ...) are compared with one uninterrupted run, step by step.

The scenarios that wait on their jobs (`@scenario`) start together, each in a thread of its own, as
soon as the cluster is up: one after another they kept a test worker waiting about 110 s with a core
idle. Each is the test of its name, which judges what its scenario saw; a failure inside one
is raised in its test."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable

import pytest
import yaml

from conftest import ROOT, envkit
from slurm_cluster import SlurmCluster, missing, missing_netns

pytestmark = pytest.mark.skipif(missing() is not None, reason=str(missing()))

TEMPLATE = str(ROOT / "templates" / "train" / "mlp_quick_test.yaml")
STEPS = 40
SMALL = ["--profile", "cpu", "--set", "device.type=cpu", "--set", f"training.max_steps={STEPS}", "--set", "training.batch_size=8",
         "--set", "dataset.num_samples=2000", "--set", "model.hidden=32", "--set", "eval.every_steps=0",
         "--set", "checkpoint.every_steps=10", "--set", "logging.every_steps=1", "--set", "logging.progress=none"]
JOB_TIMEOUT = 400
# Each step sleeps this long in the scenarios that signal a job mid-run: 40 steps leave seconds between
# the step a test waits for and the end, for the signal to travel (scancel, slurmd, the batch step, the
# ranks) while the other scenarios' jobs load the machine.
PACED = "sleep=0.2"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # 16 CPUs claimed on a 2-core machine: the scenarios' jobs run at once (each mostly sleeps between
    # steps) rather than waiting in Slurm's queue for one another
    with SlurmCluster(tmp_path_factory.mktemp("cluster"), nodes=1, cpus=16) as c:
        yield c


SCENARIOS: dict[str, Callable] = {}


def scenario(fn: Callable) -> Callable:
    """fn(cluster, folder) -> what the test `test_<fn's name>` judges."""
    SCENARIOS[fn.__name__] = fn
    return fn


class Started:
    def __init__(self, futures: dict[str, Future]):
        self.futures = futures

    def result(self, name: str):
        return self.futures[name].result(timeout=2 * JOB_TIMEOUT)

    def settle(self) -> None:
        """Until every scenario has ended, whatever its outcome."""
        wait(list(self.futures.values()), timeout=2 * JOB_TIMEOUT)


@pytest.fixture(scope="module", autouse=True)
def started(request, cluster, tmp_path_factory):
    """The scenarios of the tests collected here, started together (the reference run with them)
    before the first test of the file: the quick tests run while they wait on their jobs."""
    here = {item.originalname for item in request.session.items if item.module is request.module
            and not any(m.args and m.args[0] is True for m in item.iter_markers("skipif"))}
    names = [n for n in SCENARIOS if f"test_{n}" in here]
    if names or "test_run_through_sbatch_completes_with_a_whole_run_folder" in here:
        names = ["reference_run", *names]
    folders = {n: tmp_path_factory.mktemp(n[:40]) for n in names}
    pool = ThreadPoolExecutor(max(1, len(names)))
    futures: dict[str, Future] = {}
    for n in names:
        futures[n] = pool.submit(SCENARIOS[n], cluster, folders[n])
    yield Started(futures)
    pool.shutdown(wait=True)  # before the cluster stops


@pytest.fixture
def seen(request, started):
    """What this test's scenario saw."""
    return started.result(request.node.originalname[len("test_"):])


@pytest.fixture
def reference(started):
    """One node, two processes, never interrupted: (job, run folder, folder) of the run every other scenario must equal."""
    return started.result("reference_run")


def env_for(c: SlurmCluster, **extra) -> dict:
    # the job inherits this environment (sbatch --export=ALL): one OpenMP thread per rank on 2 cores
    return {"SLURM_CONF": str(c.conf), "OMP_NUM_THREADS": "1", "PATH": os.environ["PATH"], **extra}


def submit(c: SlurmCluster, cwd: Path, *args: str, env: dict | None = None) -> tuple[str, Path]:
    r = envkit("run", TEMPLATE, *SMALL, "--slurm", *args, "--json", cwd=cwd, env=env or env_for(c))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    return out["job_id"], Path(out["runs"][0])


def losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r["step"] for r in rows if "loss" in r]
    assert len(steps) == len(set(steps)), f"a step logged twice: {steps}"
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def wait_step(run_dir: Path, step: int, timeout: float = JOB_TIMEOUT) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if (json.loads((run_dir / "heartbeat.json").read_text()).get("step") or 0) >= step:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{run_dir} did not reach step {step}")


def runs_json(c: SlurmCluster, cwd: Path) -> list[dict]:
    r = envkit("runs", "--json", cwd=cwd, env=env_for(c))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@scenario
def reference_run(cluster: SlurmCluster, cwd: Path):
    job, run_dir = submit(cluster, cwd, "--nodes", "1", "--nproc-per-node", "2")
    state = cluster.wait_job(job, timeout=JOB_TIMEOUT)
    assert state["JobState"] == "COMPLETED", (run_dir / "slurm" / f"slurm-{job}.out").read_text()[-3000:]
    return job, run_dir, cwd


def test_dry_run_prints_the_script_and_leaves_nothing(cluster, tmp_path):
    r = envkit("run", TEMPLATE, *SMALL, "--slurm", "--dry-run", "--time", "30", "--partition", "debug",
               "--sbatch-arg=--constraint=fast", cwd=tmp_path, env=env_for(cluster))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("#!/bin/bash") and "#SBATCH --time=30" in r.stdout and "#SBATCH --constraint=fast" in r.stdout
    assert not (tmp_path / "runs").exists()


def test_sweep_dry_run_is_one_array_with_the_parallel_throttle(cluster, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(Path(TEMPLATE).read_text() + "\nsweep:\n  grid:\n    experiment.seed: [0, 1, 2]\n")
    r = envkit("sweep", str(cfg), "--slurm", "--dry-run", "--parallel", "2", cwd=tmp_path, env=env_for(cluster))
    assert r.returncode == 0, r.stderr
    assert "#SBATCH --array=0-2%2" in r.stdout and not (tmp_path / "runs").exists()


def test_a_refused_option_is_sbatch_s_words_and_no_run_folder(cluster, tmp_path):
    r = envkit("run", TEMPLATE, *SMALL, "--slurm", "--partition", "nosuchpartition", cwd=tmp_path, env=env_for(cluster))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "sbatch refused the job" in lines[0] and "partition" in lines[0].lower()
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args, words", [
    (["--nnodes", "2", "--rdzv-endpoint", "h:1"], "--nnodes"),
    (["--nodes", "0"], "--nodes"),
    (["--time", "1:2:3:4"], "--time"),
    (["--time", "1"], "--slurm-grace"),
])
def test_bad_slurm_input_is_one_line(cluster, tmp_path, args, words):
    r = envkit("run", TEMPLATE, *SMALL, "--slurm", *args, cwd=tmp_path, env=env_for(cluster))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists()


def test_slurm_without_sbatch_says_so(tmp_path):
    bare = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin/nonexistent"}
    r = envkit("run", TEMPLATE, *SMALL, "--slurm", cwd=tmp_path, env=bare)
    assert r.returncode == 2 and "sbatch" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_slurm_option_without_slurm_is_refused(tmp_path):
    r = envkit("run", TEMPLATE, *SMALL, "--time", "10", cwd=tmp_path)
    assert r.returncode == 2 and "--time" in r.stderr and "--slurm" in r.stderr


def test_a_run_folder_takes_one_slurm_job_at_a_time(cluster, tmp_path):
    """Two submissions of one run folder at once: one is queued, the other refused in one line naming
    it; the same script submitted by hand trains nothing there and leaves job.json to the owner; a
    job that has ended no longer holds the folder."""
    held = [*SMALL, "--run-id", "dup", "--nproc-per-node", "1", "--slurm", "--sbatch-arg=--hold", "--json"]
    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(lambda _: envkit("run", TEMPLATE, *held, cwd=tmp_path, env=env_for(cluster)), range(2))
    assert sorted([a.returncode, b.returncode]) == [0, 2], (a.stderr, b.stderr)
    ok, refused = (a, b) if a.returncode == 0 else (b, a)
    job, run_dir = json.loads(ok.stdout)["job_id"], Path(json.loads(ok.stdout)["runs"][0])
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and f"run folder {run_dir} already has Slurm job {job} (pending)" in lines[0], lines
    hand = subprocess.run(["sbatch", "--parsable", str(run_dir / "slurm" / "job.sbatch")], env={**os.environ, **env_for(cluster)},
                          capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    assert cluster.scontrol("release", hand).returncode == 0
    state = cluster.wait_job(hand, timeout=JOB_TIMEOUT)
    out = (run_dir / "slurm" / f"slurm-{hand}.out").read_text()
    assert state["JobState"] == "FAILED" and f"belongs to Slurm job {job} (pending): job {hand} leaves it alone" in out, out[-2000:]
    assert json.loads((run_dir / "slurm" / "job.json").read_text())["job_id"] == job
    assert not (run_dir / "config.json").exists()
    subprocess.run(["scancel", job], env=cluster.env, check=True)
    cluster.wait_job(job, timeout=60)
    again = envkit("run", TEMPLATE, *held, cwd=tmp_path, env=env_for(cluster))
    assert again.returncode == 0, again.stderr
    subprocess.run(["scancel", json.loads(again.stdout)["job_id"]], env=cluster.env, check=True)


def test_a_queued_job_trains_the_config_as_submitted(cluster, tmp_path):
    """train.yaml edited while the job waits in the queue: the job trains what was submitted."""
    cfg = tmp_path / "train.yaml"
    data = yaml.safe_load(Path(TEMPLATE).read_text())
    data["training"]["lr"] = 0.001
    cfg.write_text(yaml.safe_dump(data))
    r = envkit("run", str(cfg), *SMALL, "--nproc-per-node", "1", "--slurm", "--sbatch-arg=--hold", "--json", cwd=tmp_path, env=env_for(cluster))
    assert r.returncode == 0, r.stderr
    job, run_dir = json.loads(r.stdout)["job_id"], Path(json.loads(r.stdout)["runs"][0])
    data["training"]["lr"] = 0.5
    cfg.write_text(yaml.safe_dump(data))
    assert cluster.scontrol("release", job).returncode == 0
    state = cluster.wait_job(job, timeout=JOB_TIMEOUT)
    assert state["JobState"] == "COMPLETED", (run_dir / "slurm" / f"slurm-{job}.out").read_text()[-3000:]
    assert json.loads((run_dir / "config.json").read_text())["values"]["training"]["lr"] == 0.001


def test_sweep_submission_hints_report_only_and_its_tasks_keep_the_submitted_grid(cluster, tmp_path):
    """The hint after `sweep --slurm` is a command that trains nothing here; each array task trains its
    combination of the grid as submitted, whatever the file says later."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(Path(TEMPLATE).read_text() + "\nsweep:\n  grid:\n    experiment.seed: [0, 1]\n")
    r = envkit("sweep", str(cfg), "--slurm", "--sbatch-arg=--hold", cwd=tmp_path, env=env_for(cluster))
    assert r.returncode == 0, r.stderr
    job = re.search(r"submitted Slurm array job (\d+): 2 runs; `([^`]+)` shows the table", r.stdout)
    assert job is not None, r.stdout
    assert job.group(2) == f"envkit sweep {cfg} --report-only"
    hint = envkit(*shlex.split(job.group(2))[1:], cwd=tmp_path, env=env_for(cluster))
    assert hint.returncode == 0 and "starting run" not in hint.stdout + hint.stderr, hint.stderr
    cfg.write_text(Path(TEMPLATE).read_text().replace("lr: 3.0e-3", "lr: 0.5") + "\nsweep:\n  grid:\n    experiment.seed: [0, 1]\n")
    [record] = (tmp_path / "runs" / ".slurm").glob("c-*/job.json")
    tasks = json.loads(record.read_text())["tasks"]
    snapshots = {t["argv"][1] for t in tasks}
    assert len(snapshots) == 1 and yaml.safe_load(Path(snapshots.pop()).read_text())["training"]["lr"] == 0.003
    job_ids = [json.loads((Path(t["run_dir"]) / "slurm" / "job.json").read_text())["job_id"] for t in tasks]
    assert job_ids == [f"{job.group(1)}_0", f"{job.group(1)}_1"]
    subprocess.run(["scancel", job.group(1)], env=cluster.env, check=True)


def test_exec_runs_the_users_script_under_the_profile_and_reports_its_exit_code(cluster, tmp_path):
    script = tmp_path / "mytrain.py"
    script.write_text("import os, sys\nprint('threads', os.environ.get('OMP_NUM_THREADS'), 'job', os.environ.get('SLURM_JOB_ID'))\n"
                      "sys.exit(3)\n")
    env = env_for(cluster)
    env.pop("OMP_NUM_THREADS")  # the profile's value must reach the script
    r = envkit("exec", "--profile", "cpu", "--slurm", "--json", "--", sys.executable, str(script), cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    sub = json.loads(r.stdout)
    run_dir = Path(sub["runs"][0])
    state = cluster.wait_job(sub["job_id"], timeout=JOB_TIMEOUT)
    assert state["JobState"] == "FAILED"
    log = (run_dir / "train.log").read_text()
    assert f"job {sub['job_id']}" in log and "threads None" not in log
    [row] = runs_json(cluster, tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["exit_code"] == 3 and row["status"] == "failed" and row["slurm"]["job_id"] == sub["job_id"]


def test_run_through_sbatch_completes_with_a_whole_run_folder(cluster, reference):
    job, run_dir, cwd = reference
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == STEPS and summary["world_size"] == 2
    for name in ("config.json", "environment.json", "train.log", "metrics.jsonl", "slurm/job.sbatch", f"slurm/slurm-{job}.out"):
        assert (run_dir / name).is_file(), name
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir())[-1] == f"step_{STEPS:08d}.pt"
    script = (run_dir / "slurm" / "job.sbatch").read_text()
    assert "#SBATCH --signal=B:USR1@120" in script and "#SBATCH --requeue" in script
    assert "srun --ntasks-per-node=1" in script and "SLURM_JOB_NUM_NODES" in script
    [row] = runs_json(cluster, cwd)
    assert row["status"] == "completed" and row["slurm"]["job_id"] == job and row["slurm"]["state"] == "COMPLETED"
    table = envkit("runs", cwd=cwd, env=env_for(cluster)).stdout
    assert "slurm job" in table and f"{job} completed" in table


def usr1_warning(cluster: SlurmCluster, job: str) -> None:
    """What Slurm sends GRACE seconds before the time limit: SIGUSR1 to the batch step only."""
    subprocess.run(["scancel", "--signal=USR1", "--batch", job], env=cluster.env, check=True)


@scenario
def a_signalled_job_checkpoints_requeues_and_resumes_exactly(cluster: SlurmCluster, tmp_path: Path):
    job, run_dir = submit(cluster, tmp_path, "--nodes", "1", "--nproc-per-node", "2",
                          env=env_for(cluster, ENVKIT_TRAIN_INJECT=PACED))
    wait_step(run_dir, 6)
    usr1_warning(cluster, job)
    cluster.release_requeued(job)
    return job, run_dir, tmp_path, cluster.wait_job(job, timeout=JOB_TIMEOUT)


def test_a_signalled_job_checkpoints_requeues_and_resumes_exactly(cluster, reference, seen):
    """USR1 as before a time limit: the run checkpoints, the job requeues itself and resumes."""
    ref = losses(reference[1])
    job, run_dir, tmp_path, state = seen
    out = (run_dir / "slurm" / f"slurm-{job}.out").read_text()
    assert state["JobState"] == "COMPLETED", (state.get("Reason"), out[-3000:])
    assert int(state["Restarts"]) >= 1, out[-3000:]
    log = (run_dir / "train.log").read_text()
    assert "interrupted at step" in log and "checkpoint written" in log
    assert losses(run_dir) == ref  # every step, once, with the loss of the run never stopped
    [row] = runs_json(cluster, tmp_path)
    assert row["status"] == "completed" and row["slurm"]["restarts"] >= 1


def wait_gone(cluster: SlurmCluster, job: str, timeout: float = 120) -> dict:
    """Until no process of the job is left on the node (its batch step has done whatever it does at
    the end), then Slurm's view of the job."""
    end = time.monotonic() + timeout
    while cluster.job_pids(job) and time.monotonic() < end:
        time.sleep(0.3)
    time.sleep(1)  # slurmctld hears of the batch step's end
    return cluster.job(job)


@scenario
def scancel_ends_the_run_with_its_checkpoint_and_no_requeue(cluster: SlurmCluster, tmp_path: Path):
    job, run_dir = submit(cluster, tmp_path, "--nodes", "1", "--nproc-per-node", "1",
                          env=env_for(cluster, ENVKIT_TRAIN_INJECT=PACED))
    wait_step(run_dir, 4)
    subprocess.run(["scancel", job], env=cluster.env, check=True)
    return job, run_dir, tmp_path, wait_gone(cluster, job)


def test_scancel_ends_the_run_with_its_checkpoint_and_no_requeue(cluster, seen):
    """A user's plain `scancel` (SIGTERM to the job, no SIGUSR1 before it) cancels: the run stops at
    a checkpoint as interrupted, and the job stays cancelled (it used to requeue itself and train on)."""
    job, run_dir, tmp_path, state = seen
    out = (run_dir / "slurm" / f"slurm-{job}.out").read_text()
    assert state["JobState"] == "CANCELLED" and int(state["Restarts"]) == 0, out[-3000:]
    assert f"job {job} cancelled (SIGTERM without Slurm's warning" in out and "requeueing" not in out, out[-1500:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["steps"] < STEPS
    assert (run_dir / "checkpoints" / f"step_{summary['steps']:08d}.pt").is_file()
    [row] = runs_json(cluster, tmp_path)
    assert row["status"] == "interrupted"


@scenario
def a_task_requeued_by_slurm_is_left_to_slurm(cluster: SlurmCluster, tmp_path: Path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(Path(TEMPLATE).read_text() + "\nsweep:\n  grid:\n    experiment.seed: [0]\n")
    small = [a for a in SMALL if a != "--profile" and a != "cpu"]
    r = envkit("sweep", str(cfg), "--profile", "cpu", *small, "--slurm", "--json", cwd=tmp_path,
               env=env_for(cluster, ENVKIT_TRAIN_INJECT=PACED))
    assert r.returncode == 0, r.stderr
    sub = json.loads(r.stdout)
    task, run_dir = f"{sub['job_id']}_0", Path(sub["runs"][0])
    wait_step(run_dir, 4)
    assert cluster.scontrol("requeue", task).returncode == 0
    cluster.release_requeued(task)
    return task, run_dir, tmp_path, cluster.wait_job(task, timeout=JOB_TIMEOUT)


def test_a_task_requeued_by_slurm_is_left_to_slurm(seen):
    """`scontrol requeue JOB_TASK` by an admin: the task resumes when Slurm starts it again; its batch
    step neither requeues it a second time nor tells anyone to resubmit the whole array."""
    task, run_dir, tmp_path, state = seen
    [out_file] = (tmp_path / "runs" / ".slurm").glob(f"c-*/slurm-{task}.out")
    out = out_file.read_text()
    assert state["JobState"] == "COMPLETED" and int(state["Restarts"]) == 1, out[-3000:]
    assert "scontrol requeue failed" not in out and "job.sbatch" not in out, out[-3000:]  # no second requeue, no whole-array advice
    assert f"Slurm has requeued job {task} itself" in out
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"


@scenario
def stop_asks_the_job_to_checkpoint_and_does_not_requeue(cluster: SlurmCluster, tmp_path: Path):
    job, run_dir = submit(cluster, tmp_path, "--nodes", "1", "--nproc-per-node", "2",
                          env=env_for(cluster, ENVKIT_TRAIN_INJECT=PACED))
    wait_step(run_dir, 4)
    r = envkit("stop", str(run_dir), "--grace", "120", cwd=tmp_path, env=env_for(cluster))
    return r, run_dir, cluster.wait_job(job, timeout=60)


def test_stop_asks_the_job_to_checkpoint_and_does_not_requeue(seen):
    r, run_dir, state = seen
    assert r.returncode == 0 and "checkpointed and ended" in r.stdout, r.stdout + r.stderr
    assert state["JobState"] == "COMPLETED" and int(state["Restarts"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["steps"] < STEPS
    assert (run_dir / "checkpoints" / f"step_{summary['steps']:08d}.pt").is_file()


@scenario
def sweep_runs_as_one_array_job_and_the_local_sweep_trains_nothing(cluster: SlurmCluster, tmp_path: Path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(Path(TEMPLATE).read_text() + "\nsweep:\n  grid:\n    experiment.seed: [0, 1]\n    training.lr: [0.001, 0.002]\n")
    small = [a for a in SMALL if a != "--profile" and a != "cpu"]
    r = envkit("sweep", str(cfg), "--profile", "cpu", *small, "--slurm", "--json", cwd=tmp_path, env=env_for(cluster))
    assert r.returncode == 0, r.stderr
    sub = json.loads(r.stdout)
    assert len(sub["runs"]) == 4
    job = sub["job_id"]
    end = time.monotonic() + JOB_TIMEOUT
    while time.monotonic() < end and subprocess.run(["squeue", "-h", "-j", job], env=cluster.env, capture_output=True,
                                                      text=True).stdout.strip():
        time.sleep(0.5)
    again = envkit("sweep", str(cfg), "--profile", "cpu", *small, "--json", cwd=tmp_path, env=env_for(cluster))
    resubmit = envkit("sweep", str(cfg), "--profile", "cpu", *small, "--slurm", cwd=tmp_path, env=env_for(cluster))
    return again, resubmit


def test_sweep_runs_as_one_array_job_and_the_local_sweep_trains_nothing(seen):
    again, resubmit = seen
    assert again.returncode == 0, again.stderr[-3000:]
    table = json.loads(again.stdout)
    assert [r["status"] for r in table["runs"]] == ["completed"] * 4
    assert "starting run" not in again.stderr and "resuming" not in again.stderr  # nothing trained again
    assert resubmit.returncode == 0 and "nothing to submit" in resubmit.stdout + resubmit.stderr


@scenario
def exec_gets_the_warning_and_is_requeued_into_the_same_run_folder(cluster: SlurmCluster, tmp_path: Path):
    script = tmp_path / "mytrain.py"
    script.write_text(
        "import os, signal, sys, time, pathlib\n"
        "ck = pathlib.Path(os.environ['ENVKIT_RUN_DIR']) / 'my.ckpt'\n"
        "if ck.exists():\n    print('resumed from', ck.read_text()); sys.exit(0)\n"
        "def save(signum, frame):\n    ck.write_text('step 7'); print('saved on', signum, flush=True); sys.exit(0)\n"
        "signal.signal(signal.SIGUSR1, save)\n"
        "print('training', flush=True)\n"
        "time.sleep(300)\n")
    r = envkit("exec", "--profile", "cpu", "--slurm", "--json", "--", sys.executable, str(script), cwd=tmp_path, env=env_for(cluster))
    assert r.returncode == 0, r.stderr
    sub = json.loads(r.stdout)
    run_dir = Path(sub["runs"][0])
    end = time.monotonic() + JOB_TIMEOUT
    while time.monotonic() < end and "training" not in ((run_dir / "train.log").read_text() if (run_dir / "train.log").exists() else ""):
        time.sleep(0.2)
    subprocess.run(["scancel", "--signal=USR1", "--batch", sub["job_id"]], env=cluster.env, check=True)
    cluster.release_requeued(sub["job_id"])
    return run_dir, cluster.wait_job(sub["job_id"], timeout=JOB_TIMEOUT)


def test_exec_gets_the_warning_and_is_requeued_into_the_same_run_folder(seen):
    """The user's script owns its checkpoints: it gets SIGUSR1, saves and exits; the job requeues
    and runs it again in the same run folder, where it finds what it saved."""
    run_dir, state = seen
    log = (run_dir / "train.log").read_text()
    assert state["JobState"] == "COMPLETED" and int(state["Restarts"]) == 1, log[-2000:]
    assert "saved on 10" in log and "resumed from step 7" in log
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"


@scenario
def two_nodes_meet_and_train_like_one_node(cluster: SlurmCluster, tmp_path: Path):
    """A cluster of its own: `cluster` is the one-node one, which it leaves alone."""
    with SlurmCluster(tmp_path / "two", nodes=2) as c:
        pre = envkit("doctor", "--slurm", "--nodes", "2", "--json", cwd=tmp_path, env=env_for(c))
        job, run_dir = submit(c, tmp_path, "--nodes", "2", "--nproc-per-node", "1")
        return c.node_addr(0), pre, job, run_dir, c.wait_job(job, timeout=JOB_TIMEOUT)


@pytest.mark.skipif(missing() is None and missing_netns() is not None, reason=str(missing_netns()))
def test_two_nodes_meet_and_train_like_one_node(reference, seen):
    """Two slurmd, each in its own network namespace: node names that resolve nowhere, a rendezvous
    at node 0's NodeAddr, gloo on the interface towards it; the losses equal one node's two processes."""
    addr, pre, job, run_dir, state = seen
    assert pre.returncode == 0, pre.stdout + pre.stderr
    rdzv = json.loads(pre.stdout)["checks"][-1]
    assert rdzv["id"] == "rendezvous" and rdzv["message"].startswith(f"2 nodes reached node 0 at {addr}:")
    out = (run_dir / "slurm" / f"slurm-{job}.out").read_text()
    assert state["JobState"] == "COMPLETED", out[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["status"] == "completed"
    assert "node 1: training process exited with code 0" in out
    # Not bit-equal: each node gives its one process the cpu profile's 2 OpenMP threads, where the
    # one-node run splits them 1 + 1, so matmuls sum in another order (differences near 1e-6).
    ref = losses(reference[1])
    assert losses(run_dir) == {step: pytest.approx(loss, rel=1e-5, abs=1e-6) for step, loss in ref.items()}


def test_doctor_slurm_passes_and_then_names_the_stopped_controller(cluster, started, tmp_path):
    started.settle()  # it stops the controller: after every scenario's last command
    r = envkit("doctor", "--slurm", "--json", cwd=tmp_path, env=env_for(cluster))
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert [c["id"] for c in report["checks"]] == ["slurm-commands", "slurmctld", "partition", "nodes-run-envkit", "rendezvous"]
    assert all(c["status"] == "pass" for c in report["checks"]) and report["ok"]
    bad = envkit("doctor", "--slurm", "--partition", "nosuch", cwd=tmp_path, env=env_for(cluster))
    assert bad.returncode == 1 and "[FAIL] partition: partition 'nosuch' does not exist (partitions: debug)" in bad.stdout
    cluster.stop_ctld()
    try:
        down = envkit("doctor", "--slurm", cwd=tmp_path, env=env_for(cluster))
    finally:
        cluster.start_ctld()
    assert down.returncode == 1 and "[FAIL] slurmctld: the controller does not answer" in down.stdout
    assert "fix: check SLURM_CONF" in down.stdout and "not ready" in down.stdout
