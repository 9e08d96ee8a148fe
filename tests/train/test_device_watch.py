"""Watching the device while it trains: the sampler's parsers over replayed outputs (an M1 Pro's
ioreg, two GPUs, a garbled nvidia-smi, a broken NVML), the hints as pure functions, and on the CPU
a starved-input run that gets the input-pipeline hint while missing trackers do not stop it;
`envkit monitor --json`, `runs` and `plot` over a run folder that carries device samples."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import TESTS, envkit

from envkit.facts import device_parse as dp
from envkit.facts.runner import ReplayRunner
from envkit.train.watching.device_sampler import POWER_NOTE_MPS, DeviceSampler
from envkit.train.watching.diagnose import HintContext, diagnose

SAMPLES = TESTS / "device_samples"


def replay(name: str) -> ReplayRunner:
    return ReplayRunner(json.loads((SAMPLES / f"{name}.json").read_text()), source=name)


def sample(name: str, device: str, uuids=None):
    sampler = DeviceSampler(device, None, runner=replay(name))
    sampler.uuids = uuids or []
    return sampler.sample()


# ---------------------------------------------------------------- parsers over recorded outputs


def test_apple_ioreg_plist_and_text_forms_read_the_same_statistics():
    runner = replay("mac_m1pro_stats1094")
    plist = dp.parse_ioreg_accelerator(runner.run(dp.IOREG_ACCELERATOR).stdout)
    text = dp.parse_ioreg_accelerator(runner.run(dp.IOREG_ACCELERATOR[:-1]).stdout)
    assert plist == text
    assert (plist.util_pct, plist.renderer_pct, plist.tiler_pct) == (2.0, 2.0, 2.0)
    assert plist.in_use_mb == round(340983808 / 2**20, 1) and plist.alloc_mb == round(1214005248 / 2**20, 1)
    assert dp.parse_ioreg_accelerator("<?xml version='1.0'?><plist><array><dict>") is None  # truncated plist
    assert dp.parse_ioreg_accelerator("+-o AGXAcceleratorG13X\n{\n}\n") is None  # no statistics: unknown, not 0


def test_mps_sample_has_utilization_memory_pressure_and_says_power_needs_sudo():
    s = sample("mac_m1pro_stats1094", "mps")
    assert s.metrics["device_util_pct"] == 2.0 and s.metrics["renderer_util_pct"] == 2.0
    assert s.metrics["device_mem_used_mb"] == 325.2 and s.metrics["system_mem_free_pct"] == 62.0
    assert POWER_NOTE_MPS in s.notes and "power_w" not in s.metrics


def test_two_gpus_only_the_runs_gpu_counts_and_na_power_is_unknown():
    mine = sample("nvidia_2gpu", "cuda", uuids=["GPU-5f1d2c3a-9b8e-4f7a-a1b2-0c9d8e7f6a51"])
    assert mine.metrics["device_util_pct"] == 97.0 and mine.metrics["power_w"] == 612.3 and mine.metrics["temp_c"] == 66
    assert mine.metrics["device_mem_used_mb"] == 131072 and mine.metrics["device_mem_total_mb"] == 143771
    assert len(mine.gpus) == 2 and mine.gpus[1]["power_w"] is None and mine.gpus[1]["util_pct"] == 0.0
    assert mine.metrics["rss_mb"] == 3072.0  # /proc/self/status VmRSS, replayed
    both = sample("nvidia_2gpu", "cuda")  # DDP over both (or uuids unknown): averaged / added up
    assert both.metrics["device_util_pct"] == 48.5 and both.metrics["device_mem_total_mb"] == 2 * 143771
    assert both.metrics["power_w"] == 612.3 and any("power: not reported" in n for n in both.notes)


def test_real_h100_recording_reads_utilization_memory_power_and_rss():
    """Recorded on the lent H100 while `envkit run` trained the gpt quick test
    (benchmarks/record_device_sample.py)."""
    s = sample("real_h100_training", "cuda", uuids=["GPU-9ae77c61-ee3a-9b02-50dc-e90c515f7c61"])
    assert s.metrics["device_util_pct"] == 7.0 and s.metrics["power_w"] == 125.9 and s.metrics["temp_c"] == 36
    assert s.metrics["device_mem_used_mb"] == 961 and s.metrics["device_mem_total_mb"] == 81559
    assert s.metrics["rss_mb"] == round(526044 / 1024, 1) and len(s.gpus) == 1
    other = sample("real_h100_training", "cuda", uuids=["GPU-not-this-one"])  # torch's uuid not in the list: all GPUs
    assert other.metrics["device_util_pct"] == 7.0


def test_real_two_h200_recording_counts_only_the_runs_gpu():
    """Recorded on the lent 2 x H200 with a matmul load on GPU 0 only
    (benchmarks/record_device_sample.py --load 4)."""
    busy = sample("real_2xh200_load", "cuda", uuids=["GPU-ac0eea33-de72-33e2-ba07-7f4f3c7f8fa7"])
    idle = sample("real_2xh200_load", "cuda", uuids=["GPU-2f816df1-495a-2327-68fb-4201e9f19f21"])
    assert busy.metrics["device_util_pct"] == 98.0 and busy.metrics["power_w"] == 688.4 and busy.metrics["temp_c"] == 57
    assert idle.metrics["device_util_pct"] == 0.0 and idle.metrics["device_mem_used_mb"] == 4
    assert busy.metrics["device_mem_total_mb"] == 143771 and len(busy.gpus) == 2
    both = sample("real_2xh200_load", "cuda")  # DDP over both: utilization averaged, memory added up
    assert both.metrics["device_util_pct"] == 49.0 and both.metrics["device_mem_total_mb"] == 2 * 143771


def test_garbled_nvidia_smi_keeps_what_is_readable_and_invents_nothing():
    s = sample("nvidia_garbled", "cuda")
    assert len(s.gpus) == 1  # the error line and the half-written line are skipped
    gpu = s.gpus[0]
    assert gpu["util_pct"] is None and gpu["power_w"] is None  # [Not Supported], ERR!
    assert gpu["mem_used_mb"] == 80123 and gpu["temp_c"] == 71
    assert "device_util_pct" not in s.metrics and s.metrics["device_mem_used_mb"] == 80123
    broken = sample("nvidia_nvml_mismatch", "cuda")
    assert broken.gpus == [] and "device_util_pct" not in broken.metrics
    assert any("no readable GPU lines" in n for n in broken.notes)


# ---------------------------------------------------------------- hints (pure)


def rows(n=6, **fields):
    return [{"step": 10 * (i + 1), "loss": 1.0, "dt_ms": 120.0, **fields} for i in range(n)]


def test_starved_input_gets_the_input_pipeline_hint_with_its_numbers():
    (hint,) = diagnose(rows(data_wait_fraction=0.8, device_util_pct=21.0), HintContext(device="cuda", num_workers=0, cpu_count=16))
    assert hint.id == "input-pipeline"
    assert "80% of step time waiting for data" in hint.evidence and "utilization 21%" in hint.evidence
    assert "dataloader.num_workers: 8" in hint.fix and "dataloader.pin_memory: true" in hint.fix and "batch_size" in hint.fix
    cpu = diagnose(rows(data_wait_fraction=0.7), HintContext(device="cpu", num_workers=2))
    assert [h.id for h in cpu] == ["input-pipeline"] and "(now 2)" in cpu[0].fix and "pin_memory" not in cpu[0].fix


def test_no_input_hint_when_the_device_is_busy_or_data_keeps_up():
    assert diagnose(rows(data_wait_fraction=0.6, device_util_pct=95.0), HintContext(device="cuda")) == []
    assert diagnose(rows(data_wait_fraction=0.05), HintContext(device="cpu")) == []
    # only the first interval (start-up: workers spawning) waited: no hint
    assert diagnose([{"step": 10, "loss": 1, "dt_ms": 900, "data_wait_fraction": 0.9}] + rows(3, data_wait_fraction=0.02),
                    HintContext()) == []


def test_idle_gpu_with_data_on_time_says_the_steps_are_too_small():
    (hint,) = diagnose(rows(data_wait_fraction=0.02, device_util_pct=30.0), HintContext(device="cuda", batch_size=8))
    assert hint.id == "device-underused" and "utilization 30%" in hint.evidence and "(now 8)" in hint.fix


def test_no_hint_judges_the_warm_up_window():
    """A compiled GPT-2 small on an H100 at step 10: the window was the compile (2,912 ms a step, the GPU at 0%);
    a hint then said the GPU was underused. A window the trainer marks as the warm-up is not judged,
    nor the first row of a file that carries no mark (an older envkit's)."""
    warm = {"step": 10, "loss": 10.9, "dt_ms": 2912.0, "data_wait_fraction": 0.0, "device_util_pct": 0.0, "warmup": True}
    ctx = HintContext(device="cuda", batch_size=16)
    assert diagnose([warm], ctx) == []
    assert diagnose([{k: v for k, v in warm.items() if k != "warmup"}], ctx) == []
    # a resumed attempt's warm-up later in the file is left out too; the windows around it are judged
    judged = rows(2, data_wait_fraction=0.01, device_util_pct=30.0)
    (hint,) = diagnose([warm, judged[0], {**warm, "step": 30}, judged[1]], ctx)
    assert hint.id == "device-underused" and "median of the last 2 logs: cuda utilization 30%" in hint.evidence


def test_a_hint_never_proposes_a_setting_that_is_already_on():
    r = rows(data_wait_fraction=0.02, device_util_pct=30.0)
    (on,) = diagnose(r, HintContext(device="cuda", batch_size=16, compile=True))
    assert on.fix == "a larger training.batch_size (now 16) (small steps are launch-bound)"
    (off,) = diagnose(r, HintContext(device="cuda", batch_size=16, compile=False))
    assert off.fix == "a larger training.batch_size (now 16) (small steps are launch-bound), or training.compile: true"
    # read from a run's config (envkit monitor): compile auto is on on CUDA
    (auto,) = diagnose(r, HintContext.from_config({"training": {"batch_size": 16, "compile": "auto"}}, "cuda"))
    assert auto.fix == on.fix


def test_utilization_is_unknown_until_a_sample_taken_after_the_first_step(tmp_path):
    """A sample taken while the first step runs (compiling: the GPU idles) gives the row no
    utilization, never a 0% of the warm-up; memory it does give. From a sample taken after the first
    step ended, the row has the utilization, and only those samples make the run's average."""
    import time

    from envkit.train.watching.watch import RunWatch

    watch = RunWatch(tmp_path, {"logging": {"device_seconds": 0}}, "cuda", None, lambda m: None, enabled=False)
    watch.sampler = DeviceSampler("cuda", None, interval=0.01, runner=replay("real_h100_training")).start()

    def row_after(n):
        deadline = time.monotonic() + 30
        while watch.sampler.summary()["device_samples"] < n and time.monotonic() < deadline:
            time.sleep(0.01)
        row = {"step": 10, "loss": 1.0, "dt_ms": 100.0}
        watch.on_log(row)
        return row

    early = row_after(2)
    assert "device_util_pct" not in early and early["device_mem_used_mb"] == 961.0
    assert "device_util_pct" not in watch.heartbeat_fields()["device"]
    watch.first_step_done(compiling=True)
    seen = watch.sampler.summary()["device_samples"]
    late = row_after(seen + 2)
    watch.sampler.stop()
    assert late["device_util_pct"] == 7.0  # the recording's own figure
    assert watch.sampler.summary()["avg_device_util_pct"] == 7.0
    assert watch.context.compile is True


def test_memory_near_the_limit_warns_before_the_oom():
    r = rows(data_wait_fraction=0.0, device_util_pct=99.0)
    r[-1].update(device_mem_used_mb=76000.0, device_mem_total_mb=81559.0, torch_reserved_mb=74000.0)
    (hint,) = diagnose(r, HintContext(device="cuda"))
    assert hint.id == "memory-near-limit" and "74.2 of 79.6 GiB in use (93%)" in hint.evidence and "grad_accum" in hint.fix
    r[-1].update(device_mem_used_mb=40000.0, torch_reserved_mb=40000.0)
    assert diagnose(r, HintContext(device="cuda")) == []


# ---------------------------------------------------------------- a starved run on the CPU, trackers missing


SLOW_FACTORY = '''
import time
import torch

class Slow(torch.utils.data.Dataset):
    def __init__(self, n, delay):
        g = torch.Generator().manual_seed(0)
        self.x, self.delay = torch.randn(n, 8, generator=g), delay
        self.y = (self.x.sum(1) > 0).long()
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        time.sleep(self.delay)  # a dataset that decodes or downloads on every item
        return self.x[i], self.y[i]

def make(delay=0.002, seed=0):
    return {"train": Slow(512, delay), "val": Slow(64, 0.0), "kind": "classify", "info": {"num_classes": 2, "input_dim": 8}}
'''


def test_starved_input_run_on_cpu_gets_the_hint_and_missing_trackers_do_not_stop_it(tmp_path):
    import importlib.util

    (tmp_path / "slowdata.py").write_text(SLOW_FACTORY)
    cfg = tmp_path / "slow.yaml"
    cfg.write_text("experiment: {name: starved}\n"
                   "dataset: {type: 'slowdata:make', kwargs: {delay: 0.01}}\n"
                   "model: {type: mlp, hidden: 16, depth: 1}\n"
                   "training: {max_steps: 20, batch_size: 16}\n"
                   "eval: {every_steps: 0, batches: 1}\n"
                   "logging: {every_steps: 5, device_seconds: 0.2, trackers: [tensorboard, wandb]}\n")
    res = envkit("run", str(cfg), "--run-id", "s", "--profile", "cpu", cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-2000:]
    d = tmp_path / "runs" / "starved" / "s"
    log = (d / "train.log").read_text()
    # a tracker that is not installed is named once in the log, one that is never
    missing = {name: int(importlib.util.find_spec(name) is None) for name in ("tensorboard", "wandb")}
    assert {name: sum(f"tracker {name}: not installed" in line for line in log.splitlines()) for name in missing} == missing
    s = json.loads((d / "summary.json").read_text())
    assert s["status"] == "completed" and s["steps"] == 20
    (hint,) = [h for h in s["hints"] if h["id"] == "input-pipeline"]
    assert "waiting for data" in hint["evidence"] and "dataloader.num_workers" in hint["fix"]
    assert "hint [input-pipeline]" in log and "hint [input-pipeline]" in res.stdout
    train_rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    import statistics

    # 16 items x 10 ms of sleep per step against a 16-wide MLP: most of each step is the wait
    assert statistics.median(r["data_wait_fraction"] for r in train_rows[1:]) > 0.5, train_rows
    assert any("rss_mb" in r and "cpu_pct" in r for r in train_rows)
    beat = json.loads((d / "heartbeat.json").read_text())
    assert beat["device"]["device"] == "cpu" and beat["device"]["rss_mb"] > 10 and beat["hints"][0]["id"] == "input-pipeline"
    mon = envkit("monitor", str(d), "--json", cwd=tmp_path)
    state = json.loads(mon.stdout)
    assert mon.returncode == 0 and state["status"] == "completed" and state["hints"][0]["id"] == "input-pipeline"
    assert state["latest"]["data_wait_fraction"] > 0 and "rss_mb" in state["latest"]


def test_unknown_tracker_is_one_line_naming_the_key(tmp_path):
    cfg = tmp_path / "t.yaml"
    cfg.write_text("logging: {trackers: [tensorbord]}\n")
    res = envkit("validate", str(cfg), "--profile", "cpu", cwd=tmp_path)
    assert res.returncode == 2 and "logging.trackers" in res.stderr and "did you mean 'tensorboard'" in res.stderr
    assert res.stderr.strip().count("\n") <= 1


# ---------------------------------------------------------------- runs / monitor / plot over device samples


def fake_run(root: Path) -> Path:
    """A finished CUDA run folder as the trainer writes it (no GPU needed to read one)."""
    d = root / "runs" / "gpu-exp" / "r1"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"values": {"dataloader": {"num_workers": 0, "pin_memory": "auto"},
                                                          "training": {"batch_size": 32}}}))
    lines = []
    for i in range(1, 9):
        lines.append({"step": 10 * i, "loss": 3.0 - 0.2 * i, "lr": 3e-4, "dt_ms": 40.0, "tokens_per_second": 1e5,
                      "data_wait_fraction": 0.7, "device_util_pct": 20.0 + i, "device_mem_used_mb": 9000.0 + 100 * i,
                      "device_mem_total_mb": 81559.0, "torch_allocated_mb": 5000.0 + 50 * i, "power_w": 150.0, "temp_c": 40})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + json.dumps({"step": 80, "val_loss": 1.5}) + "\n")
    (d / "summary.json").write_text(json.dumps({"status": "completed", "steps": 80, "max_steps": 80, "final_loss": 1.4,
                                                "best_val_loss": 1.5, "device": "cuda", "avg_device_util_pct": 24.4,
                                                "updated_at": 1.0}))
    (d / "heartbeat.json").write_text(json.dumps({"status": "completed", "step": 80, "max_steps": 80, "updated_at": 1.0,
                                                  "pid": os.getpid()}))
    return d


def test_runs_shows_average_utilization_and_monitor_the_device_line(tmp_path):
    d = fake_run(tmp_path)
    (row,) = json.loads(envkit("runs", "--json", cwd=tmp_path).stdout)
    assert row["avg_device_util_pct"] == 24.4  # the run's own average (summary.json), not the logged rows' 24.5
    assert "24%" in envkit("runs", cwd=tmp_path).stdout  # to a whole percent: 24.4 rounds down under any rule
    once = envkit("monitor", str(d), "--once", cwd=tmp_path)
    assert once.returncode == 0
    assert "util 28%" in once.stdout and "data wait 70%" in once.stdout and "power 150W" in once.stdout
    assert "hint [input-pipeline]" in once.stdout  # judged from metrics.jsonl by the same pure function
    state = json.loads(envkit("monitor", str(d), "--json", cwd=tmp_path).stdout)
    assert state["latest"]["device_util_pct"] == 28.0 and state["hints"][0]["id"] == "input-pipeline"


def test_plot_draws_utilization_and_memory_under_the_loss(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    d = fake_run(tmp_path)
    res = envkit("plot", str(d), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    png = d / "curves.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(str(png))
    assert img.shape[0] > img.shape[1] * 0.6  # three rows of panels, not the one-row loss plot
    assert img.std() > 0.05  # something is drawn


def test_plot_of_a_run_that_logged_no_throughput_draws_the_loss_alone(tmp_path):
    """An `envkit exec` script that logs step and loss only (envkit.track.log): one panel, the loss,
    not a second panel of "samples per second" drawn as a flat 0.0 line."""
    pytest.importorskip("matplotlib")
    import matplotlib.image

    d = tmp_path / "runs" / "exec-exp" / "r1"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"values": {}}))
    (d / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0 / s, "lr": 0.1}) + "\n" for s in range(1, 6)))
    res = envkit("plot", str(d), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    img = matplotlib.image.imread(str(d / "curves.png"))
    assert img.shape[:2] == (400, 600)  # one 6 x 4 inch panel at 100 dpi, not the 11 x 4 of loss beside throughput


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("conftest").has_cuda(), reason="needs CUDA")
def test_cuda_run_records_real_utilization_memory_and_power(tmp_path):
    from conftest import ROOT

    res = envkit("run", str(ROOT / "templates" / "train" / "gpt_quick_test.yaml"), "--run-id", "g", "--profile", "cuda",
                 "--set", "training.max_steps=300", "--set", "logging.device_seconds=1", cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    d = tmp_path / "runs" / "gpt-quick-test" / "g"
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    last = rows[-1]
    assert last["device_mem_total_mb"] > 1000 and last["torch_allocated_mb"] > 0 and "device_util_pct" in last
    assert "power_w" in last and "temp_c" in last


def test_tensorboard_tracker_writes_the_same_metrics_as_metrics_jsonl(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from conftest import ROOT

    res = envkit("run", str(ROOT / "templates" / "train" / "mlp_quick_test.yaml"), "--run-id", "tb", "--profile", "cpu",
                 "--set", "training.max_steps=10", "--set", "logging.every_steps=5", "--set", "logging.trackers=[tensorboard]",
                 cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    d = tmp_path / "runs" / "mlp-quick-test" / "tb"
    ea = EventAccumulator(str(d / "tensorboard"))
    ea.Reload()
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert [(e.step, round(e.value, 5)) for e in ea.Scalars("loss")] == [(r["step"], round(r["loss"], 5)) for r in rows]
    assert "data_wait_fraction" in ea.Tags()["scalars"]


def test_rich_monitor_layout_shows_steps_device_panel_and_hints(tmp_path):
    from rich.console import Console

    from envkit.commands.monitor import _rich_view
    from envkit.runfolder.find import read_metrics as _metrics
    from envkit.train.watching.folder_status import run_state

    d = fake_run(tmp_path)
    console = Console(width=160, record=True, force_terminal=False)
    console.print(_rich_view(run_state(d), _metrics(d)))
    text = console.export_text()
    assert "│ util 28%" in text and "power 150W" in text and "80    1.4000" in text
    assert "hint [input-pipeline]" in text


class _Sequence(ReplayRunner):
    """nvidia-smi answers from one recording after another (the last one from then on)."""

    def __init__(self, names):
        self.snaps = [json.loads((SAMPLES / f"{n}.json").read_text()) for n in names]
        self.calls = 0
        super().__init__(self.snaps[0], source="sequence")

    def run(self, argv, timeout=10.0):
        if argv == dp.NVIDIA_SMI_SAMPLE:
            self.snap = self.snaps[min(self.calls, len(self.snaps) - 1)]
            self.calls += 1
        return super().run(argv, timeout)


def test_the_sampler_thread_averages_utilization_and_keeps_the_peak_memory():
    """The run's figures in summary.json come from the sampler's thread: the mean utilization of
    the samples that had one (the garbled nvidia-smi has none) and the highest memory fraction."""
    import time

    mine = ["GPU-9ae77c61-ee3a-9b02-50dc-e90c515f7c61", "GPU-5f1d2c3a-9b8e-4f7a-a1b2-0c9d8e7f6a51"]
    sampler = DeviceSampler("cuda", None, interval=0.01, runner=_Sequence(["real_h100_training", "nvidia_2gpu", "nvidia_garbled"]))
    sampler.uuids = mine
    sampler.training_started(at=0.0)  # the first step ended before the first sample: every one counts
    sampler.start()
    deadline = time.monotonic() + 30
    while sampler.summary()["device_samples"] < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    s = sampler.summary()
    assert s["device_samples"] >= 4
    assert s["avg_device_util_pct"] == 52.0  # (7 + 97) / 2, from the recordings' own numbers
    assert s["peak_device_mem_fraction"] == round(80123 / 81559, 4)  # the garbled recording still reads memory


def test_a_live_run_shows_one_step_count_where_the_metrics_are_ahead_of_the_heartbeat(tmp_path):
    """The heartbeat is written every few seconds, the metrics as the run logs them: the step and
    loss come from the newest logged row, beside the best val loss read from the same rows."""
    import time

    from envkit.runfolder.owner import take_owner_lock
    from envkit.train.watching.folder_status import run_state

    d = fake_run(tmp_path)
    (d / "summary.json").unlink()
    (d / "heartbeat.json").write_text(json.dumps({"status": "running", "step": 30, "max_steps": 80, "loss": 2.4,
                                                  "updated_at": time.time(), "pid": os.getpid()}))
    lock = take_owner_lock(d, "test")  # the folder is owned: the run is live
    try:
        state = run_state(d)
    finally:
        lock.close()
    assert (state["status"], state["step"], state["loss"], state["best_val_loss"]) == ("running", 80, 3.0 - 0.2 * 8, 1.5)
