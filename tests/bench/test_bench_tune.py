"""`envkit bench` and `envkit tune` as a user runs them, on this CPU machine (tiny model, few steps);
the CUDA ladder on a GPU (marked gpu, skipped without one)."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import default_sigint, envkit, has_cuda, share_of_cores, snapshot_path
from envkit.tune.writer import render_profile, write_profile, written_by_envkit
from envkit.tune.decide import Decision
from envkit.errors import EnvkitError

FAST = ("--model", "mlp", "--seconds", "0.5")


@pytest.fixture(scope="module")
def gpt50k(tmp_path_factory) -> Path:
    """A GPT with GPT-2's 50,304-token vocabulary on a token folder, small enough for a CPU: the
    logits are what makes a real model's batch not fit."""
    import torch

    from envkit.train.data.tokens import write_tokens

    d = tmp_path_factory.mktemp("gpt50k")
    g = torch.Generator().manual_seed(0)
    for name, n in (("train.bin", 60_000), ("val.bin", 6_000)):
        write_tokens(d / "tok" / name, torch.randint(50304, (n,), generator=g), "uint16")
    (d / "g.yaml").write_text("experiment: {name: g50k}\n"
                              "dataset: {type: tokens, path: tok, vocab_size: 50304}\n"
                              "model: {type: gpt, n_layer: 1, n_head: 2, n_embd: 32, block_size: 32}\n"
                              "training: {batch_size: 32, max_steps: 100}\n")
    return d / "g.yaml"


def test_bench_on_cpu_runs_cpu_rungs_skips_device_rungs_saves_and_plots(tmp_path):
    out, png = tmp_path / "ladder.json", tmp_path / "ladder.png"
    res = envkit("bench", *FAST, "--no-compile", "--json", "--output", str(out), "--plot", str(png), cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads(res.stdout)
    assert data["device"] == "cpu" and data["model"] == "mlp"
    rungs = {r["name"]: r for r in data["rungs"]}
    base = rungs["cpu fp32"]
    assert base["status"] == "ok" and base["per_second"] > 0 and base["speedup"] == 1.0 and math.isfinite(base["loss"])
    assert set(base) >= {"name", "status", "per_second", "speedup", "peak_memory_mb", "loss", "reason"}
    prof = rungs["cpu + profile"]
    assert prof["status"] in ("ok", "flagged") and prof["loss"] == pytest.approx(base["loss"], rel=1e-3)  # same steps, same seed
    assert base["steps"] >= 3 and base["micro_batch"] == data["batch_size"] and not base["did_not_fit"]
    assert rungs["cpu + compile"]["status"] == "skip" and "--no-compile" in rungs["cpu + compile"]["reason"]
    # fp32, bf16, compile, profile, cuda graphs, data on device (the teacher set can be held there), ddp, fsdp: no
    # channels_last for an mlp
    cuda = [r for r in data["rungs"] if r["name"].startswith("cuda")]
    assert len(cuda) == 8 and all(r["status"] == "skip" and r["check"] == "cuda" and r["reason"] for r in cuda)
    # each rung says what it changed, in the config keys a user would set
    assert rungs["cuda + cuda graphs"]["changed"] == "training.compile_mode: reduce-overhead (CUDA graphs)"
    assert rungs["cuda + data on device"]["changed"].startswith("dataset.on_device: true")
    assert json.loads(out.read_text())["rungs"] == data["rungs"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_on_a_50k_vocabulary_gpt_that_does_not_fit_splits_and_says_so(tmp_path, gpt50k):
    """ENVKIT_TRAIN_INJECT=oom-above=16: a device that holds 16 samples. Batch 32 does not fit: every
    rung is split by the trainer to 16 x 2 (the effective batch kept), says what 32 asked for, and
    still measures the same training (the same loss as the baseline). Plain output (no terminal) on
    80 columns: one line per rung as it finishes, then the table, each skip naming its doctor check."""
    res = envkit("bench", "--config", str(gpt50k), "--no-compile", "--seconds", "0.5", "--output", str(tmp_path / "b.json"),
                 cwd=tmp_path, env={"ENVKIT_TRAIN_INJECT": "oom-above=16", "COLUMNS": "80"}, timeout=240)
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["unit"] == "tokens" and all(r["status"] in ("ok", "skip") for r in data["rungs"]), data["rungs"]
    ran = [r for r in data["rungs"] if r["status"] == "ok"]
    assert [r["name"] for r in ran] == ["cpu fp32", "cpu + profile"]
    for r in ran:
        assert (r["micro_batch"], r["grad_accum"]) == (16, 2) and r["per_second"] > 0
        assert r["did_not_fit"] == [{"micro_batch": 32, "asked": "2.00 GiB"}]
        assert "micro-batch 16 x 2 accumulation: micro-batch 32 (asked 2.00 GiB) does not fit" in r["reason"]
        assert r["loss"] == pytest.approx(ran[0]["loss"], rel=1e-4) and 10 < r["loss"] < 11.5  # ln(50304) = 10.8
    # plain output (no terminal): one line per rung as it finishes, with its figure, then the table
    assert re.search(r"\.\.\. cpu fp32: ok [\d,]+ tokens/s \([\d.]+ s\)", res.stderr), res.stderr
    assert "[ok] cpu fp32:" in res.stdout and "does not fit" in " ".join(res.stdout.split())  # plain lines wrap at $COLUMNS
    assert "(doctor check 'cuda')" in res.stdout and "[skip] cuda fp32:" in res.stdout
    lines = res.stdout.splitlines()
    assert [line for line in lines if len(line) > 80] == []  # plain lines are wrapped to $COLUMNS too
    for r in (r for r in data["rungs"] if r["status"] == "skip"):
        assert [line for line in lines if line.startswith(f"[skip] {r['name']}:")] == [
            f"[skip] {r['name']}: {SHORT[r['check']] if r['check'] else r['reason']}" + (f" (doctor check '{r['check']}')" if r["check"] else "")]


def test_bench_budget_bounds_the_whole_ladder(tmp_path):
    """A rung that would be timed for 30 s in a budget of 4 s for the whole ladder (the first rung
    starts at once, with more than the 3 s a child needs left): it is stopped when the budget ends, and
    it and the rungs the budget does not reach are skipped and said so, not failed."""
    res = envkit("bench", "--model", "mlp", "--seconds", "30", "--no-compile", "--budget", "4s", "--json",
                 "--output", str(tmp_path / "b.json"), cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    rungs = {r["name"]: r for r in json.loads(res.stdout)["rungs"]}
    assert rungs["cpu fp32"]["status"] == "skip" and "budget of 4 s (--budget) ran out during this rung" in rungs["cpu fp32"]["reason"]
    assert rungs["cpu + profile"]["status"] == "skip" and "ran out before this rung" in rungs["cpu + profile"]["reason"]


# --------------------------------------------------------------------------- the ladder on an 80-column terminal

SHORT = {"cuda": "no usable cuda here"}  # what a skip for want of the device says in one line


def envkit_on_a_terminal(*args: str, cwd, columns: int = 80, timeout: float = 300) -> tuple[list[str], int]:
    """`python -m envkit ARGS` with stdout on a pseudo-terminal of `columns` columns (rich output, as
    a user sees it), $COLUMNS set the same; the screen's lines with colours and cursor moves taken out."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}
    env.update(COLUMNS=str(columns), PYTHONUNBUFFERED="1", ENVKIT_CONFIG_DIR=str(Path(cwd) / "config"))
    share_of_cores(env)  # this worker's share of the cores, as envkit() gives every training command
    with open(Path(cwd) / "stderr.txt", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "envkit", *args], stdin=slave, stdout=slave, stderr=err,
                                cwd=cwd, env=env, close_fds=True)
    os.close(slave)
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    if proc.poll() is None:  # past the timeout
        proc.kill()
    rc = proc.wait()
    os.close(master)
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", out.decode(errors="replace")).replace("\r", "")
    return screen.splitlines(), rc


@pytest.fixture(scope="module")
def gpt_on_80_columns(tmp_path_factory):
    """`envkit bench --model gpt` on an 80-column terminal, quick: half-second windows, no compile."""
    d = tmp_path_factory.mktemp("bench80")
    lines, rc = envkit_on_a_terminal("bench", "--model", "gpt", "--seconds", "0.5", "--no-compile",
                                     "--output", str(d / "b.json"), cwd=d)
    assert rc == 0, (d / "stderr.txt").read_text()[-2000:]
    return lines, json.loads((d / "b.json").read_text())


def test_bench_on_an_80_column_terminal_keeps_every_line_within_80_columns(gpt_on_80_columns):
    lines, saved = gpt_on_80_columns
    assert [r["name"] for r in saved["rungs"] if r["status"] == "ok"] == ["cpu fp32", "cpu + profile"]
    assert [line for line in lines if len(line) > 80] == []
    assert len(lines) < 30  # the gpt's ten rungs, a footer and notes: no reason folded down a narrow column


@pytest.mark.skipif(has_cuda(), reason="the cuda rungs run on a CUDA machine")
def test_bench_on_an_80_column_terminal_says_each_skipped_rung_in_one_line(gpt_on_80_columns):
    lines, saved = gpt_on_80_columns
    skipped = [r for r in saved["rungs"] if r["status"] == "skip"]
    assert {r["name"] for r in skipped} == {"cpu + compile", "cuda fp32", "cuda + bf16", "cuda + compile", "cuda + profile",
                                            "cuda + cuda graphs", "cuda + ddp", "cuda + fsdp"}
    for r in skipped:
        said = [line for line in lines if f"{r['name']}:" in line]
        short = f"{SHORT[r['check']]} (doctor check '{r['check']}')" if r["check"] else r["reason"]
        assert said == [f"skip {r['name']}: {short}"]
    # the reason in full is the saved report's (and --json's), not the screen's
    assert "nvidia-smi absent or empty" in saved["rungs"][3]["reason"] and not any("nvidia-smi" in line for line in lines)


def test_bench_lists_no_channels_last_rung_for_the_gpt(gpt_on_80_columns):
    lines, saved = gpt_on_80_columns
    assert [r["name"] for r in saved["rungs"] if "channels" in r["name"]] == []
    assert [line for line in lines if "channels" in line] == []


def test_bench_footer_says_how_long_each_rung_is_timed(gpt_on_80_columns):
    lines, saved = gpt_on_80_columns
    text = " ".join(line.strip() for line in lines)
    m = re.search(r"each cpu rung timed for (\S+) s after its warm-up, the median of (\d+) windows", text)
    assert m is not None, text
    assert (float(m.group(1)), int(m.group(2))) == (0.5, 3)  # --seconds 0.5; three windows
    assert (saved["seconds_per_rung"], saved["windows"]) == (0.5, 3)


@pytest.mark.skipif(has_cuda(), reason="the cuda rungs run on a CUDA machine")
def test_bench_json_holds_the_full_reasons_and_only_the_rungs_of_the_model(tmp_path):
    """A budget of one second measures nothing (no child starts with less than 3 s left): the ladder
    and its reasons, quickly. The cuda rungs carry doctor's own message in full."""
    doctor = json.loads(envkit("doctor", "--json", cwd=tmp_path).stdout)
    cuda_check = next(c for c in doctor["checks"] if c["id"] == "cuda")
    for model, has_channels_last in (("gpt", False), ("cnn", True)):
        res = envkit("bench", "--model", model, "--budget", "1s", "--json", "--output", str(tmp_path / f"{model}.json"),
                     cwd=tmp_path, timeout=120, env={"COLUMNS": "80"})
        assert res.returncode == 0, res.stderr[-2000:]
        data = json.loads(res.stdout)
        rungs = {r["name"]: r for r in data["rungs"]}
        assert ("cuda + channels last" in rungs) is has_channels_last
        cuda = [r for r in data["rungs"] if r["name"].startswith("cuda")]
        assert cuda and all((r["status"], r["check"], r["reason"]) == ("skip", "cuda", cuda_check["message"]) for r in cuda)
        assert rungs["cpu fp32"]["reason"] == "the budget of 1 s (--budget) ran out before this rung"


def test_bench_refuses_a_device_this_machine_lacks(tmp_path):
    if has_cuda():
        pytest.skip("this machine has CUDA")
    res = envkit("bench", *FAST, "--device", "cuda", cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and "doctor check 'cuda'" in res.stderr and "Traceback" not in res.stderr


def test_tune_on_a_50k_vocabulary_gpt_writes_a_profile_whose_batch_fits_that_doctor_names_and_run_uses(tmp_path, gpt50k):
    """The H100 story on the CPU: the shipped batch (cpu profile: 16) does not fit a device holding 8
    samples. The shipped run is split to 8 x 2 and that is decided at once, so even a short budget
    writes a profile whose batch fits; what did not fit is named with what it asked for. The profile
    written is then the machine's: doctor names it, `envkit run` trains with it unless --profile says
    otherwise."""
    cfg = tmp_path / "config"
    env = {"ENVKIT_CONFIG_DIR": str(cfg)}
    res = envkit("tune", "--config", str(gpt50k), "--budget", "75s", "--seconds", "0.5", "--no-compile", "--json", cwd=tmp_path,
                 env={**env, "ENVKIT_TRAIN_INJECT": "oom-above=8"}, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:] + res.stdout[-2000:]
    out = json.loads(res.stdout)
    first = out["runs"][0]
    assert first["run"] == "shipped cpu" and first["status"] == "ok" and (first["micro_batch"], first["grad_accum"]) == (8, 2)
    assert first["did_not_fit"] == [{"micro_batch": 16, "asked": "2.00 GiB"}]
    settings = {s["key"]: s for s in out["settings"]}
    why = settings["batch_size"]["reason"]  # decided by the batch search, or at once after the shipped run when the budget ended
    assert settings["batch_size"]["value"] <= 8, settings["batch_size"]
    assert "too big: " in why and "16 (does not fit: asked for 2.00 GiB)" in why, why  # worded the same on both paths
    text = Path(out["path"]).read_text()
    assert "[train.batch_size]" in text and f"value = {settings['batch_size']['value']}" in text
    probes = [r for r in out["runs"] if r["run"].startswith("batch ")]
    assert probes and all(r["status"] == "does not fit" for r in probes), out["runs"]  # nothing above 8 fits: each says so
    assert probes[0]["run"] == "batch 12"  # bisection between 8 (fits) and 16 (does not)

    assert out["profile"] == "cpu-tuned" and Path(out["path"]) == cfg / "profiles" / "cpu-tuned.toml"
    assert out["settings"] and all(s["reason"].startswith(("measured:", "keeps")) for s in out["settings"])
    assert written_by_envkit(Path(out["path"]))
    assert 'extends = "cpu"' in text and "torch 2" in text  # the source names envkit, torch and the machine
    doc = json.loads(envkit("doctor", "--json", "--no-runtime", env=env, cwd=tmp_path).stdout)
    assert doc["profile"] == "cpu-tuned"
    replay = json.loads(envkit("doctor", "--json", "--replay", str(snapshot_path("linux_no_gpu")), env=env, cwd=tmp_path).stdout)
    assert replay["profile"] == "cpu"  # a recorded machine is another machine
    assert envkit("init", "train.yaml", "--template", "mlp_quick_test", env=env, cwd=tmp_path).returncode == 0
    shown = envkit("run", "train.yaml", "--print-config", env=env, cwd=tmp_path)
    assert "profile: cpu-tuned" in shown.stdout, shown.stdout + shown.stderr
    other = envkit("run", "train.yaml", "--print-config", "--profile", "cpu", env=env, cwd=tmp_path)
    assert "(profile: cpu)" in other.stdout and "cpu-tuned" not in other.stdout  # --profile still chooses another
    listed = envkit("profile", "show", "cpu-tuned", "--resolved", env=env, cwd=tmp_path)
    assert listed.returncode == 0 and "measured:" in listed.stdout


def test_tune_never_writes_over_a_file_the_user_wrote_or_edited(tmp_path):
    path = tmp_path / "cpu-tuned.toml"
    text = render_profile("cpu-tuned", "cpu", [Decision("train", "batch_size", 32, "measured: 2 vs 1", True)], "measured: test", "2.13.0", "d")
    write_profile(path, text)  # a new file
    write_profile(path, text)  # its own file: rewritten
    path.write_text(path.read_text() + "\n# my note\n")
    edited = path.read_text()
    with pytest.raises(EnvkitError) as e:
        write_profile(path, text)
    assert str(path) in e.value.one_line() and path.read_text() == edited
    path.write_text('extends = "cpu"\n')
    with pytest.raises(EnvkitError):
        write_profile(path, text)
    assert path.read_text() == 'extends = "cpu"\n'


def test_ctrl_c_writes_the_best_so_far_or_nothing_never_half_a_file(tmp_path):
    cfg = tmp_path / "config"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}
    env.update(ENVKIT_CONFIG_DIR=str(cfg), PYTHONUNBUFFERED="1")
    share_of_cores(env)
    proc = subprocess.Popen([sys.executable, "-m", "envkit", "tune", "--budget", "5m", *FAST, "--no-compile"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=default_sigint)
    seen = []
    deadline = time.monotonic() + 240
    for line in proc.stdout:  # wait for two measurements: the shipped one and a first candidate
        seen.append(line)
        if sum(" ok " in ln or " fail " in ln for ln in seen) >= 2 or time.monotonic() > deadline:
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(seen) + rest
    # whether a decision came before Ctrl-C depends on timing; what is on disk must match what was said
    profiles = cfg / "profiles"
    on_disk = sorted(p.name for p in profiles.glob("*"))  # hidden files (a half-written .tmp) included
    said = "wrote profile cpu-tuned (interrupted" in rest
    assert ("no profile written (interrupted" in rest) is not said, rest  # one of the two, never both or neither
    assert on_disk == (["cpu-tuned.toml"] if said else []), (on_disk, rest)
    assert [p.name for p in profiles.glob("*.toml") if not written_by_envkit(p)] == []  # a whole file, hash intact


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs CUDA")
def test_cuda_ladder_runs_every_rung(tmp_path):
    # short windows: this checks that every rung runs on CUDA, not its figures (those are benchmarks/)
    res = envkit("bench", "--model", "gpt", "--seconds", "1", "--json", "--output", str(tmp_path / "b.json"), cwd=tmp_path, timeout=900)
    data = json.loads(res.stdout)
    rungs = {r["name"]: r for r in data["rungs"]}
    assert data["device"] == "cuda"
    for name in ("cuda fp32", "cuda + bf16", "cuda + compile", "cuda + profile"):
        assert rungs[name]["status"] in ("ok", "flagged"), rungs[name]
        assert rungs[name]["peak_memory_mb"] > 0
    assert rungs["cuda + bf16"]["speedup"] > 1


def test_step_clock_times_windows_after_warm_up_and_restarts_after_a_split():
    """The hook bench and tune time the trainer with: nothing counts before the warm-up, each window
    gives one rate, a micro-batch split (an out of memory survived) starts the warm-up again, and
    the CPU baseline's cap stops it after a few steps whatever the time."""
    import torch

    from envkit.bench.child import StepClock

    clock = StepClock("cpu", warmup_steps=2, seconds=0.0, windows=2)  # 0 s windows: each closes after one step

    def call(step, mb=8):
        return clock(step=step, loss=torch.tensor(float(step)), micro_batch=mb, per_step=mb * 10, unit="tokens")

    assert [call(s) for s in (1, 2, 3)] == [False, False, False]  # steps 1-2 warm up, step 3 closes window 1
    assert clock.loss == 2.0 and len(clock.rates) == 1 and clock.steps_timed == 1
    assert call(4, mb=4) is False and clock.rates == []  # split to 4: the warm-up starts again, no window kept
    assert [call(s, mb=4) for s in (5, 6, 7)] == [False, False, True]
    assert len(clock.rates) == 2 and clock.unit == "tokens" and clock.loss == 2.0
    capped = StepClock("cpu", warmup_steps=1, seconds=3600.0, windows=1, max_steps=2)
    done = [capped(step=s, loss=torch.tensor(1.0), micro_batch=8, per_step=80, unit="samples") for s in (1, 2, 3)]
    assert done == [False, False, True] and capped.steps_timed == 2
