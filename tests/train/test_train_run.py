"""The trainer for real on CPU: the templates learn, resume is exact, the run folder is complete,
NaN is caught, and runs/monitor/plot read it. Runs `envkit run` in a subprocess as a user would.

The quick-test templates' stated targets are tested in test_train_templates.py (a file of their
own: the gpt one is the suite's longest test, and pytest-xdist hands out whole files).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, TESTS, envkit

TEMPLATES = ROOT / "templates" / "train"


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def losses(run_dir: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r]


def run(tmp_path, template, *args, run_id="r", env=None):
    res = envkit("run", str(TEMPLATES / f"{template}.yaml"), "--run-id", run_id, "--profile", "cpu", *args,
                 cwd=tmp_path, env=env, timeout=1800)  # 35 s alone on 2 cores, 300 s in the loaded suite: 6x that
    return res


def exp_dir(tmp_path, template):
    name = template.replace("_", "-")
    return tmp_path / "runs" / name


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """One short mlp run (10 steps, evaluated at 5 and 10) with the device self-test first, steps 3-5
    profiled and secrets in its environment, trained once for the tests that read what such a run
    leaves (each `envkit run` costs seconds of start-up): (project folder, the command's result)."""
    d = tmp_path_factory.mktemp("short")
    res = run(d, "mlp_quick_test", "--selftest", "--profile-steps", "3:5", "--set", "training.max_steps=10", "--set", "eval.every_steps=5",
              env={"MY_API_TOKEN": "hunter2", "AWS_SECRET_ACCESS_KEY": "x", "DB_PASSWORD": "y", "HARMLESS_VAR": "ok"})
    assert res.returncode == 0, res.stderr[-2000:]
    return d, res


def test_environment_json_has_no_secrets(short_run):
    text = (exp_dir(short_run[0], "mlp_quick_test") / "r" / "environment.json").read_text()
    assert "hunter2" not in text and "MY_API_TOKEN" not in text and "DB_PASSWORD" not in text
    assert "HARMLESS_VAR" not in text  # only the allow-list of envkit/data/recorded_env.toml is recorded
    assert '"PYTHONUNBUFFERED": "1"' in text


RESUME = ["--set", "training.max_steps=30", "--set", "training.batch_size=16", "--set", "logging.every_steps=1", "--set", "eval.every_steps=10",
          "--set", "checkpoint.every_steps=7", "--set", "model.dropout=0.1", "--set", "training.warmup_steps=5",
          "--set", "eval.accuracy_samples=16", "--set", "logging.progress=none"]


def test_exact_resume_is_bit_identical(tmp_path):
    """Shrunk gpt quick test (30 steps, dropout on so the RNG matters), stopped at step 13
    (between checkpoints: --stop-after writes one), then resumed with the default --resume auto."""
    assert run(tmp_path, "gpt_quick_test", *RESUME, run_id="straight").returncode == 0
    first = run(tmp_path, "gpt_quick_test", *RESUME, "--stop-after", "13", run_id="stopped")
    assert first.returncode == 0, first.stderr[-2000:]
    d = exp_dir(tmp_path, "gpt_quick_test")
    assert summary(d / "stopped")["status"] == "stopped" and summary(d / "stopped")["steps"] == 13
    again = run(tmp_path, "gpt_quick_test", *RESUME, run_id="stopped")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming" in again.stderr
    a, b = losses(d / "straight"), losses(d / "stopped")
    assert [s for s, _ in a] == list(range(1, 31)) == [s for s, _ in b]
    assert a == b  # bit for bit: same floats
    assert summary(d / "stopped")["resumed_from"] == "step_00000013.pt"
    assert summary(d / "stopped")["best_val_loss"] == summary(d / "straight")["best_val_loss"]


def test_resume_auto_picks_newest_unfinished_run_and_skips_bad_checkpoint(tmp_path):
    args = ["--set", "training.max_steps=12", "--set", "checkpoint.every_steps=4", "--set", "logging.every_steps=1",
            "--set", "eval.every_steps=0", "--set", "checkpoint.keep_last=3"]
    res = envkit("run", str(TEMPLATES / "mlp_quick_test.yaml"), "--profile", "cpu", *args, "--stop-after", "9", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    (run_dir,) = list((tmp_path / "runs" / "mlp-quick-test").iterdir())
    ckpts = sorted((run_dir / "checkpoints").iterdir())
    assert [p.name for p in ckpts] == ["step_00000004.pt", "step_00000008.pt", "step_00000009.pt"]
    ckpts[-1].write_bytes(b"truncated")  # the newest is broken: the one before is used
    res = envkit("run", str(TEMPLATES / "mlp_quick_test.yaml"), "--profile", "cpu", *args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"resuming unfinished run {run_dir.name}" in res.stderr
    s = summary(run_dir)
    assert s["status"] == "completed" and s["resumed_from"] == "step_00000008.pt"
    assert "skipping unreadable checkpoint step_00000009.pt" in (run_dir / "train.log").read_text()
    # a finished run is not resumed: the next `envkit run` starts a new one
    res = envkit("run", str(TEMPLATES / "mlp_quick_test.yaml"), "--profile", "cpu", *args, "--stop-after", "1", cwd=tmp_path)
    assert res.returncode == 0
    assert len(list((tmp_path / "runs" / "mlp-quick-test").iterdir())) == 2


def test_text_dataset_byte_and_char(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("the quick brown fox jumps over the lazy dog. " * 200)
    (corpus / "b.txt").write_text("pack my box with five dozen liquor jugs! " * 200)
    y = tmp_path / "text.yaml"
    y.write_text("experiment:\n  name: text\ndataset:\n  type: text\n  path: corpus\n  level: byte\n"
                 "model:\n  type: gpt\n  n_layer: 1\n  n_embd: 32\n  n_head: 2\n  block_size: 32\n"
                 "training:\n  max_steps: 60\n  batch_size: 16\n  lr: 0.003\neval:\n  every_steps: 60\n  batches: 4\n"
                 "logging:\n  every_steps: 20\n")
    res = envkit("run", str(y), "--profile", "cpu", "--run-id", "b", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    s = summary(tmp_path / "runs" / "text" / "b")
    assert s["best_val_loss"] < s["baseline_loss"], s
    res = envkit("run", str(y), "--profile", "cpu", "--run-id", "c", "--set", "dataset.level=char", "--set", "training.max_steps=60",
                 cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    s = summary(tmp_path / "runs" / "text" / "c")
    # char level: one token per character, the vocabulary is the corpus's distinct characters
    text = (corpus / "a.txt").read_text() + (corpus / "b.txt").read_text()
    assert f"text: {len(text)} char tokens, vocab {len(set(text))}" in (tmp_path / "runs" / "text" / "c" / "train.log").read_text()
    assert f"text: {len(text.encode())} byte tokens, vocab 256" in (tmp_path / "runs" / "text" / "b" / "train.log").read_text()
    assert s["status"] == "completed" and s["best_val_loss"] < s["baseline_loss"], s


def test_runs_monitor_plot(tmp_path, short_run):
    shutil.copytree(short_run[0] / "runs", tmp_path / "runs")  # a copy: this test rewrites the run's files
    res = envkit("runs", "--json", cwd=tmp_path)
    (row,) = json.loads(res.stdout)
    assert row["status"] == "completed" and row["step"] == 10 and row["best_val_loss"] is not None
    table = envkit("runs", cwd=tmp_path).stdout
    assert "mlp-quick-test" in table and "completed" in table
    res = envkit("monitor", "--once", cwd=tmp_path)
    assert res.returncode == 0 and "completed" in res.stdout
    # a run that left no summary and whose owner lock nothing holds is "killed": the one who notices
    # writes its summary.json, marked as written after the fact
    d = exp_dir(tmp_path, "mlp_quick_test") / "r"
    (d / "summary.json").unlink()
    beat = json.loads((d / "heartbeat.json").read_text())
    beat.update(status="running", pid=2 ** 22 + 12345)
    (d / "heartbeat.json").write_text(json.dumps(beat))
    res = envkit("monitor", str(d), "--once", cwd=tmp_path)
    assert res.returncode == 1 and "killed" in res.stdout
    after = summary(d)
    assert after["status"] == "killed" and after["written_after_the_fact"] is True and after["noticed_by"] == "envkit monitor"
    # a folder without an owner lock (an older envkit's) is judged by its heartbeat's PID: "dead" when
    # that process is gone, "stalled" when the heartbeat is old
    (d / "summary.json").unlink()
    (d / ".owner.lock").unlink()
    res = envkit("monitor", str(d), "--once", cwd=tmp_path)
    assert res.returncode == 1 and "dead" in res.stdout
    beat.update(pid=os.getpid(), updated_at=beat["updated_at"] - 3600)
    (d / "heartbeat.json").write_text(json.dumps(beat))
    res = envkit("monitor", str(d), "--once", cwd=tmp_path)
    assert res.returncode == 1 and "stalled" in res.stdout
    res = envkit("plot", str(d), cwd=tmp_path)  # matplotlib comes with the test extra
    assert res.returncode == 0 and (d / "curves.png").is_file() and (d / "curves.png").stat().st_size > 10_000
    # without matplotlib (a module of that name that fails to import, first on the path): one line naming the extra
    shadow = tmp_path / "no-matplotlib"
    shadow.mkdir()
    (shadow / "matplotlib.py").write_text("raise ImportError('No module named matplotlib', name='matplotlib')\n")
    res = envkit("plot", str(d), cwd=tmp_path, env={"PYTHONPATH": str(shadow)})
    assert res.returncode == 2 and "envkit[plot]" in res.stderr and res.stderr.count("\n") == 1, res.stderr


def test_bench_trainer_runs_on_cpu():
    """The benchmark's smoke shape (automatic without CUDA): both loops on the same token data."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_trainer.py"), "--device", "cpu", "--steps", "6",
                          "--window", "2", "--warmup-windows", "1", "--json"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    (row,) = json.loads(res.stdout)["runs"]
    assert row["envkit"]["tokens_per_second"] > 0 and row["plain"]["tokens_per_second"] > 0 and row["ratio"] > 0
    assert row["envkit"]["windows"] == row["plain"]["windows"] == 2
    assert row["envkit"]["mfu"] is None and row["vocab"] == 512  # CPU: no peak, MFU n/a


def test_mfu_peaks_by_device_name():
    from envkit.train.watching.mfu import mfu, peak_flops

    assert peak_flops("NVIDIA H100 80GB HBM3")[0] == 989e12
    assert peak_flops("NVIDIA H100 PCIe")[0] == 756e12
    assert peak_flops("NVIDIA A100-SXM4-80GB")[0] == 312e12
    assert peak_flops("NVIDIA L40S")[1] == "L40S" and peak_flops("NVIDIA L4")[1] == "L4"
    assert peak_flops("cpu") is None and mfu(1e6, 1e6, "mps") is None
    assert abs(mfu(989e6, 1e6, "NVIDIA H100 80GB HBM3") - 1.0) < 1e-9


def test_gpt_flops_per_token_formula():
    """GPT-2 small (vocabulary 50,257, bias, tied embeddings) has 124,439,808 parameters, of which
    786,432 are position embeddings (nanoGPT prints 123.65M; Hugging Face's gpt2 card says 124M).
    FLOPs per token = 6N + 12 * layers * heads * head_dim * T (PaLM appendix B)."""
    import torch

    from envkit.train.run.models import GPT

    with torch.device("meta"):  # shapes only: counting needs no 0.5 GB of initialised weights
        m = GPT(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768, bias=True)
    assert sum(p.numel() for p in m.parameters()) == 124_439_808
    assert m.flops_per_token() == 6 * (124_439_808 - 1024 * 768) + 12 * 12 * 12 * 64 * 1024
    assert m.flops_per_token(seq_len=256) == 6 * 123_653_376 + 12 * 12 * 12 * 64 * 256


# --nproc-per-node 2 through torchrun and DDP: test_two_processes_through_torchrun_on_cpu in test_fsdp.py,
# which reads the ddp run that file trains for its own tests.


def test_profile_steps_writes_a_chrome_trace(tmp_path, short_run):
    d = exp_dir(short_run[0], "mlp_quick_test") / "r"
    trace = json.loads((d / "profile_steps_3-5.json").read_text())
    names = {e.get("name", "") for e in trace["traceEvents"]}
    assert {"envkit step 3", "envkit step 4", "envkit step 5"} <= names and any(n.startswith("aten::") for n in names)
    assert "aten::" in (d / "profile_steps_3-5.txt").read_text()
    assert "profile of steps 3-5 written" in (d / "train.log").read_text()
    assert [p.name for p in d.iterdir() if p.name.endswith(".tmp.json")] == []
    res = run(tmp_path, "mlp_quick_test", "--profile-steps", "5:3", run_id="bad")
    assert res.returncode == 2 and "--profile-steps: '5:3' is not A:B" in res.stderr and res.stderr.count("envkit: error") == 1


def test_npz_images_train_the_cnn(tmp_path):
    """A user's exported images (NHWC uint8, as CIFAR-10 exports are) with x/y arrays: the class is
    the image's dominant colour channel, which the cnn must learn."""
    np = __import__("pytest").importorskip("numpy")
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=1200)
    x = rng.integers(0, 120, size=(1200, 32, 32, 3)).astype(np.uint8)
    x[np.arange(1200), :, :, y] += 120
    np.savez(tmp_path / "colours.npz", x=x, y=y)
    cfg = tmp_path / "npz.yaml"
    cfg.write_text("experiment: {name: colours}\n"
                   "dataset: {type: npz, path: colours.npz, val_fraction: 0.2}\n"
                   "model: {type: cnn, width: 8}\n"  # a narrow ResNet learns the colour by step 20 (the default 64 costs 3x)
                   "training: {max_steps: 30, batch_size: 32, lr: 0.003, warmup_steps: 5}\n"
                   "eval: {every_steps: 30}\n")
    res = envkit("run", str(cfg), "--run-id", "n", "--profile", "cpu", cwd=tmp_path, timeout=400)
    assert res.returncode == 0, res.stderr[-2000:]
    s = summary(tmp_path / "runs" / "colours" / "n")
    assert s["status"] == "completed" and s["accuracy"] >= 0.9, s


def _venv_with_fake_torch(root: Path, body: str) -> str:
    """A venv whose torch is a stand-in: shows which interpreter's torch the trainer imported."""
    import subprocess
    import venv

    venv.EnvBuilder(with_pip=False).create(root)
    py = str(root / "bin" / "python")
    site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(body)
    (site / "torch-2.13.0.dist-info").mkdir()
    (site / "torch-2.13.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cpu\n")
    return py


def test_trainer_uses_the_training_interpreters_own_torch(tmp_path):
    """`--python` (or the managed env) trains with that environment's torch, never envkit's."""
    py = _venv_with_fake_torch(tmp_path / "other", "import sys\nprint('TORCH OF THE OTHER ENV', file=sys.stderr)\nsys.exit(7)\n")
    res = run(tmp_path, "mlp_quick_test", "--python", py, "--set", "training.max_steps=5")
    assert res.returncode == 1
    assert "TORCH OF THE OTHER ENV" in res.stderr
    assert "the training process exited with code 7" in res.stderr and "train.log" in res.stderr


def test_a_crashing_training_process_is_reported_in_one_line(tmp_path):
    py = _venv_with_fake_torch(tmp_path / "crash", "import os\nos.abort()\n")
    res = run(tmp_path, "mlp_quick_test", "--python", py, "--set", "training.max_steps=5")
    assert res.returncode == 1
    assert "the training process was killed by SIGABRT" in res.stderr


def test_run_with_selftest_first(short_run):
    d, res = short_run
    assert "the device works" in res.stdout + res.stderr
    assert summary(exp_dir(d, "mlp_quick_test") / "r")["status"] == "completed"


FAULTY_MODEL = '''
import pathlib

import torch

class Faulty(torch.nn.Module):
    """A linear model with the two faults users meet, each once. In the first process that trains it,
    its 7th training forward runs out of device memory, as a too-large batch does (the marker file
    says it happened: memory freed, the next process goes through). In any later process, its output
    turns NaN at its 8th training forward (a transient blow-up)."""
    calls = 0

    def __init__(self, input_dim, num_classes):
        super().__init__()
        self.net = torch.nn.Linear(input_dim, num_classes)

    def forward(self, x):
        out = self.net(x)
        if self.training:
            Faulty.calls += 1
            marker = pathlib.Path("oom-happened")
            if not marker.exists():
                if Faulty.calls == 7:
                    marker.touch()
                    raise torch.OutOfMemoryError("MPS backend out of memory (MPS allocated: 17.2 GB, other allocations: 1.1 GB)")
            elif Faulty.calls == 8:
                out = out * float("nan")
        return out

def factory(input_dim, num_classes, **kw):
    return Faulty(input_dim, num_classes)
'''
# micro-batch 1: nothing left to split after an out of memory (larger ones are split and go on: tests/train/test_train_faults.py)
FAULTY = ["--set", "model.type=faulty_model:factory", "--set", "training.max_steps=15", "--set", "checkpoint.every_steps=5",
          "--set", "logging.every_steps=1", "--set", "eval.every_steps=0", "--set", "training.batch_size=1"]


@pytest.fixture(scope="module")
def faulty_runs(tmp_path_factory):
    """The faulty model's runs, trained once for two tests (each `envkit run` costs seconds of start-up):
    run r out of memory at step 7; the same command again, resuming r from step 5 and rolled back after
    the NaN at step 13; a run with training.nan_policy stop, its NaN at step 8. What each left is read
    before the next one starts."""
    d = tmp_path_factory.mktemp("faulty")
    (d / "faulty_model.py").write_text(FAULTY_MODEL)  # imported from the project folder (cwd)
    r = exp_dir(d, "mlp_quick_test") / "r"
    out = {"project": d, "r": r, "oom": run(d, "mlp_quick_test", *FAULTY)}
    out["after_oom"] = summary(r)
    out["checkpoints_after_oom"] = sorted(p.name for p in (r / "checkpoints").iterdir())
    out["again"] = run(d, "mlp_quick_test", *FAULTY)  # the same command again: it resumes and finishes
    out["stop"] = run(d, "mlp_quick_test", *FAULTY, "--set", "training.nan_policy=stop", run_id="stop")
    return out


def test_out_of_memory_is_one_line_with_the_fix_and_resumable(faulty_runs):
    res = faulty_runs["oom"]
    assert res.returncode == 1
    assert "the device ran out of memory" in res.stderr and "training.batch_size" in res.stderr and "training.grad_accum" in res.stderr
    assert "Traceback" not in res.stderr
    assert faulty_runs["after_oom"]["status"] == "failed" and faulty_runs["checkpoints_after_oom"] == ["step_00000005.pt"]
    res = faulty_runs["again"]
    assert res.returncode == 0, res.stderr[-2000:]
    s = summary(faulty_runs["r"])
    assert s["status"] == "completed" and s["steps"] == 15
    assert "resumed from step_00000005.pt" in (faulty_runs["r"] / "train.log").read_text()


def test_nan_is_caught_and_rolled_back(faulty_runs):
    assert faulty_runs["again"].returncode == 0, faulty_runs["again"].stderr[-2000:]
    s = summary(faulty_runs["r"])
    assert s["status"] == "completed" and s["rollbacks"] == 1
    log = (faulty_runs["r"] / "train.log").read_text()
    assert "non-finite loss by step 13: rolled back to step_00000010.pt" in log
    # stop policy: one clear message, exit 1, status nan
    res = faulty_runs["stop"]
    assert res.returncode == 1
    assert "training stopped: non-finite loss" in res.stderr and "Traceback" not in res.stderr
    assert summary(exp_dir(faulty_runs["project"], "mlp_quick_test") / "stop")["status"] == "nan"


def test_each_torchrun_process_gets_its_share_of_the_profiles_threads(monkeypatch):
    """The profile's OMP_NUM_THREADS counts the machine's cores: 4 processes on a 16-thread
    profile get 4 each; a value the user exported is kept as it is, per process (as torchrun and
    `envkit exec` keep it); with neither, the machine's cores are shared out."""
    from envkit.launch.launcher import child_environ, omp_threads_per_process
    from envkit.profiles.resolve import Profile

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert omp_threads_per_process({"OMP_NUM_THREADS": "16"}, {}, nproc=4) == "4"
    assert omp_threads_per_process({"OMP_NUM_THREADS": "3"}, {}, nproc=8) == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert omp_threads_per_process({"OMP_NUM_THREADS": "16"}, {}, nproc=4) == "3"  # the user's own
    assert child_environ(None, nproc=4)["OMP_NUM_THREADS"] == "3"
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(os, "cpu_count", lambda: 12)
    assert child_environ(None, nproc=4)["OMP_NUM_THREADS"] == "3"
    assert "OMP_NUM_THREADS" not in child_environ(None, nproc=1)
    profile = Profile("p", "", Path("p.toml"), "test", ["p"], {}, env={"OMP_NUM_THREADS": "16"})
    assert child_environ(profile, nproc=4)["OMP_NUM_THREADS"] == "4"  # the profile's count, shared out


# A tiny epochs-based run: training.epochs 1 sets max_steps (10) from the data when the run starts.
EPOCHS = ["--set", "device.type=cpu", "--set", "training.epochs=1", "--set", "training.batch_size=16", "--set", "dataset.num_samples=160",
          "--set", "dataset.input_dim=4", "--set", "model.hidden=8", "--set", "model.depth=1", "--set", "eval.every_steps=0",
          "--set", "eval.batches=1"]
# tests/old_runs/epochs: the run folder envkit 6a506e3 (before the typed config) wrote for EPOCHS with --stop-after 4
OLD_EPOCHS_RUN = TESTS / "old_runs" / "epochs"


def checkpoint_hash(path: Path) -> str:
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)["config_hash"]


def test_an_epochs_run_has_one_config_hash_in_every_file(tmp_path):
    """max_steps decided from epochs is recorded beside the config ("derived"), not in it: config.json,
    summary.json and the checkpoints name the run by one hash, the one an older envkit gave the same config."""
    res = run(tmp_path, "mlp_quick_test", *EPOCHS)
    assert res.returncode == 0, res.stderr[-2000:]
    d = exp_dir(tmp_path, "mlp_quick_test") / "r"
    config = json.loads((d / "config.json").read_text())
    hashes = {"config.json": config["config_hash"], "summary.json": summary(d)["config_hash"],
              **{p.name: checkpoint_hash(p) for p in sorted((d / "checkpoints").iterdir())}}
    old = json.loads((OLD_EPOCHS_RUN / "config.json").read_text())["config_hash"]
    assert hashes == {"config.json": old, "summary.json": old, "step_00000010.pt": old}
    assert config["values"]["training"]["max_steps"] == 1500  # as declared (the template's), not as derived
    assert summary(d)["derived"]["training.max_steps"] == 10 == summary(d)["max_steps"]


def test_a_run_folder_of_an_older_envkit_resumes(tmp_path):
    """A run folder written before the typed config (config.json with "values"/"declared", a checkpoint
    whose hash was taken after max_steps was set from epochs) resumes where it stopped."""
    import shutil

    d = exp_dir(tmp_path, "mlp_quick_test") / "old"
    shutil.copytree(OLD_EPOCHS_RUN, d)
    res = run(tmp_path, "mlp_quick_test", *EPOCHS, run_id="old")
    assert res.returncode == 0, res.stderr[-2000:]
    s = summary(d)
    assert (s["status"], s["steps"], s["resumed_from"]) == ("completed", 10, "step_00000004.pt")
    assert s["config_hash"] == json.loads((OLD_EPOCHS_RUN / "config.json").read_text())["config_hash"]
    assert [step for step, _ in losses(d)] == [4, 10]  # logged where the old run stopped, then at the end of the resumed one
