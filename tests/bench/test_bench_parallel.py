"""The data-parallel rungs of `envkit bench` (cuda + ddp, cuda + fsdp): listed as skipped, with the
reason, where there are fewer than 2 GPUs; and the rung machinery run for real with 2 processes
under torchrun on this CPU (gloo): rank 0 alone reports, at the global rate, and a rung killed at
its timeout leaves none of torchrun's workers behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import snapshot_path
from processes import alive
from envkit.bench.child import MARK
from envkit.bench.clock import PROGRESS
from envkit.bench.runner import child_command, child_env, read_result, run_spec
from envkit.bench.spec import RunResult, RunSpec

PARALLEL = ("cuda + ddp", "cuda + fsdp")


def ladder(snapshot: str, model: str = "gpt", nproc: int | None = None):
    from envkit.bench.context import template_path
    from envkit.bench.ladder import build_ladder
    from envkit.bench.session import fsdp_problem
    from envkit.checks import best_device, run_checks
    from envkit.facts import gather
    from envkit.config.config import load_config

    facts = gather(str(snapshot_path(snapshot)), runtime=True)
    checks = {c.id: c for c in run_checks(facts)}
    problem = fsdp_problem(load_config(template_path(model)), nproc or 2)
    return {r.name: r for r in build_ladder(facts, checks, best_device(facts), model, nproc=nproc, fsdp_problem=problem)}


@pytest.mark.parametrize("snapshot, reason, short, check", [
    ("real_h100", "data parallel needs 2 or more processes, one per GPU: 1 CUDA GPU here", "needs 2+ GPUs (1 here)", None),
    ("linux_no_gpu", "no NVIDIA GPU found (nvidia-smi absent or empty)", "no usable cuda here", "cuda"),
])
def test_the_data_parallel_rungs_are_skipped_with_their_reason_below_two_gpus(snapshot, reason, short, check):
    rungs = ladder(snapshot)
    assert list(rungs)[-2:] == list(PARALLEL)  # after the last single-device rung
    assert [(rungs[n].skip, rungs[n].short, rungs[n].check) for n in PARALLEL] == [(reason, short, check)] * 2


def test_on_two_gpus_the_ddp_rung_runs_with_what_the_rung_before_had_on_every_gpu():
    rungs = ladder("linux_h100")  # 2 x H100
    ddp, fsdp, before = rungs["cuda + ddp"], rungs["cuda + fsdp"], rungs["cuda + cuda graphs"]
    assert (ddp.skip, fsdp.skip) == (None, None)
    assert ddp.settings == {**before.settings, "parallel": "ddp", "nproc": 2} and ddp.nproc == 2
    assert fsdp.settings == {**before.settings, "parallel": "fsdp", "nproc": 2}
    assert ddp.changes == "training.parallel: ddp; 2 processes (torchrun --nproc-per-node 2)"
    # more processes than GPUs: one GPU each cannot be had
    asked = ladder("linux_h100", nproc=4)["cuda + ddp"]
    assert (asked.skip, asked.short) == ("--nproc 4 asks one GPU each, and 2 are here", "--nproc 4 > 2 GPUs")


def test_the_fsdp_rung_of_a_model_with_no_sharding_plan_is_skipped_with_the_trainers_reason():
    rungs = ladder("linux_h100", model="mlp")
    assert rungs["cuda + ddp"].skip is None
    fsdp = rungs["cuda + fsdp"]
    assert fsdp.short == "no sharding plan for this model"
    assert fsdp.skip.startswith("model.type mlp has no sharding plan for training.parallel fsdp")


def test_a_data_parallel_rung_is_scaled_against_the_best_single_gpu_rung():
    from envkit.bench.render import scaling_text
    from envkit.bench.session import scale

    single = [RunResult("cuda fp32", "ok", 400.0), RunResult("cuda + profile", "ok", 1000.0),
              RunResult("cuda + compile", "flagged", 5000.0), RunResult("cpu fp32", "ok", 9000.0)]
    ddp = RunResult("cuda + ddp", "ok", 1870.0, world=2)
    scale(ddp, single, "cuda")
    assert (ddp.scaling_over, ddp.scaling, ddp.efficiency) == ("cuda + profile", pytest.approx(1.87), pytest.approx(0.935))
    assert scaling_text(ddp) == "x1.87 of cuda + profile on 2 GPUs, 94% per GPU"


def tiny_spec(**kw) -> RunSpec:
    from envkit.bench.context import template_path
    from envkit.config.config import load_config

    config = load_config(template_path("mlp")).resolved()
    return RunSpec("cpu + ddp", "cpu", config, batch_size=16, nproc=2, parallel="ddp", warmup_steps=2, threads=1, **kw)


def test_two_processes_under_torchrun_report_once_from_rank_0_at_the_global_rate(tmp_path):
    """The runner's own command line and environment, with 2 CPU processes (gloo). One timed window:
    its rate is what both processes trained in it over its seconds."""
    spec = tiny_spec(seconds=1.0, windows=1)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec.to_dict()))
    proc = subprocess.run(child_command(sys.executable, path, nproc=2), capture_output=True, text=True,
                          env=child_env(spec, dict(os.environ)), timeout=120)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [ln for ln in lines if ln.startswith(MARK)] == [lines[-1]]  # one result line: rank 0's
    assert len([ln for ln in lines if ln.startswith(PROGRESS)]) == 1  # one window, said once
    r = read_result(spec.name, lines)
    assert (r.status, r.world, r.micro_batch) == ("ok", 2, 16)
    assert r.steps >= 2 and r.timed_s > 0
    # the global rate: 16 samples a step on each of the 2 processes (rank 0's alone would be half)
    assert r.per_second * r.timed_s == pytest.approx(r.steps * 16 * 2, rel=1e-6)


def _tree(pid: int) -> set[int]:
    """Every process below pid, from /proc (the test's own reading, not the runner's)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parents.items() if pp == p}
        found |= kids
        todo += list(kids)
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc (Linux)")
def test_a_two_process_rung_killed_at_its_timeout_leaves_no_worker_behind(tmp_path, monkeypatch):
    """torchrun starts each worker in a session of its own: killing torchrun's group alone leaves
    them training. The rung is timed for far longer than its timeout allows; the process tree is
    read all along (not only once training reports), so a slow start still shows its workers. No
    folder of envkit's is left in the temporary folder either (each worker's run folder was)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    seen: set[int] = set()
    done = threading.Event()

    def watch():
        while not done.is_set():
            seen.update(p for p in _tree(os.getpid()) if "envkit" in _cmdline(p))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = run_spec(tiny_spec(seconds=600.0, windows=600), sys.executable, {**os.environ, "TMPDIR": str(scratch)}, timeout=15)
    finally:
        done.set()
        watcher.join()
    assert (result.status, result.note) == ("fail", "timeout")
    assert len(seen) >= 3  # torchrun and its 2 workers
    deadline = time.monotonic() + 10
    while any(alive(p) for p in seen) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in seen if alive(p)] == []
    # torch's own are not envkit's: Inductor's cache folder, and the agent's folder torchrun removes
    # only when it is not SIGKILLed
    assert [p.name for p in scratch.iterdir() if not p.name.startswith(("torchelastic_", "torchinductor_"))] == []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return ""


AGREE = """
import sys, torch.distributed as dist
from envkit.bench.clock import StepClock
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method=sys.argv[2], rank=rank, world_size=2)
clock = StepClock("cpu", warmup_steps=1, seconds=1.0, windows=1)
print([clock.agree(rank == 1), clock.agree(False)], flush=True)  # rank 1's window is up, rank 0's is not; then neither
dist.barrier()
# out without gloo's teardown: two ranks closing their pairs at once once aborted one of them on this
# 2-core box ("terminate called without an active exception", exit -6) after both had answered
import os; os._exit(0)
"""


def test_processes_close_a_window_when_any_of_them_says_its_time_is_up(tmp_path):
    """Each process times its own windows: one that stopped alone would leave the others waiting in
    their next all-reduce. Rank 0 still in its window follows rank 1, whose window is over."""
    init = f"file://{tmp_path / 'rendezvous'}"
    procs = [subprocess.Popen([sys.executable, "-c", AGREE, str(rank), init], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for rank in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-1000:] for _, err in outs]
    assert [out.strip() for out, _ in outs] == ["[True, False]", "[True, False]"]
