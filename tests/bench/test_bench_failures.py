"""What bench and tune do when a measurement goes wrong, with real processes: a rung that fails
takes its addition out of the later rungs, a child that crashes or hangs is a failed rung (the
hung one killed with its process group), `tune --dry-run` writes nothing, and a tune whose shipped
settings cannot run writes no profile."""

from __future__ import annotations

import json

import os
import stat
import time
from pathlib import Path

import pytest

from conftest import envkit, snapshot_path
from envkit.bench.runner import run_spec
from envkit.bench.spec import RunSpec


def ladder_for(snapshot: str, model: str = "gpt"):
    from envkit.bench.ladder import build_ladder
    from envkit.checks import best_device, run_checks
    from envkit.facts import gather

    facts = gather(str(snapshot_path(snapshot)), runtime=True)
    checks = {c.id: c for c in run_checks(facts)}
    return build_ladder(facts, checks, best_device(facts), model)


def test_a_failed_rung_is_taken_out_of_the_later_rungs_on_its_device():
    from envkit.bench.ladder import carry_forward

    rungs = ladder_for("real_h100")
    names = [r.name for r in rungs]
    i = names.index("cuda + bf16")
    later_cuda = [r for r in rungs[i + 1:] if r.device == "cuda" and not r.skip]
    assert later_cuda and all(r.settings["precision"] == "bf16" for r in later_cuda)
    assert carry_forward(rungs, i, ok=True) == [] and all(r.settings["precision"] == "bf16" for r in later_cuda)
    notes = carry_forward(rungs, i, ok=False)
    assert all(r.settings["precision"] == "fp32" for r in later_cuda)
    assert notes == [f"{r.name}: without precision (cuda + bf16 did not pass)" for r in later_cuda
                     if "precision" not in r.adds]
    assert rungs[0].device == "cpu" and rungs[0].settings["precision"] == "fp32"  # the CPU baseline is untouched


def _interpreter(tmp_path: Path, body: str) -> str:
    """A stand-in for the bench child's Python that misbehaves the way a broken torch does."""
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


SPEC = RunSpec(name="cuda + compile", device="cpu", config={})


def test_a_child_that_crashes_is_a_failed_rung_naming_the_signal_and_its_last_words(tmp_path):
    python = _interpreter(tmp_path, 'echo "Fatal Python error: Segmentation fault" >&2; kill -SEGV $$')
    r = run_spec(SPEC, python, dict(os.environ), timeout=60)
    assert r.status == "fail" and r.name == "cuda + compile"
    assert r.reason == "the child died of SIGSEGV: Fatal Python error: Segmentation fault"
    python = _interpreter(tmp_path, "exit 3")
    assert run_spec(SPEC, python, dict(os.environ), timeout=60).reason == "the child exited 3 without a result: no output"


def test_a_child_that_hangs_is_killed_with_its_process_group(tmp_path):
    pids = tmp_path / "pids"
    python = _interpreter(tmp_path, f'sleep 300 & echo $! > {pids}; echo $$ >> {pids}; wait')
    r = run_spec(SPEC, python, dict(os.environ), timeout=2)
    assert r.status == "fail" and r.reason == "did not finish within 2 s (killed)"
    deadline = time.monotonic() + 60
    for pid in map(int, pids.read_text().split()):  # the child and what it started (a DataLoader worker) are gone
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _gone(pid), pid


def _gone(pid: int) -> bool:
    """No such process, or a zombie (killed, waiting for a parent that is not this test to reap it)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat_line.rsplit(")", 1)[1].split()[0] in ("Z", "X")


@pytest.fixture
def config_dir(tmp_path):
    d = tmp_path / "config"
    d.mkdir()
    return d


def test_tune_dry_run_measures_and_writes_nothing(tmp_path, config_dir):
    res = envkit("tune", "--model", "mlp", "--seconds", "0.5", "--budget", "40s", "--dry-run", "--no-compile", cwd=tmp_path,
                 env={"ENVKIT_CONFIG_DIR": str(config_dir)}, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "--dry-run: would write" in res.stdout and "cpu-tuned.toml" in res.stdout
    # --no-compile: no candidate compiles, and the note says the profile's setting stays
    assert "compile on" not in res.stdout + res.stderr
    assert "note: compile not measured (--no-compile): the profile's value (off) is kept" in res.stdout
    assert not list(config_dir.rglob("*.toml")) and "wrote profile" not in res.stdout


def test_tune_whose_budget_ends_during_the_first_measurement_says_so_not_that_the_settings_failed(tmp_path, config_dir):
    """A budget shorter than one measurement: the run it cut is the budget's end (skipped, said so),
    not a failure of the shipped settings; nothing decided, no profile, exit 1. --no-compile is said
    even though the budget never reached the compile dimension."""
    res = envkit("tune", "--model", "mlp", "--seconds", "0.5", "--budget", "1s", "--no-compile", "--json", cwd=tmp_path, timeout=120,
                 env={"ENVKIT_CONFIG_DIR": str(config_dir)})
    assert res.returncode == 1, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["stopped"] == "budget" and out["settings"] == [] and out["path"] is None
    assert [(r["run"], r["status"], r["reason"]) for r in out["runs"]] == [
        ("shipped cpu", "skip", "the budget of 1 s (--budget) ran out during this run")]
    assert any(n.startswith("budget of 1 s reached before shipped cpu finished: nothing was measured") for n in out["notes"])
    assert "compile not measured (--no-compile): the profile's value (off) is kept" in out["notes"]
    assert not list(config_dir.rglob("*.toml"))


def test_tune_whose_shipped_settings_cannot_run_writes_no_profile(tmp_path, config_dir):
    """Every micro-batch runs out of memory (down to 1): the baseline fails, the search stops, and
    no profile is written; exit 1 with the reason."""
    res = envkit("tune", "--model", "mlp", "--seconds", "1", "--budget", "60s", cwd=tmp_path, timeout=300,
                 env={"ENVKIT_CONFIG_DIR": str(config_dir), "ENVKIT_TRAIN_INJECT": "oom-above=0"})
    assert res.returncode == 1, res.stdout + res.stderr
    assert not list(config_dir.rglob("*.toml"))
    assert "wrote profile" not in res.stdout and "no profile written" in res.stdout + res.stderr


def test_a_budget_too_short_for_the_ladder_still_measures_the_profile_rung(monkeypatch):
    """The profile rung (everything envkit run turns on) is measured right after the reference, so a
    --budget that holds only two rungs skips the rungs in between, not the figure a user came for;
    the report keeps the ladder's order."""
    from envkit.bench import session
    from envkit.bench.context import BenchContext, template_path
    from envkit.checks import run_checks
    from envkit.facts import gather
    from envkit.config.config import load_config

    facts = gather(str(snapshot_path("real_h100")), runtime=True)
    checks = {c.id: c for c in run_checks(facts)}
    ctx = BenchContext("python", facts, checks, None, "cuda-hopper", load_config(template_path("gpt")), "gpt", "cuda")
    clock = {"now": 0.0}
    monkeypatch.setattr(session.time, "monotonic", lambda: clock["now"])
    measured = []

    def fake_run_spec(spec, python, env, timeout, debug=False, on_progress=None):
        clock["now"] += 50.0  # each rung takes 50 s of a 120 s budget
        measured.append(spec.name)
        return session.RunResult(spec.name, "ok", per_second=1000.0 * (1 + len(measured)), unit="tokens", loss=2.0)

    monkeypatch.setattr(session, "run_spec", fake_run_spec)
    report = session.run_bench(ctx, budget_s=120.0)
    assert measured == ["cpu fp32", "cuda + profile", "cuda fp32"]
    names = [r.name for r in report.rungs]
    assert names == [r.name for r in ladder_for("real_h100")]  # the ladder's order
    by = {r.name: r for r in report.rungs}
    assert by["cuda + profile"].status == "ok" and by["cuda + profile"].speedup == 1.5
    assert by["cuda + compile"].status == "skip" and "ran out before this rung" in by["cuda + compile"].reason
    # --baseline device: the first device rung is the reference, the profile rung next
    order = session.measuring_order(ladder_for("real_h100"), "cuda", baseline="device")
    assert [ladder_for("real_h100")[i].name for i in order[:2]] == ["cuda fp32", "cuda + profile"]
