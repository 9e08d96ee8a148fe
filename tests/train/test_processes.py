"""Checkpoints across process counts, on the CPU (gloo through torchrun): with
training.global_batch_size the batch per process follows the process count, and each step trains the
same global batch (the sampler's slices of it, data/bundle.py), so a checkpoint of 2 processes
resumes on 1 and on 4, a sharded (fsdp) one on 1, and one of 1 process on 2, each to the losses of
the run that never stopped. A deterministic run of 2 processes is reproduced by `envkit reproduce`
with its process count, identical at every logged step.

Tolerance (test_fsdp.py's reasoning): the same samples, but summed in another order: one process
sums the 16 rows' losses and gradients at once, two sum 8 each and average the two (gloo adds the
same fp32 numbers in another order). Measured: the 6-decimal losses differ by at most 1e-6 over 8
steps; rel 1e-5 fails on any real difference (another sample in a step, a data position off by one,
a gradient not averaged changes the 3rd digit).

Three runs are trained once for the module (2 processes ddp, deterministic; 2 processes fsdp; 1
process), 8 steps with checkpoints at 4 and 8; each resume test copies one and resumes the copy
from its step-4 checkpoint (`--resume PATH`) on another process count: 4 torchrun starts in all, one
of them of 4 processes (the slow one on 2 cores: tiny steps)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from train_runs import close, losses, summary
from conftest import ROOT, envkit

GPT = str(ROOT / "templates" / "train" / "gpt_quick_test.yaml")
GLOBAL = 16
BASE = ["--profile", "cpu", "--set", "training.max_steps=8", "--set", f"training.global_batch_size={GLOBAL}",
        "--set", "eval.every_steps=0", "--set", "logging.every_steps=1", "--set", "checkpoint.every_steps=4",
        "--set", "logging.progress=none"]
REL = 1e-5
SOURCES = {"ddp": ["--nproc-per-node", "2", "--set", "training.deterministic=true"],
           "fsdp": ["--nproc-per-node", "2", "--set", "training.parallel=fsdp"],
           "one": []}


def _run(project: Path, run_id: str, *args: str, env: dict | None = None):
    return envkit("run", GPT, *BASE, "--run-id", run_id, *args, cwd=project, timeout=600, env=env)


def _dir(project: Path, run_id: str) -> Path:
    return project / "runs" / "gpt-quick-test" / run_id


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    """A project holding the three uninterrupted runs (SOURCES), 8 steps each."""
    project = tmp_path_factory.mktemp("procs")
    for run_id, args in SOURCES.items():
        res = _run(project, run_id, *args)
        assert res.returncode == 0, (run_id, res.stderr[-3000:])
    return project


def test_the_global_batch_is_the_same_samples_at_any_process_count(sources):
    """2 processes of 8 (ddp or fsdp) and 1 of 16 train the same steps: the same 16 samples each step,
    and the logged loss is the whole batch's (the mean over the processes of their equal shares)."""
    one = losses(_dir(sources, "one"))
    assert sorted(one) == list(range(1, 9)) and one[8] < one[1]  # it learned
    for run_id in ("ddp", "fsdp"):
        close(losses(_dir(sources, run_id)), one, range(1, 9), REL)
    for run_id, per, world in (("ddp", 8, 2), ("fsdp", 8, 2), ("one", 16, 1)):
        d = _dir(sources, run_id)
        s = summary(d)
        assert s["world_size"] == world and s["derived"]["training.batch_size"] == per, (run_id, s["derived"])
        assert f"training gpt for 8 steps ({per} x 1 accum x {world} proc" in (d / "train.log").read_text()
    # the config hash leaves the derived batch out: every run's checkpoints resume at any process count
    assert len({summary(_dir(sources, r))["config_hash"] for r in SOURCES}) == 1


@pytest.mark.parametrize("source,checkpoint,args,said", [
    ("ddp", "step_00000004.pt", [], "written by 2 processes, resumed on 1: weights and optimizer state loaded; "
     "global batch 16 as before (2 processes x 8, now 1 process x 16)"),
    ("fsdp", "step_00000004.dcp", [], "written by 2 processes, resumed on 1: weights and optimizer state resharded; "
     "global batch 16 as before (2 processes x 8, now 1 process x 16)"),
    ("one", "step_00000004.pt", ["--nproc-per-node", "2"], "written by 1 process, resumed on 2: weights and optimizer state "
     "loaded; global batch 16 as before (1 process x 16, now 2 processes x 8)"),
])
def test_a_checkpoint_resumes_exactly_on_another_process_count(tmp_path, sources, source, checkpoint, args, said):
    """The copy resumes from step 4 and trains 5..8 again: the losses of the run that never stopped.
    Fewer processes (2 to 1, DDP's file and FSDP's shards) and more (1 to 2); 2 to 4, once here too,
    split the batch by the same arithmetic as 1 to 2 and started 5 processes on 2 cores (15 s of CPU)."""
    shutil.copytree(_dir(sources, source), _dir(tmp_path, source))
    d = _dir(tmp_path, source)
    res = _run(tmp_path, source, "--resume", str(d / "checkpoints" / checkpoint), *args)
    assert res.returncode == 0, res.stderr[-3000:]
    s = summary(d)
    assert s["status"] == "completed" and s["steps"] == 8 and s["resumed_from"] == checkpoint, s
    log = (d / "train.log").read_text()
    line = next(x for x in log.splitlines() if f"checkpoint {checkpoint} was written by" in x)
    assert said in line and line.endswith("the steps go on as they would have"), line
    assert "from step 4;" in log  # it did train the steps again
    close(losses(d), losses(_dir(sources, source)), range(5, 9), REL)


def test_a_deterministic_run_of_two_processes_reproduces_identically(sources):
    """`envkit reproduce` trains with the run's process count (record.json keeps it): the same
    splits and sums, so every logged value is the same float. Without it the reproduction trained
    one process, whose sums differ in the last bits (loss off at step 2)."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("reproduce --venv needs the tests to run in a venv (the run's lock is that venv's)")
    d = _dir(sources, "ddp")
    record = json.loads((d / "record.json").read_text())
    assert record["processes"] == {"world": 2, "nodes": 1} and record["determinism"] == {"deterministic": True}
    # this machine wrote and sealed the folder: no question asked (envkit's cache holds the key, so it is not moved)
    r = envkit("reproduce", str(d), "--venv", sys.prefix, "--json", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["outcome"] == "same" and out["identical_required"], out
    assert out["facts"]["reproduction"]["processes"] == 2 and out["steps_compared"] == 8
    assert {name for name, m in out["metrics"].items() if not m["identical"]} == set(), out["metrics"]
    assert "--nproc-per-node 2" in r.stderr
    # the two runs' rows, read here too: every loss and gradient norm the same float
    repro = Path(out["path"])
    rows = [{k: v for k, v in json.loads(x).items() if k in ("step", "loss", "grad_norm")}
            for x in (repro / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{k: v for k, v in json.loads(x).items() if k in ("step", "loss", "grad_norm")}
                    for x in (d / "metrics.jsonl").read_text().splitlines()]


def test_a_global_batch_that_does_not_split_is_refused_before_anything_starts(tmp_path):
    res = _run(tmp_path, "odd", "--nproc-per-node", "2", "--set", "training.global_batch_size=15")
    assert res.returncode == 2, res.stderr[-2000:]
    errors = [line for line in res.stderr.splitlines() if line.startswith("envkit: error")]
    assert errors == ["envkit: error: --set training.global_batch_size: training.global_batch_size 15 does not split over 2 "
                      "processes x grad_accum 1 (a multiple of 2 does) (fix: --set training.global_batch_size=16, or another "
                      "--nproc-per-node or training.grad_accum)"], res.stderr
    assert not (tmp_path / "runs").exists()


def test_the_batch_per_process_is_derived_outside_the_hash_and_a_batch_size_beside_it_is_said():
    from envkit.config.config import load_config, per_process_batch

    cfg = load_config(None, overrides=["training.global_batch_size=48", "training.grad_accum=2"])
    assert [per_process_batch(cfg, world).training.batch_size for world in (1, 2, 3, 4, 6, 8)] == [24, 12, 8, 6, 4, 3]
    assert {per_process_batch(cfg, world).config_hash() for world in (1, 2, 4)} == {cfg.config_hash()}
    assert per_process_batch(cfg, 4).derived == {"training.batch_size": 6}
    plain = load_config(None, overrides=["training.batch_size=8"])
    assert per_process_batch(plain, 4) is plain  # without global_batch_size batch_size stays per process
    both = load_config(None, data={"training": {"batch_size": 64, "global_batch_size": 16}})
    assert both.notes == ("<defaults>: training.batch_size: 64 has no effect: training.global_batch_size is 16 (<defaults>), and "
                          "global_batch_size sets the batch per process from the process count",), both.notes


def test_a_resume_on_another_process_count_keeps_its_micro_batch_unless_an_out_of_memory_split_it():
    from envkit.train.run.state import TrainState

    saved = {"step": 4, "data": {"batches": 4}, "world": 2, "loop": {"micro_batch": 8, "grad_accum": 1}}
    state = TrainState(micro_batch=16, grad_accum=1)
    state.restore(saved, batch_size=16, grad_accum=1, world=1)
    assert (state.micro_batch, state.grad_accum, state.batches) == (16, 1, 4)  # 4 global batches of 16, as written
    # 8 per process split in two after an out of memory: 4 steps of 2 micro-batches of 4 x 2 processes, 32 samples
    split = {**saved, "data": {"batches": 8}, "loop": {"micro_batch": 4, "grad_accum": 2}}
    state = TrainState(micro_batch=16, grad_accum=1)
    state.restore(split, batch_size=16, grad_accum=1, world=1)
    assert (state.micro_batch, state.grad_accum, state.batches) == (4, 4, 16)  # 32 samples: 16 micro-batches of 4


def test_a_record_asking_for_an_impossible_process_count_is_refused():
    from envkit.runfolder.bounded import RunFolderError
    from envkit.runfolder.records import RunRecord

    assert RunRecord.from_json({"kind": "run", "processes": {"world": 2, "nodes": 1}}, "record.json").processes == 2
    assert RunRecord.from_json({"kind": "run"}, "record.json").processes is None  # a record from before it kept the count
    with pytest.raises(RunFolderError, match="processes.world"):
        RunRecord.from_json({"kind": "run", "processes": {"world": 10**9}}, "record.json")
