"""training.batch_size: auto. The choice from probe figures (GPT-2-small-like figures on an 80 GB
GPU, the same model on a 16 GB and a 96 GB Mac working set), and the whole path on the CPU: two
probing trainer processes, the injected out-of-memory as the device's limit, the run's first
lines, and a resume that keeps the batch its run started with."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, envkit
from envkit.errors import EnvkitError
from envkit.launch.auto_batch import choose, search

TEMPLATES = ROOT / "templates" / "train"
H100 = {"device": "cuda", "total_mb": 81_559.0, "free_mb": 80_900.0, "train_examples": 1_000_000}


def probes(*rows, **machine):
    """rows: (batch, peak MB) for a probe that ran, (batch, None) for one out of memory."""
    base = {**H100, **machine}
    return [{**base, "batch": b, "status": "ok", "peak_mb": mb} if mb is not None else {**base, "batch": b, "status": "oom"}
            for b, mb in rows]


def test_the_largest_power_of_two_that_fits_the_budget():
    # 900 MB per sample and 2.2 GB fixed: 0.8 x 81,559 MB holds 70 samples -> 64; 128 would need 117 GB
    c = choose(probes((2, 4000.0), (8, 9400.0)), fraction=0.8, cap=1024)
    assert c.batch == 64
    assert "900.0 MB per sample" in c.note and "128 would need 114.65 GB" in c.note and "80% of 79.65 GB" in c.note


def test_a_smaller_memory_gets_a_smaller_batch():
    small = choose(probes((2, 4000.0), (8, 9400.0), device="mps", total_mb=16_384.0, free_mb=16_384.0), fraction=0.7, cap=1024)
    big = choose(probes((2, 4000.0), (8, 9400.0), device="mps", total_mb=98_304.0, free_mb=98_304.0), fraction=0.7, cap=1024)
    assert (small.batch, big.batch) == (8, 64)


def test_memory_another_process_holds_lowers_the_budget():
    c = choose(probes((2, 4000.0), (8, 9400.0), free_mb=20_000.0), fraction=0.8, cap=1024)
    assert c.batch == 16 and "within what is free" in c.note


def test_a_probe_out_of_memory_is_an_upper_bound():
    c = choose(probes((2, 4000.0), (4, 5800.0), (8, None)), fraction=0.8, cap=1024)
    assert c.batch == 4 and "8 ran out of memory" in c.note
    c = choose(probes((2, None), (1, 3000.0)), fraction=0.8, cap=1024)
    assert c.batch == 1


def test_the_training_set_and_the_cap_bound_it():
    c = choose(probes((2, 4000.0), (8, 9400.0), train_examples=100), fraction=0.8, cap=1024, world=2)
    assert c.batch == 32 and "64 x 2 processes is more than the 100 training examples" in c.note
    flat = choose(probes((2, 300.0), (8, 300.0)), fraction=0.8, cap=256)  # memory does not grow: the cap decides
    assert flat.batch == 256 and "training.batch_size_max is 256" in flat.note


def test_nothing_fits_is_a_clear_error():
    with pytest.raises(EnvkitError) as e:
        choose(probes((2, None), (1, None)), fraction=0.8, cap=1024)
    assert "batch 1 runs out of cuda memory" in e.value.message and e.value.where == "training.batch_size"


def fake_device(peak, total_mb, oom_above=None):
    """run_probe for a pretend device: peak(batch) in MB; above oom_above it runs out of memory."""
    seen = []

    def run_probe(b):
        seen.append(b)
        if oom_above is not None and b > oom_above:
            return {**H100, "total_mb": total_mb, "free_mb": total_mb, "batch": b, "status": "oom", "device": "cuda"}
        return {**H100, "total_mb": total_mb, "free_mb": total_mb, "batch": b, "status": "ok", "peak_mb": peak(b), "device": "cuda"}
    return run_probe, seen


def test_the_chosen_batch_is_itself_probed_before_it_is_taken():
    # GPT-2-small-like: linear from the start; one more probe (at 64) confirms the extrapolation
    run_probe, seen = fake_device(lambda b: 750 + 918 * b, 81_559.0)
    assert search(run_probe, fraction=0.8, cap=1024).batch == 64 and seen == [2, 8, 64]
    # ResNet-like: the optimizer step's 500 MB is the peak at batch 2 and 8 (no slope), the activations
    # (2.3 MB a sample) only later: 2 and 8 alone would say the cap (4096, 9.6 GB); the probes find 2048
    run_probe, seen = fake_device(lambda b: max(500.0, 230 + 2.3 * b), 8_000.0)
    c = search(run_probe, fraction=0.8, cap=4096)
    assert c.batch == 2048 and seen == [2, 8, 4096, 2048] and "4096 needed 9.42 GB" in c.note
    # a device that cannot hold what the line promises: out of memory above 100 samples
    run_probe, seen = fake_device(lambda b: 750 + 918 * b, 200_000.0, oom_above=100)
    c = search(run_probe, fraction=0.8, cap=1024)
    assert c.batch == 64 and seen[:3] == [2, 8, 128] and "128 ran out of memory" in c.note


def test_no_shipped_batch_claims_a_measurement_it_does_not_name():
    """A fixed batch is either a measurement that names where it was measured (RESULTS.md, at a
    stated shape, with the figures it quotes found there) or says it was not measured; every other
    profile leaves it to the probe (auto). A new fixed batch must be added here with what it stands on."""
    import re

    from envkit.profiles import load_profile
    from envkit.profiles.files import list_profiles

    rows = {info.name: load_profile(info.name).to_dict()["train"]["batch_size"] for info in list_profiles()}
    fixed = {name: row for name, row in rows.items() if row["value"] != "auto"}
    assert sorted(fixed) == ["conservative", "cpu", "cuda-hopper"]
    assert len(rows) - len(fixed) >= 20  # the device profiles without a measurement: cuda, rocm, xpu, every Apple chip
    # measured: the shape, the file, and figures that are really in that file
    hopper = fixed["cuda-hopper"]
    assert hopper["reason"].startswith("measured on an H100 at GPT-2 small") and hopper["source"].startswith("benchmarks/RESULTS.md (")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    figures = re.findall(r"\d{3},\d{3}", hopper["reason"])
    assert len(figures) >= 3 and [f for f in figures if f not in results] == [], figures
    # not measured: said in so many words, and never dressed as a measurement
    for name in ("cpu", "conservative"):
        text = f"{fixed[name]['reason']} {fixed[name]['source']}"
        assert "not measured" in text and "measured on" not in text and "RESULTS.md" not in text, (name, text)
    # the conservative batch comes from a guide: the repository page that describes it is named, and has that section
    assert fixed["conservative"]["source"].startswith("docs/knowledge/common-guides.md (The NaN fallback)")
    assert "\n### The NaN fallback\n" in (ROOT / "docs" / "knowledge" / "common-guides.md").read_text()


def _auto_run(tmp_path, *extra, env=None):
    return envkit("run", str(TEMPLATES / "gpt_quick_test.yaml"), "--run-id", "auto", "--profile", "base",
                  "--set", "training.batch_size=auto", "--set", "training.max_steps=6", "--set", "eval.every_steps=0",
                  "--set", "checkpoint.every_steps=3", *extra, cwd=tmp_path, env=env, timeout=400)


def test_auto_on_the_cpu_probes_decides_says_so_and_resume_keeps_it(tmp_path):
    pytest.importorskip("torch")
    # a pretend device that holds 4 samples: the probe at 2 fits, at 8 does not, at 4 fits -> 4
    res = _auto_run(tmp_path, "--stop-after", "3", env={"ENVKIT_TRAIN_INJECT": "oom-above=4"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "probing one step at batch 2" in res.stderr and "probing one step at batch 8" in res.stderr
    first = next(line for line in res.stderr.splitlines() if "auto ->" in line)
    assert first.startswith("training.batch_size auto -> 4: one eager step on cpu") and "8 ran out of memory" in first
    run_dir = tmp_path / "runs" / "gpt-quick-test" / "auto"
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["values"]["training"]["batch_size"] == "auto" and saved["derived"] == {"training.batch_size": 4}
    assert "training.batch_size 4 (auto: one eager step" in (run_dir / "train.log").read_text()
    assert "(4 x 1 accum x 1 proc" in (run_dir / "train.log").read_text()
    # without the injected limit a new probe would choose far more; the resumed run keeps 4
    res = _auto_run(tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "decided by the probe when this run started" in res.stderr and "probing" not in res.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 6
    log = (run_dir / "train.log").read_text()
    assert "resumed from step_00000003.pt: step 3" in log and log.count("(4 x 1 accum x 1 proc") == 2


def test_auto_needs_a_number_across_machines(tmp_path):
    res = _auto_run(tmp_path, "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:29511")
    assert res.returncode == 2 and res.stderr.count("envkit: error") == 1
    assert "every node needs the same number" in res.stderr and "--set training.batch_size=N" in res.stderr


def test_a_probed_run_of_an_older_envkit_resumes_at_its_batch(tmp_path):
    """tests/old_runs/auto_batch: a run folder envkit 6a506e3 (before the typed config) wrote with
    training.batch_size auto probed to 4 (config.json holding the batch in "values" and "auto" in
    "declared"), stopped at step 3. It resumes at batch 4 without a new probe, under the same hash."""
    import shutil

    pytest.importorskip("torch")
    old = ROOT / "tests" / "old_runs" / "auto_batch"
    run_dir = tmp_path / "runs" / "mlp-quick-test" / "oldauto"
    shutil.copytree(old, run_dir)
    res = envkit("run", str(TEMPLATES / "mlp_quick_test.yaml"), "--run-id", "oldauto", "--profile", "cpu",
                 "--set", "device.type=cpu", "--set", "training.batch_size=auto", "--set", "training.max_steps=6",
                 "--set", "dataset.num_samples=160", "--set", "dataset.input_dim=4", "--set", "model.hidden=8",
                 "--set", "model.depth=1", "--set", "eval.every_steps=0", cwd=tmp_path, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "training.batch_size 4: decided by the probe when this run started" in res.stderr
    assert "probing" not in res.stderr
    s = json.loads((run_dir / "summary.json").read_text())
    assert (s["status"], s["steps"], s["resumed_from"], s["micro_batch"]) == ("completed", 6, "step_00000003.pt", 4)
    assert s["config_hash"] == json.loads((old / "config.json").read_text())["config_hash"]
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["values"]["training"]["batch_size"] == "auto" and saved["derived"] == {"training.batch_size": 4}
