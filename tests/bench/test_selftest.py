"""`envkit selftest` on real torch (CPU here, CUDA with -m gpu): probes in child interpreters,
injected crashes, hangs and wrong numbers, the CLI's exit codes and JSON.

Runtime budget: ~40-70 s on a loaded 2-core machine (quick runs; one non-quick compile probe).
"""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from conftest import envkit, has_cuda
from envkit.errors import EnvkitError
from envkit.selftest import PROBES, ProbeResult, SelftestReport, render_report, resolve_device, resolve_precision, run_selftest
from envkit.selftest.advice import advise
from envkit.selftest.report import render_plain, render_rich

torch = pytest.importorskip("torch")  # the envkit imports above do not import torch; the probes do

CLEAN = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder with a profile whose DataLoader uses 2 spawn workers (persistent)."""
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "cpu-workers.toml").write_text(
        'description = "cpu with DataLoader workers (test)"\nextends = "cpu"\n\n'
        "[dataloader]\nnum_workers = 2\npersistent_workers = true\nprefetch_factor = 2\n")
    monkeypatch.chdir(tmp_path)
    for k in [k for k in os.environ if k.startswith(("PYTORCH_", "ENVKIT_"))]:
        monkeypatch.delenv(k)
    return tmp_path


# ------------------------------------------------------------------ the real thing, on the CPU

def test_quick_cli_on_cpu_passes_every_probe_with_workers(project):
    r = envkit("selftest", "--device", "cpu", "--quick", "--json", "--profile", "cpu-workers", cwd=project, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(r.stdout)
    assert set(data) >= {"ok", "device", "device_name", "python", "torch", "profile", "precision", "quick", "seconds",
                         "summary", "probes"}
    assert data["ok"] is True and data["device"] == "cpu" and data["profile"] == "cpu-workers" and data["quick"] is True
    assert [p["name"] for p in data["probes"]] == PROBES
    for p in data["probes"]:
        assert set(p) >= {"name", "status", "error", "tolerance", "seconds", "message", "fix", "check"}
        assert p["status"] in ("pass", "skip"), p
    by = {p["name"]: p for p in data["probes"]}
    skipped = {n for n, p in by.items() if p["status"] == "skip"}
    assert skipped == {"compile", "autocast"}  # compile: --quick; autocast: the cpu profile trains in fp32
    for name in ("matmul", "softmax", "layernorm", "conv2d", "sdpa", "backward"):
        assert by[name]["error"] is not None and by[name]["error"] <= by[name]["tolerance"]
    assert {"float32", "bfloat16"} <= set(by["matmul"]["details"]["dtypes"])
    assert "transposed" in by["matmul"]["message"] and "strided" in by["matmul"]["message"]
    dl = by["dataloader"]["details"]
    assert dl["num_workers"] == 2 and dl["context"] == "spawn" and dl["persistent_workers"] is True
    assert dl["batches"] == 16  # 8 batches, two epochs over persistent workers
    assert by["throughput"]["details"]["cpu_float32_tflops"] > 0


def test_injected_crash_hang_and_wrong_numbers_fail_only_those(project):
    seen = []
    env = {**CLEAN, "ENVKIT_SELFTEST_INJECT": "matmul=crash,softmax=hang,layernorm=wrong"}
    report = run_selftest(device="cpu", profile="cpu", quick=True, env=env, timeouts={"softmax": 1},
                          on_probe=seen.append)
    by = {p.name: p for p in report.probes}
    assert [p.name for p in report.probes] == PROBES
    assert sorted(p.name for p in seen) == sorted(PROBES)  # the callback saw every probe
    failed = {p.name for p in report.probes if p.status == "fail"}
    assert failed == {"matmul", "softmax", "layernorm"}
    assert not report.ok and report.exit_code == 1

    crash = by["matmul"]
    assert crash.kind == "crash" and "SIGABRT" in crash.message and "Abort trap" in crash.message
    assert "injected crash in matmul" in crash.message  # the stderr tail names what happened
    hang = by["softmax"]
    assert hang.kind == "timeout" and "hung" in hang.message and hang.seconds == 1  # its own timeout, counted from its start
    wrong = by["layernorm"]
    assert wrong.kind == "wrong" and wrong.error > wrong.tolerance and "wrong numbers" in wrong.message
    for p in (crash, hang, wrong):
        assert p.fix and "envkit doctor" in p.fix and p.check

    # everything else still ran, in fresh interpreters, and passed
    for name in set(PROBES) - failed:
        assert by[name].status in ("pass", "skip"), by[name]
    assert {n for n, p in by.items() if p.status == "skip"} == {"compile", "autocast"}

    lines = []
    render_report(report, echo=lines.append)
    text = "\n".join(lines)
    assert "[FAIL] matmul" in text and "[FAIL] softmax" in text and "[FAIL] layernorm" in text
    assert "[ok]   sdpa" in text and "the device is NOT ready" in text and "-> " in text


def test_a_probe_broken_by_the_probe_before_it_is_run_again_alone_and_named_a_neighbours_fault(project):
    """The shared worker (the default, full run or --quick): layernorm fails only after another probe
    ran in its interpreter. It runs again alone and passes there: a warning naming softmax (the probe
    before it), not a failure of the device, and the self-test exits 0."""
    seen = []
    env = {**CLEAN, "ENVKIT_SELFTEST_INJECT": "layernorm=raise-shared"}
    report = run_selftest(device="cpu", profile="cpu", quick=True, env=env, on_probe=seen.append,
                          probes=["device", "softmax", "layernorm", "conv2d"])
    by = {p.name: p for p in report.probes}
    assert not report.isolate and report.ok and report.exit_code == 0
    ln = by["layernorm"]
    assert (ln.status, ln.kind) == ("warn", "neighbour"), ln
    assert ln.message.startswith("failed after softmax in a shared interpreter (exception: RuntimeError: injected error in layernorm)")
    assert "then passed alone in a fresh one" in ln.message and ln.error is not None and ln.error <= ln.tolerance
    assert ln.details["after"] == "softmax" and ln.details["shared_run"]["status"] == "fail"
    assert ln.fix and "works for this probe alone" in ln.fix and "after softmax" in ln.fix
    assert by["conv2d"].status == "pass" and [p.name for p in seen] == ["device", "softmax", "layernorm", "conv2d"]  # once each


def test_a_probe_that_fails_again_alone_is_the_devices_failure(project):
    """The same probe broken in every interpreter: run again alone, it fails there too, and that is
    what is reported (the shared run kept in its details)."""
    env = {**CLEAN, "ENVKIT_SELFTEST_INJECT": "layernorm=raise"}
    report = run_selftest(device="cpu", profile="cpu", quick=True, env=env, probes=["device", "softmax", "layernorm", "conv2d"])
    by = {p.name: p for p in report.probes}
    assert not report.ok and report.exit_code == 1
    ln = by["layernorm"]
    assert (ln.status, ln.kind) == ("fail", "exception") and ln.details["traceback"]
    assert ln.message == ("RuntimeError: injected error in layernorm (after softmax in a shared interpreter, "
                          "and again alone in a fresh one)")
    assert ln.details["shared_run"]["message"] == "RuntimeError: injected error in layernorm"
    assert by["conv2d"].status == "pass"


def test_a_probe_that_failed_shared_and_then_hangs_alone_is_reported_as_the_hang():
    """The second run's outcome is what is reported: a hang alone (a warning for compile) keeps its
    status and says what the shared run saw, rather than calling a timeout a pass."""
    from envkit.selftest.runner import _confirmed

    hang = {"name": "compile", "status": "warn", "kind": "timeout", "message": "no result within 420 s: the probe hung"}
    first = {"name": "compile", "status": "fail", "kind": "exception", "message": "RuntimeError: x"}
    got = _confirmed(hang, (first, "dataloader"))
    assert (got["status"], got["kind"]) == ("warn", "timeout") and got["details"]["shared_run"] == first
    assert got["message"] == ("no result within 420 s: the probe hung, run alone after it failed after dataloader in a "
                              "shared interpreter (exception: RuntimeError: x)")


def test_a_later_interpreter_that_does_not_start_fails_its_probes_rather_than_leaving_them_out(project, tmp_path):
    """The first worker starts; every later one exits at once (an interpreter that stopped working
    mid-run). The probes they were to run are failures in the report, which is not ok."""
    count, wrapper = tmp_path / "starts", tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\necho x >> {count}\n[ $(wc -l < {count}) -gt 1 ] && exit 3\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    report = run_selftest(python=str(wrapper), device="cpu", profile="cpu", quick=True, env=CLEAN, isolate=True,
                          probes=["device", "softmax", "layernorm"])
    by = {p.name: p for p in report.probes}
    assert by["device"].status == "pass" and not report.ok and report.exit_code == 1
    for name in ("softmax", "layernorm"):
        assert by[name].status == "fail" and by[name].message == "not run: no fresh interpreter started for it (exit code 3)", by[name]


def test_isolate_gives_every_probe_its_own_interpreter_and_catches_a_segfault(project):
    env = {**CLEAN, "ENVKIT_SELFTEST_INJECT": "sdpa=segv,device=raise"}
    report = run_selftest(device="cpu", profile="cpu", quick=True, env=env, isolate=True,
                          probes=["device", "sdpa", "conv2d"])
    by = {p.name: p for p in report.probes}
    assert by["device"].status == "fail" and by["device"].kind == "exception" and "injected error" in by["device"].message
    assert by["device"].details["traceback"]
    assert by["sdpa"].status == "fail" and "SIGSEGV" in by["sdpa"].message
    assert by["conv2d"].status == "pass"
    assert report.isolate and report.to_dict()["isolate"] is True


def test_cli_exit_1_and_json_on_wrong_numbers(project):
    r = envkit("selftest", "--device", "cpu", "--quick", "--json", "--profile", "cpu", cwd=project,
               env={"ENVKIT_SELFTEST_INJECT": "conv2d=wrong,backward=wrong"}, timeout=240)
    assert r.returncode == 1, r.stdout + r.stderr
    data = json.loads(r.stdout)
    assert data["ok"] is False and data["summary"]["fail"] == 2
    by = {p["name"]: p for p in data["probes"]}
    assert by["conv2d"]["status"] == "fail" and by["conv2d"]["error"] > by["conv2d"]["tolerance"]
    assert by["backward"]["status"] == "fail" and "AdamW step off" in by["backward"]["message"]
    assert by["backward"]["kind"] == "wrong-optimizer" and "pytorch#118115" in by["backward"]["fix"]
    assert all(p["status"] in ("pass", "skip") for n, p in by.items() if n not in ("conv2d", "backward"))


def test_cli_plain_output_is_a_table(project):
    r = envkit("selftest", "--device", "cpu", "--quick", "--profile", "cpu", cwd=project, timeout=240,
               env={"ENVKIT_SELFTEST_TIMEOUT_SCALE": "2"})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("envkit selftest  device cpu") and "profile cpu" in lines[0]
    assert any(ln.startswith("[ok]   matmul") for ln in lines)
    assert any(ln.startswith("[skip] compile") for ln in lines)
    assert "13 probes: 11 passed, 2 skipped" in lines[-1] and "the device works" in lines[-1]


def test_compile_probe_passes_on_cpu_without_quick(project):
    report = run_selftest(device="cpu", profile="cpu", quick=False, env=CLEAN, probes=["compile"])
    (p,) = report.probes
    assert p.status == "pass", p  # a C++ compiler is here: Inductor must work and match eager
    assert report.isolate is False  # the full run shares one worker too (a failure after others runs again alone)
    assert p.error is not None and p.error <= p.tolerance


# ------------------------------------------------------------------ bad input: exit 2, one line

@pytest.mark.skipif(has_cuda(), reason="this machine has CUDA")
def test_cli_missing_device_is_exit_2_naming_the_doctor_check(project):
    r = envkit("selftest", "--device", "cuda", "--quick", cwd=project, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("envkit: error: no CUDA device") and "check `cuda`" in err[0]
    r = envkit("selftest", "--device", "mps", "--quick", cwd=project, timeout=120)
    assert r.returncode == 2 and "check" in r.stderr and "`mps`" in r.stderr


def test_cli_unknown_profile_and_python_are_exit_2(project):
    r = envkit("selftest", "--profile", "no-such-profile", cwd=project, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("envkit: error:") and "unknown profile" in r.stderr
    r = envkit("selftest", "--profile", "cpu", "--python", str(project / "nope" / "python"), cwd=project, timeout=60)
    assert r.returncode == 2 and "no such interpreter" in r.stderr


def test_interpreter_without_torch_fails_with_the_doctor_check(project):
    # an interpreter that cannot import torch: this venv's python without site-packages
    wrapper = project / "python-no-torch"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    report = run_selftest(python=str(wrapper), device="cpu", profile="cpu", env=CLEAN, quick=True)
    assert not report.ok and [p.name for p in report.probes] == ["torch"]
    assert "No module named 'torch'" in report.probes[0].message and report.probes[0].check == "torch"


def test_help_and_import_do_not_import_torch():
    code = ("import sys, envkit.cli, envkit.selftest, envkit.commands.selftest, envkit.selftest.report; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    r = __import__("subprocess").run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = envkit("selftest", "--help", timeout=60)
    assert r.returncode == 0 and "--quick" in r.stdout and "--isolate" in r.stdout


# ------------------------------------------------------------------ pure parts

def test_resolve_precision():
    info = {"torch_version_tuple": [2, 8], "dtypes": {"cuda": ["float32", "bfloat16", "float16"], "cpu": ["float32", "bfloat16"],
                                                      "mps": ["float32", "float16"]}}
    assert resolve_precision("auto", "cuda", info) == ("bf16", None)
    assert resolve_precision("auto", "cpu", info)[0] == "fp32"
    assert resolve_precision("auto", "mps", info)[0] == "fp16"  # no bf16 below macOS 14
    assert resolve_precision("auto", "mps", {**info, "dtypes": {"mps": ["float32", "bfloat16", "float16"]}})[0] == "bf16"
    assert resolve_precision("auto", "mps", {**info, "torch_version_tuple": [2, 4]})[0] == "fp32"
    assert resolve_precision("auto", "cuda", {**info, "dtypes": {"cuda": ["float32", "float16"]}})[0] == "fp16"
    assert resolve_precision("bf16", "cpu", info) == ("bf16", None)


def test_resolve_device():
    info = {"torch": "2.13.0+cpu", "available": {"cpu": True, "cuda": False, "mps": False}}
    assert resolve_device("auto", None, info, "py") == "cpu"
    assert resolve_device("auto", "cpu", {**info, "available": {"cpu": True, "cuda": True}}, "py") == "cpu"
    assert resolve_device("auto", "auto", {**info, "available": {"cpu": True, "cuda": True}}, "py") == "cuda"
    with pytest.raises(EnvkitError, match="no CUDA device") as exc:
        resolve_device("cuda", None, info, "py")
    assert "check `cuda`" in exc.value.one_line()
    with pytest.raises(EnvkitError, match="MPS is not available"):
        resolve_device("auto", "mps", info, "py")  # the profile trains on MPS, this machine has none


@pytest.mark.parametrize("result,device,check", [
    ({"name": "dataloader", "status": "fail", "kind": "timeout"}, "mps", "dataloader.num_workers"),
    ({"name": "compile", "status": "warn", "kind": "unsupported"}, "mps", "compile"),
    ({"name": "matmul", "status": "fail", "kind": "wrong-lowp"}, "mps", "train.precision"),
    ({"name": "softmax", "status": "fail", "kind": "nan"}, "mps", "mps"),
    ({"name": "layernorm", "status": "fail", "kind": "not-implemented"}, "mps", "env-vars"),
    ({"name": "device", "status": "fail", "kind": "bf16-mps"}, "mps", "bf16"),
    ({"name": "matmul", "status": "fail", "kind": "crash", "message": "OMP: Error #15: Initializing libiomp5"}, "cpu", "openmp"),
    ({"name": "dataloader", "status": "warn", "kind": "pin-memory"}, "mps", "dataloader.pin_memory"),
])
def test_every_failure_points_at_a_fix(result, device, check):
    fix, got = advise(result, device)
    assert got == check and fix


def test_rich_render_shows_fix_under_a_failure():
    from rich.console import Console

    rep = SelftestReport(device="mps", device_name="Apple GPU (MPS)", python="py", torch="2.8.0", profile="m3-max",
                         precision="bf16", quick=True, seconds=1.5)
    rep.probes = [ProbeResult("matmul", "pass", 0.1, 1e-6, 1e-4, "fp32 1e-6"),
                  ProbeResult("softmax", "fail", 0.2, float("inf"), 1e-4, "NaN/inf vs the float64 CPU reference", fix="upgrade torch", check="mps")]
    con = Console(record=True, width=160)
    render_rich(rep, con)
    out = con.export_text()
    assert "softmax" in out and "NaN/inf" in out and "→ upgrade torch" in out and "NOT ready" in out
    rep.probes.append(ProbeResult("layernorm", "fail", 0.1, float("nan"), 1e-4, "NaN vs the float64 CPU reference"))
    doc = json.loads(json.dumps(rep.to_dict(), allow_nan=False))  # inf/NaN errors stay valid (strict) JSON
    assert [p["error"] for p in doc["probes"]] == [1e-6, None, None]
    assert doc["probes"][1]["fix"] == "upgrade torch" and doc["ok"] is False
    lines = []
    render_plain(rep, lines.append)
    assert lines[0].startswith("envkit selftest  device mps (Apple GPU (MPS)), torch 2.8.0, profile m3-max")


# ------------------------------------------------------------------ real CUDA (the lent H100)

@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs a CUDA device")
def test_full_selftest_on_cuda_passes_with_bf16(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    report = run_selftest(device="cuda", env=CLEAN)
    lines = []
    render_report(report, echo=lines.append)
    print("\n".join(lines))
    assert report.device == "cuda" and report.precision == "bf16"
    by = {p.name: p for p in report.probes}
    assert [p.name for p in report.probes] == PROBES
    assert report.ok, "\n".join(lines)
    assert all(p.status == "pass" for p in report.probes), "\n".join(lines)  # compile included, on a GPU box
    assert "bfloat16" in by["matmul"].details["dtypes"] and by["autocast"].details["dtype"] == "bfloat16"
    assert by["throughput"].details["cuda_bfloat16_tflops"] > by["throughput"].details["cpu_float32_tflops"]
    assert by["bandwidth"].details["h2d_pinned_gbps"] > 0
    assert by["memory"].details["max_allocated_mb"] >= 256


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs a CUDA device")
def test_quick_cli_on_cuda_json(tmp_path):
    r = envkit("selftest", "--device", "cuda", "--quick", "--json", cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(r.stdout)
    assert data["ok"] and data["device"] == "cuda" and data["precision"] == "bf16"
    assert {p["name"]: p["status"] for p in data["probes"]}["autocast"] == "pass"
