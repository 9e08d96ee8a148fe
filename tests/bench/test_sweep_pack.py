"""`envkit sweep --pack auto`: how many runs at once, decided by measurement. The decision with
made-up measurements (no timing), then a tiny grid on this CPU as a user runs it."""

from __future__ import annotations

import json
import re

from conftest import envkit
from envkit.sweep.pack import Probe as P, Starts, by_time, decide, fewest_rounds, most_at_once


def test_packing_goes_on_while_the_total_rises_by_ten_percent_and_stops_when_it_does_not():
    assert decide([P(1, 100.0)], limit=8, per_run_mb=None, free_mb=None)[:2] == (2, 1)
    assert decide([P(1, 100.0), P(2, 190.0)], 8, None, None)[:2] == (4, 2)
    nxt, n, why = decide([P(1, 100.0), P(2, 190.0), P(4, 200.0)], 8, None, None)
    assert (nxt, n) == (None, 2)
    assert why == "pack: 2 at a time (1 alone 100 samples/s; 2 at once 190 (+90%); 4 at once 200 (+5%); under +10%: not worth it)"


def test_packing_stops_where_the_next_count_would_not_fit_in_memory():
    nxt, n, why = decide([P(1, 100.0), P(2, 190.0)], 8, per_run_mb=900.0, free_mb=3000.0, where="free on the GPU")
    assert (nxt, n) == (None, 2)  # 4 x 900 MB is over 80% of 3,000 MB
    assert "4 would take 4 x 900 MB, over 80% of the 3,000 MB free on the GPU" in why
    assert decide([P(1, 100.0), P(2, 190.0)], 8, per_run_mb=500.0, free_mb=3000.0)[0] == 4  # 2,000 MB fits in 2,400


def test_packing_never_exceeds_the_runs_to_run_and_a_failed_count_is_not_chosen():
    assert decide([P(1, 100.0), P(2, 190.0)], 3, None, None)[:2] == (3, 2)  # three runs: 3 is probed, not 4
    nxt, n, why = decide([P(1, 100.0), P(2, 190.0), P(3, 280.0)], 3, None, None)
    assert (nxt, n) == (None, 3) and why.endswith("3 runs to run)")
    nxt, n, why = decide([P(1, 100.0), P(2, None, reason="out of memory")], 8, None, None)
    assert (nxt, n) == (None, 1) and "2 at once failed (out of memory)" in why
    assert decide([P(1, None, reason="boom")], 8, None, None)[:2] == (None, 1)


def test_a_count_that_held_the_total_is_used_to_end_the_sweep_in_fewer_rounds():
    # measured on the H100 (benchmarks/RESULTS.md): 8 at once trained as fast as 4 -> 9 runs in 2 rounds of 5, not 3 of 4
    probes = [P(1, 11336.0), P(2, 23660.0), P(4, 39579.0), P(8, 39563.0)]
    _, chosen, why = decide(probes, 9, None, None)
    n, line = fewest_rounds(probes, chosen, 9, why)
    assert (chosen, n) == (4, 5) and line.startswith("pack: 5 at a time (1 alone 11,336")
    assert "5 rather than 4: 9 runs in 2 rounds instead of 3, as fast (8 at once held the total)" in line
    # a larger count that lost throughput is not used, nor one that saves no round
    assert fewest_rounds([P(1, 100.0), P(2, 190.0), P(4, 150.0)], 2, 9, "pack: 2 at a time (x)")[0] == 2
    assert fewest_rounds(probes, 4, 4, "pack: 4 at a time (x)") == (4, "pack: 4 at a time (x)")  # 4 runs: one round already
    assert fewest_rounds(probes, 4, 8, "pack: 4 at a time (x)")[0] == 8  # 8 runs: all at once, as 8 were timed


def test_with_the_runs_started_counts_past_the_last_gain_are_timed_until_the_total_falls():
    probes = [P(1, 100.0), P(2, 190.0), P(4, 200.0)]
    assert decide(probes, 9, None, None, keep_going=True)[:2] == (8, 2)  # +5%: timed on, 2 stays the throughput pick
    nxt, n, why = decide(probes + [P(8, 180.0)], 9, None, None, keep_going=True)
    assert (nxt, n) == (None, 2) and why.endswith("8 at once 180 (-10%); 8 at once lost throughput)")


def test_short_runs_pack_more_than_throughput_alone_since_each_round_pays_a_start():
    """An H100-like probe: one run alone 30k samples/s, 2 at once +46%, then flat. An epoch of 50k
    samples trains in under 2 s but starts in 24 s (42 s nine at once): all nine at once end the sweep
    soonest, 52 s against 231 s one at a time. A 100-epoch run is mostly training: fewer at once,
    where the same total trains with less memory (within 5% of the soonest)."""
    probes = [P(1, 30242.0), P(2, 44216.0), P(4, 46186.0), P(8, 45900.0), P(9, 45800.0)]
    _, chosen, why = decide(probes, 9, None, None, keep_going=True)
    starts = Starts(24.0, together=8, together_s=40.0)
    n, line = by_time(probes, chosen, 9, why, starts, run_samples=50_000)
    assert (chosen, n) == (2, 9)
    assert line.startswith("pack: 9 at a time (1 alone 30,242 samples/s; 2 at once 44,216 (+46%)")
    assert line.endswith("a run starts in 24 s alone, 42 s 9 at once, and trains 50,000 samples: 9 runs take about "
                         "52 s 9 at a time, 140 s 2 at a time, 231 s one at a time)")
    n_long, line_long = by_time(probes, chosen, 9, why, starts, run_samples=5_000_000)
    assert 4 <= n_long < 9 and "1,704 s one at a time" in line_long
    # a count that lost throughput is never chosen for long runs; a failed count never at all
    slower = [P(1, 100.0), P(2, 190.0), P(4, 200.0), P(8, 191.0)]
    assert by_time(slower, 2, 8, "pack: 2 at a time (x)", Starts(5.0, 7, 12.0), 60_000)[0] == 4
    failed = [P(1, 100.0), P(2, 190.0), P(4, None, reason="out of memory")]
    assert by_time(failed, 2, 8, "pack: 2 at a time (x)", Starts(5.0, 1, 5.0), 60)[0] == 2
    # the start or the run's length unknown: the rounds rule, as before
    assert by_time(probes, chosen, 9, why, None, 50_000) == fewest_rounds(probes, chosen, 9, why)
    assert by_time(probes, chosen, 9, why, starts, None) == fewest_rounds(probes, chosen, 9, why)


def test_the_runs_started_for_the_probe_are_what_doubling_could_reach():
    # 1, 2, 4, 8, then the 9 there are
    assert most_at_once(9, None, None) == 9 and most_at_once(3, None, None) == 3 and most_at_once(1, None, None) == 1
    assert most_at_once(9, per_run_mb=900.0, free_mb=3000.0) == 2  # 4 x 900 MB is over 80% of 3,000 MB


GRID = """\
experiment: {name: pk, output_dir: runs, seed: 0}
dataset: {type: synthetic, task: teacher, num_samples: 1000}
model: {type: mlp}
training: {epochs: 1, batch_size: 100, compile: false}  # 10 steps: fewer than the probe times (its own count)
eval: {every_steps: 0}
checkpoint: {every_steps: 0}
logging: {every_steps: 4}
device: {type: cpu}
sweep:
  grid:
    experiment.seed: [0, 1]
"""


def _losses(folder) -> dict:
    out = {}
    for run in sorted((folder / "runs" / "pk").iterdir()):
        s = json.loads((run / "summary.json").read_text())
        out[run.name] = (s["status"], s["steps"], s["final_loss"], s["best_val_loss"])
    return out


def test_pack_auto_says_how_many_and_why_and_changes_no_run(tmp_path):
    plain, packed, tmp = tmp_path / "plain", tmp_path / "packed", tmp_path / "tmp"
    for d in (plain, packed, tmp):
        d.mkdir()
    for d in (plain, packed):
        (d / "train.yaml").write_text(GRID)
    # no thread count exported: runs at once on the CPU, probes and sweep alike, share the profile's threads
    whole = int(json.loads(envkit("profile", "show", "cpu", "--resolved", "--json").stdout)["env"]["OMP_NUM_THREADS"]["value"])
    res = envkit("sweep", "train.yaml", "--profile", "cpu", "--pack", "auto", cwd=packed, timeout=300,
                 env={"TMPDIR": str(tmp), "OMP_NUM_THREADS": None})  # TMPDIR: the probes' temporary folders, to see they are gone
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"n at once share {whole} CPU thread" in res.stdout, res.stdout
    line = [ln for ln in res.stdout.splitlines() if re.match(r"pack: \d+ at a time \(", ln)]
    assert len(line) == 1 and "1 alone " in line[0] and "samples/s" in line[0], res.stdout
    n = int(line[0].split()[1])
    assert 1 <= n <= 2 and f"{n} at a time) under" in res.stdout  # the sweep runs that many at once
    # each count was timed on its share of the threads, as the probe runs trained it (torch.get_num_threads)
    assert f"samples/s on {whole} thread" in line[0], line[0]
    assert re.search(rf"2 at once [\d,]+ \([+-]\d+%\) on {max(1, whole // 2)} threads? each", line[0]), line[0]
    share = str(max(1, whole // n))
    for run in ("seed-0", "seed-1"):
        assert json.loads((packed / "runs" / "pk" / run / "environment.json").read_text())["environ"]["OMP_NUM_THREADS"] == share
    # the same sweep one at a time, each run with the thread count the packed one had (on the CPU the
    # count is part of the arithmetic)
    ref = envkit("sweep", "train.yaml", "--profile", "cpu", cwd=plain, timeout=300, env={"OMP_NUM_THREADS": share})
    assert ref.returncode == 0, ref.stdout + ref.stderr
    # every run completed, with the losses of the sweep run without --pack (same seeds): the probes changed nothing
    assert _losses(packed) == _losses(plain) and all(v[:2] == ("completed", 10) for v in _losses(packed).values())
    # the probes left no run folder, no file in a run folder, and no temporary folder
    assert sorted(p.name for p in (packed / "runs" / "pk").iterdir()) == ["seed-0", "seed-1"]
    for run in ("seed-0", "seed-1"):
        names = {p.name for p in (packed / "runs" / "pk" / run).iterdir()} - {"console.log"}  # console.log: 2 at once
        assert names == {p.name for p in (plain / "runs" / "pk" / run).iterdir()}
        assert (packed / "runs" / "pk" / run / "train.log").read_text().count("training mlp for") == 1
    assert [p.name for p in tmp.iterdir() if p.name.startswith("envkit-")] == []  # (torch keeps its own caches there)


def test_pack_refuses_bad_input_in_one_line(tmp_path):
    (tmp_path / "train.yaml").write_text(GRID)
    for args, said in ((["--pack", "two"], "expected auto or a number"), (["--pack", "0"], "expected auto or a number"),
                       (["--pack", "auto", "--parallel", "2"], "--pack and --parallel")):
        res = envkit("sweep", "train.yaml", "--profile", "cpu", *args, cwd=tmp_path, timeout=120)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and said in res.stderr, res.stderr
    assert not (tmp_path / "runs").exists()


def test_a_probe_counts_a_runs_length_in_the_units_it_times(tmp_path):
    """The probe weighs a run's length against its throughput, so both must be in one unit: for a
    token model with accumulation, one epoch is what the run's own steps train, in tokens (a
    length in sequences made a gpt run look block_size times shorter than it is)."""
    from envkit.bench.stages import StagedClock
    from envkit.config.config import load_config
    from envkit.train.run.loop import train

    cfg = load_config(None, data={
        "experiment": {"seed": 0}, "dataset": {"type": "synthetic", "task": "arithmetic", "digits": 2, "num_samples": 600},
        "model": {"type": "gpt", "n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 20}, "device": {"type": "cpu"},
        "training": {"epochs": 1, "batch_size": 4, "grad_accum": 2, "compile": False},
        "eval": {"every_steps": 0}, "checkpoint": {"every_steps": 0}, "logging": {"progress": "none", "device_seconds": 0}})
    seen: dict = {}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = train(cfg, run_dir, resume="never", handle_signals=False, on_step=lambda **kw: seen.update(kw) or False)
    assert result.status == "completed" and seen["unit"] == "tokens" and seen["per_step"] == 4 * 2 * 20
    length = StagedClock(None, str(tmp_path), 0, None, run_length={"epochs": 1})._run_samples(seen["per_step"], seen["epoch_samples"])
    assert abs(length - result.max_steps * seen["per_step"]) <= seen["per_step"], (length, result.max_steps)  # ceil of a last half step
