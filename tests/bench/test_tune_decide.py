"""The tuner's and the ladder's decisions as pure functions: recorded measurements (Mac ones
included, which this machine cannot make) and replayed snapshots in, decisions out."""

from __future__ import annotations

import pytest

from conftest import snapshot_path
from envkit.bench.ladder import LOSS_TOLERANCE, build_ladder, judge, low_precision
from envkit.bench.spec import RunResult
from envkit.errors import EnvkitError
from envkit.tune import decide
from envkit.tune.decide import Measurement as M
from envkit.tune.session import parse_budget


def ladder_for(snapshot: str, model: str = "gpt", **kw):
    from envkit.checks import best_device, run_checks
    from envkit.facts import gather

    facts = gather(str(snapshot_path(snapshot)), runtime=True)
    checks = {c.id: c for c in run_checks(facts)}
    return {r.name: r for r in build_ladder(facts, checks, best_device(facts), model, **kw)}


def test_cpu_machine_runs_cpu_rungs_and_skips_device_rungs_naming_the_cuda_check():
    rungs = ladder_for("linux_no_gpu")
    assert [n for n, r in rungs.items() if not r.skip] == ["cpu fp32", "cpu + compile", "cpu + profile"]
    # fp32, bf16, compile, profile, cuda graphs, ddp, fsdp: channels_last is the cnn's
    device = [r for r in rungs.values() if r.device == "cuda"]
    assert len(device) == 7 and all(r.skip and r.check == "cuda" for r in device)


def test_m3_max_climbs_mps_with_bf16_and_m1_with_fp16_where_bf16_is_emulated():
    m3 = ladder_for("m3_max_macos14")
    assert "mps + bf16" in m3 and m3["mps + bf16"].settings["precision"] == "bf16"
    assert "cpu + compile" not in m3  # CPU rungs beyond the baseline only where the CPU is the target
    m2 = ladder_for("m2_max_macos13")  # macOS 13: no bf16 on MPS (and M2 emulates it): fp16 instead
    assert "mps + fp16" in m2 and m2["mps + fp16"].settings["precision"] == "fp16" and not m2["mps + fp16"].skip
    # an M1 on macOS 14 with torch 2.9: the gates allow bf16 on MPS, but the M1 emulates it: fp16
    m1 = ladder_for("m1_ultra")
    assert "mps + bf16" not in m1 and m1["mps + fp16"].settings["precision"] == "fp16" and not m1["mps + fp16"].skip
    # channels_last is the cnn's: the gpt's ladder on MPS has no such rung, the cnn's has
    assert "mps + channels last" not in m3 and not ladder_for("m3_max_macos14", model="cnn")["mps + channels last"].skip


def test_m1_low_precision_is_fp16_not_emulated_bf16():
    from envkit.checks import run_checks
    from envkit.facts import gather

    facts = gather(str(snapshot_path("m1_ultra")), runtime=True)
    prec, why = low_precision("mps", facts, {c.id: c for c in run_checks(facts)})
    assert prec == "fp16" and "emulated" in why


def test_h100_ladder_is_cumulative_and_its_top_rung_is_what_envkit_run_does():
    rungs = ladder_for("real_h100")
    names = list(rungs)
    assert names[0] == "cpu fp32" and "cuda + bf16" in names
    runnable = [n for n in names if not rungs[n].skip]
    assert runnable[-2:] == ["cuda + profile", "cuda + cuda graphs"]
    assert rungs["cuda + profile"].settings == {"precision": "bf16", "compile": True, "profile": True}
    # fused AdamW is the trainer's step on CUDA, in every rung: no rung pretends to add it; no channels_last for the gpt
    assert "cuda + channels last" not in rungs and "fused" not in str([r.settings for r in rungs.values()])
    cnn = ladder_for("real_h100", model="cnn")
    assert not cnn["cuda + channels last"].skip and cnn["cuda + channels last"].settings["channels_last"] is True


def test_h100_ladder_adds_cuda_graphs_on_top_of_compile_and_data_on_device_for_in_memory_data():
    rungs = ladder_for("real_h100", model="cnn", on_device_data=True)
    names = list(rungs)
    graphs, data = rungs["cuda + cuda graphs"], rungs["cuda + data on device"]
    assert names[-5:] == ["cuda + channels last", "cuda + cuda graphs", "cuda + data on device", "cuda + ddp", "cuda + fsdp"]
    assert not graphs.skip and graphs.settings["compile"] is True and graphs.settings["compile_mode"] == "reduce-overhead"
    assert "training.compile_mode: reduce-overhead" in graphs.changes
    # the device rungs before it build batches with the DataLoader, so this rung measures the difference
    before = names[:names.index(data.name)]
    assert all(rungs[n].settings["on_device"] is False for n in before if rungs[n].device == "cuda")
    # the data-parallel rungs after it keep what the rung before them had, data on the device too
    assert all(rungs[n].settings["on_device"] is True for n in ("cuda + ddp", "cuda + fsdp"))
    assert not data.skip and data.settings["on_device"] is True and data.settings["compile_mode"] == "reduce-overhead"
    assert data.changes.startswith("dataset.on_device: true")
    # token files and generated images are not held on the device: no such rung is listed
    assert "cuda + data on device" not in ladder_for("real_h100", model="gpt")
    # --no-compile skips the CUDA graphs rung too (it is a compile mode)
    assert ladder_for("real_h100", no_compile=True)["cuda + cuda graphs"].short == "--no-compile"


def test_cuda_graphs_are_skipped_on_a_mac_in_one_short_reason():
    g = ladder_for("m3_max_macos14")["mps + cuda graphs"]
    assert g.skip and g.short == "CUDA graphs are CUDA only" and g.check is None
    assert "mps + cuda graphs" in ladder_for("m3_max_macos14") and not ladder_for("m3_max_macos14")["mps + profile"].settings.get("compile_mode")


def test_a_failed_cuda_graphs_rung_leaves_the_later_rungs_on_the_default_compile_mode():
    from envkit.bench.ladder import carry_forward

    rungs = list(ladder_for("real_h100", model="cnn", on_device_data=True).values())
    i = next(j for j, r in enumerate(rungs) if r.name == "cuda + cuda graphs")
    notes = carry_forward(rungs, i, ok=False)
    later = [r for r in rungs[i + 1:] if r.device == "cuda" and not r.skip]  # one H100: the ddp and fsdp rungs are skipped
    assert later and all(r.settings["compile_mode"] == "default" and r.settings["compile"] is True for r in later)
    assert notes and all("without compile_mode" in n for n in notes)


def test_data_on_device_applies_to_in_memory_data_sets_only():
    from envkit.bench.ladder import data_can_live_on_device as can
    from envkit.config.schema import Dataset

    assert can(Dataset(type="cifar10")) and can(Dataset(type="npz")) and can(Dataset(type="synthetic", task="teacher"))
    assert not can(Dataset(type="tokens")) and not can(Dataset(type="synthetic", task="images")) and not can(Dataset(type="imagefolder"))


def test_a_rung_whose_loss_departs_is_flagged_not_celebrated():
    base = RunResult("cpu fp32", "ok", per_second=100.0, loss=2.0)
    judge(base, base)
    fast_wrong = RunResult("x", "ok", per_second=500.0, loss=2.0 * (1 + LOSS_TOLERANCE) + 0.01)
    judge(fast_wrong, base)
    assert fast_wrong.status == "flagged" and fast_wrong.speedup == pytest.approx(5.0) and "tolerance" in fast_wrong.reason
    fine = RunResult("y", "ok", per_second=300.0, loss=2.05)
    judge(fine, base)
    assert fine.status == "ok" and fine.speedup == pytest.approx(3.0)
    nan = RunResult("z", "ok", per_second=300.0, loss=float("nan"))
    judge(nan, base)
    assert nan.status == "flagged"


def test_pick_needs_a_margin_and_never_takes_a_failed_or_loss_changing_candidate():
    inc = M(2, "ok", 1000.0, loss=1.0)
    win, why = decide.pick(inc, [M(1, "ok", 1030.0, loss=1.0)])
    assert win is inc  # 3% is noise on a shared machine
    win, why = decide.pick(inc, [M(1, "ok", 1300.0, loss=1.0), M(4, "fail", None, reason="crash")])
    assert win.value == 1 and "1,300" in why and "1,000" in why and "4 failed" in why
    win, _ = decide.pick(inc, [M("bf16", "ok", 3000.0, loss=1.5)])
    assert win is inc  # faster but a different training


def test_choose_batch_fastest_that_fits_with_headroom_and_accum_keeps_effective_batch():
    # recorded on a 16 GB M1 (MPS unified memory): 64 ran but above 80% of memory, 128 ran out of memory
    mem = 16 * 1024
    measured = [M(32, "ok", 1310.0, peak_memory_mb=5000), M(16, "ok", 900.0, peak_memory_mb=2600),
                M(64, "ok", 1840.0, peak_memory_mb=14500), M(128, "fail", oom=True)]
    batch, accum, why = decide.choose_batch(measured, shipped_batch=32, shipped_accum=1, device_memory_mb=mem)
    assert (batch, accum) == (32, 1)
    assert "largest that fits: 32" in why and "128 (out of memory)" in why and "64 (over the headroom)" in why
    measured = [M(32, "ok", 1310.0, peak_memory_mb=5000), M(16, "ok", 1840.0, peak_memory_mb=2600), M(64, "fail", oom=True)]
    batch, accum, why = decide.choose_batch(measured, 32, 1, mem)
    assert (batch, accum) == (16, 2) and "effective batch of 32" in why


def test_empty_cache_never_unless_never_does_not_fit():
    mem = 8 * 1024  # an 8 GB M1
    fits_all = [M(0, "ok", 1000.0, peak_memory_mb=4000), M(10, "ok", 880.0, peak_memory_mb=3500), M(50, "ok", 990.0, peak_memory_mb=3900)]
    assert decide.choose_empty_cache(fits_all, shipped=10, device_memory_mb=mem)[0] == 0
    tight = [M(0, "ok", 1000.0, peak_memory_mb=7600), M(10, "ok", 850.0, peak_memory_mb=5000), M(50, "ok", 950.0, peak_memory_mb=6000)]
    every, why = decide.choose_empty_cache(tight, shipped=0, device_memory_mb=mem)
    assert every == 50 and "every 0: no headroom" in why


def test_watermark_ratios_are_never_written_and_zero_is_refused():
    """No proposal becomes an env var; each value that differs from PyTorch's default (0.0 above
    all) is named as not written, and a default one is not (it changes nothing)."""
    env, why = decide.watermark_settings({"PYTORCH_MPS_HIGH_WATERMARK_RATIO": 0.0, "PYTORCH_MPS_LOW_WATERMARK_RATIO": 1.4})
    assert env == {} and "system failure" in why
    assert why.endswith("not written: PYTORCH_MPS_HIGH_WATERMARK_RATIO")
    env, why = decide.watermark_settings({"PYTORCH_MPS_HIGH_WATERMARK_RATIO": 1.7, "PYTORCH_MPS_LOW_WATERMARK_RATIO": 1.2})
    assert env == {} and why.endswith("not written: PYTORCH_MPS_LOW_WATERMARK_RATIO")
    env, why = decide.watermark_settings()
    assert env == {} and "not written" not in why


def test_candidates():
    assert decide.thread_candidates(2, cores=2, logical=2) == [1]
    assert decide.worker_candidates(0, cores=10, device="mps") == [2, 4]
    assert decide.worker_candidates(0, cores=2, device="cpu") == []
    assert decide.precision_candidates("mps", "fp16", "fp32") == ["fp16"]


def test_largest_batch_that_fits_is_found_by_doubling_then_bisection_from_what_fits():
    """A pretend device that holds 40 samples: from 16, the search doubles to 32 (fits), 64 (does
    not), then bisects 32..64: 48 (no), 40 (yes), and stops: 48 is within a quarter of 40."""
    holds = 40
    fits, too_big, asked = [16], [], []
    while (b := decide.next_batch(fits, too_big, start=16)) is not None:
        asked.append(b)
        (fits if b <= holds else too_big).append(b)
    assert asked == [32, 64, 48, 40] and max(fits) == 40
    # the shipped batch did not fit and the trainer split it to 64: bisect up from what fits
    assert decide.next_batch([64], [128], start=64) == 96
    assert decide.next_batch([16], [20], start=16) is None  # within a quarter: done
    assert decide.next_batch([256], [], start=64) is None  # grown 4x from the start: done
    assert decide.next_batch([], [16], start=16) is None  # nothing fits: nothing to bisect from


def test_a_batch_that_does_not_fit_says_what_it_asked_for():
    measured = [M(16, "ok", 900.0, "tokens", batch_size=16), M(32, "fail", oom=True, batch_size=32, asked="2.00 GiB"),
                M(24, "fail", oom=True, batch_size=24, asked="1.50 GiB")]
    batch, accum, why = decide.choose_batch(measured, shipped_batch=32, shipped_accum=1, device_memory_mb=None)
    assert (batch, accum) == (16, 2)
    assert "too big: 24 (does not fit: asked for 1.50 GiB), 32 (does not fit: asked for 2.00 GiB)" in why
    assert "grad_accum 2 keeps the effective batch of 32" in why


def test_a_shipped_batch_split_by_the_trainer_is_worded_as_the_batch_search_words_it():
    """When the budget ends right after the shipped run (the trainer split its batch 32 to 16 x 2),
    the batch is decided from that run alone; its reason names what did not fit the same way."""
    from types import SimpleNamespace

    from envkit.tune.search import Settings, TuneResult, _incumbent

    result = TuneResult(base="cpu", device="cpu", model="gpt")
    shipped = Settings(precision="fp32", compile=False, batch_size=32, grad_accum=1, num_workers=0, persistent_workers=False,
                       prefetch_factor=None, pin_memory=False, threads=None, empty_cache_every=0)

    def measure(label, settings, value, split_oom=True):  # what the trainer's child reported
        result.runs.append({"run": label, "grad_accum": 2, "did_not_fit": [{"micro_batch": 32, "asked": "2.00 GiB"}]})
        return M(value, "ok", 900.0, "tokens", batch_size=16)

    base, now = _incumbent(SimpleNamespace(shipped_profile="cpu"), shipped, measure, result)
    assert (now.batch_size, now.grad_accum) == (16, 2)
    (batch,) = [d for d in result.decisions if d.key == "batch_size"]
    assert batch.value == 16 and "too big: 32 (does not fit: asked for 2.00 GiB)" in batch.reason, batch.reason
    assert "the effective batch of 32 is kept" in batch.reason


@pytest.mark.parametrize("text,seconds", [("5m", 300), ("90s", 90), ("1h", 3600), ("2m30s", 150), ("20", 20)])
def test_parse_budget(text, seconds):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["five", "5x", "0", "-1m"])
def test_bad_budget_is_one_clear_error(text):
    with pytest.raises(EnvkitError) as e:
        parse_budget(text)
    assert "--budget" in e.value.one_line()


def test_budget_running_out_inside_the_batch_search_keeps_the_best_batch_measured():
    """Measured on the H100: batch 256 (1.37M tokens/s) beat the shipped 128 (0.86M) before the
    budget ran out ahead of 512; the tuned profile must keep 256, not drop the whole dimension."""
    from types import SimpleNamespace

    from envkit.tune import search

    shipped = search.Settings("bf16", True, 128, 1, 8, True, 2, True, None, 0)
    ctx = SimpleNamespace(target="cuda", facts=SimpleNamespace(gpus=[SimpleNamespace(memory_bytes=80 * 2**30)]))
    rates = {64: 388_528.0, 256: 1_366_803.0}

    def measure(label, s, value, expensive=False):
        if value == 512:
            raise search._Budget(label)
        return M(value, "ok", rates[value], "tokens", 20_000.0, 1.42, batch_size=value)

    base = M(None, "ok", 856_283.0, "tokens", 12_000.0, 1.42, batch_size=128)
    result = search.TuneResult("cuda-hopper", "cuda", "gpt")
    with pytest.raises(search._Budget):
        search._search("batch", ctx, shipped, base, shipped, measure, result)
    (decision,) = [d for d in result.decisions if d.key == "batch_size"]
    assert decision.value == 256 and decision.changed
    assert any("before the budget ran out" in n for n in result.notes)


def test_compile_mode_is_searched_on_cuda_with_compile_on_and_skipped_elsewhere_in_one_line():
    modes, why = decide.compile_mode_candidates("cuda", True, "default")
    assert modes == ["reduce-overhead", "max-autotune-no-cudagraphs"] and why == ""
    for device in ("cpu", "mps"):
        modes, why = decide.compile_mode_candidates(device, True, "default")
        assert modes == [] and why.startswith(f"compile_mode not searched on {device}") and "CUDA graphs" in why and "\n" not in why
    modes, why = decide.compile_mode_candidates("cuda", False, "default")
    assert modes == [] and "compile is off" in why


def test_compile_mode_takes_cuda_graphs_when_faster_with_the_same_loss_and_room_to_spare():
    """Recorded-style figures from an 80 GB H100 (fake, no timing): reduce-overhead 30% faster wins;
    the same figure with a changed loss, or with a peak past the headroom, does not."""
    mem = 80 * 1024
    inc = M("default", "ok", 10_000.0, peak_memory_mb=20_000, loss=2.30)
    win, why = decide.choose_compile_mode(inc, [M("reduce-overhead", "ok", 13_000.0, peak_memory_mb=24_000, loss=2.30),
                                                M("max-autotune-no-cudagraphs", "ok", 10_200.0, peak_memory_mb=20_000, loss=2.30)], mem)
    assert win.value == "reduce-overhead" and "13,000 samples/s with mode reduce-overhead" in why and "10,000" in why
    win, why = decide.choose_compile_mode(inc, [M("reduce-overhead", "ok", 13_000.0, peak_memory_mb=24_000, loss=2.9)], mem)
    assert win is inc and "changed the loss" in why
    win, why = decide.choose_compile_mode(inc, [M("reduce-overhead", "ok", 13_000.0, peak_memory_mb=70_000, loss=2.30)], mem)
    assert win is inc and "mode reduce-overhead over the headroom (70,000 of 81,920 MB" in why
    win, why = decide.choose_compile_mode(inc, [M("reduce-overhead", "fail", reason="cudagraphs: capture failed")], mem)
    assert win is inc and "mode reduce-overhead failed" in why
    win, _ = decide.choose_compile_mode(inc, [M("reduce-overhead", "ok", 10_300.0, peak_memory_mb=20_000, loss=2.30)], mem)
    assert win is inc  # 3% is noise
