"""What "the same" means for `envkit reproduce` (envkit/reproduce/verdict.py, metrics.py), on the
facts and metrics two runs would write: identical is required on the CPU and for a deterministic run
on the same device kind, torch build and process count, and nowhere else; otherwise the largest
difference is held against twice the measured spread, or a stated --tolerance. The machine's own
measurements (times, throughput, memory) never count. The GPU cases are facts as an H100 run
writes them (summary.json), judged without a GPU."""

from __future__ import annotations

import json

import pytest

from envkit.reproduce import metrics, verdict

CPU = {"device": "cpu", "device_name": "cpu", "torch": "2.13.0+cpu", "precision": "fp32", "processes": 1,
       "compile": "off", "deterministic": False}
H100 = {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "precision": "bf16", "processes": 1,
        "compile": "on", "deterministic": False}


@pytest.mark.parametrize("a, b, required, why", [
    (CPU, CPU, True, "both on the CPU"),
    ({**H100, "deterministic": True}, {**H100, "deterministic": True}, True, "deterministic, same device (NVIDIA H100 80GB HBM3)"),
    (H100, H100, False, "not deterministic on NVIDIA H100 80GB HBM3"),
    ({**H100, "deterministic": True}, {**H100, "deterministic": True, "torch": "2.12.0+cu130"}, False,
     "torch 2.11.0+cu130 -> 2.12.0+cu130"),
    (CPU, {**H100, "precision": "fp32"}, False, "device_name cpu -> NVIDIA H100 80GB HBM3; torch 2.13.0+cpu -> 2.11.0+cu130"),
])
def test_identical_is_required_only_where_envkit_fixes_the_kernels(a, b, required, why):
    got, reason = verdict.identical_required(a, b)
    assert got is required and reason.startswith(why)


def _rows(tmp_path, name, rows):
    d = tmp_path / name
    d.mkdir()
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return metrics.read_rows(d)


def test_timings_do_not_count_and_every_logged_step_does(tmp_path):
    a = _rows(tmp_path, "a", [{"step": 5, "loss": 1.0, "dt_ms": 30, "tokens_per_second": 9e5, "device_util_pct": 90, "lr": 1e-3},
                              {"step": 10, "loss": 0.5, "dt_ms": 31, "lr": 9e-4}, {"step": 10, "val_loss": 0.6}])
    b = _rows(tmp_path, "b", [{"step": 5, "loss": 1.0, "dt_ms": 99, "tokens_per_second": 1e5, "device_util_pct": 20, "lr": 1e-3},
                              {"step": 10, "loss": 0.5003, "dt_ms": 98, "lr": 9e-4}, {"step": 10, "val_loss": 0.6}])
    cmp = metrics.compare(a, b)
    assert set(cmp["metrics"]) == {"loss", "lr", "val_loss"} and cmp["steps"] == 2
    loss = cmp["metrics"]["loss"]
    assert loss["first_diff"] == 10 and loss["at_step"] == 10 and loss["max_abs"] == pytest.approx(3e-4)
    assert verdict.decide(cmp, True, None, None)[0] == "different"
    assert verdict.decide(cmp, False, None, {"loss": {"max_abs": 2e-4}})[0] == "within tolerance"  # 3e-4 <= 2 x 2e-4
    assert verdict.decide(cmp, False, None, {"loss": {"max_abs": 1e-4}})[0] == "different"
    assert verdict.decide(cmp, False, 1e-3, None) == ("within tolerance", {"loss": 1e-3, "lr": 1e-3, "val_loss": 1e-3})
    same = metrics.compare(a, a)
    assert verdict.decide(same, True, None, None)[0] == "same"


def test_a_run_from_another_machine_is_held_to_a_tenth_of_a_percent_or_twice_the_spread_here(tmp_path):
    """Per metric, the larger of twice this machine's spread and 1e-3 of the metric's largest |value|
    in the original (over the steps compared), stated even when the runs came out identical."""
    a = _rows(tmp_path, "a", [{"step": 5, "loss": 2.0, "lr": 1e-3}, {"step": 10, "loss": 1.0, "lr": 1e-3}, {"step": 15, "loss": 9.0}])
    b = _rows(tmp_path, "b", [{"step": 5, "loss": 2.0015, "lr": 1e-3}, {"step": 10, "loss": 1.0, "lr": 1e-3}])
    cmp = metrics.compare(a, b, 10)
    bounds = verdict.across_machines(cmp, a, None)
    assert bounds == pytest.approx({"loss": 2e-3, "lr": 1e-6})  # step 15's 9.0 lies beyond the steps compared
    assert verdict.decide(cmp, False, None, None, bounds) == ("within tolerance", bounds)
    wide = verdict.across_machines(cmp, a, {"loss": {"max_abs": 5e-3}})
    assert wide["loss"] == pytest.approx(1e-2)
    tight = metrics.compare(a, _rows(tmp_path, "c", [{"step": 5, "loss": 2.003, "lr": 1e-3}]), 10)
    assert verdict.decide(tight, False, None, None, verdict.across_machines(tight, a, None))[0] == "different"
    same = metrics.compare(a, a, 10)
    assert verdict.decide(same, False, None, None, bounds) == ("same", bounds)


def test_a_cpu_run_reproduced_on_the_gpu_of_the_same_box_is_held_to_the_across_devices_bound():
    """The CPU run of a CUDA box reproduced on its GPU (device auto there): not "another machine"
    (same lock platform) but other kernels all the same, so the relative bound applies, not only
    the GPU's run-to-run spread (which CPU-against-GPU rounding exceeds at once)."""
    assert verdict.other_device_kind(CPU, {**H100, "precision": "fp32"}) == "device cpu -> cuda; device_name cpu -> NVIDIA H100 80GB HBM3"
    assert verdict.other_device_kind(H100, {**H100, "device_name": "NVIDIA A100-SXM4-80GB"}).startswith("device_name NVIDIA H100")
    assert verdict.other_device_kind(H100, {**H100, "torch": "2.12.0+cu130"}) is None  # same device: its spread is the bound
