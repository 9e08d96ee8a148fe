"""torch.compile on the CPU (Inductor with gcc): compile_scope blocks compiles a gpt's repeated
block once and trains the eager losses; the compile cache (training.compile_cache) is saved after
the first step, loaded by the next run, which then compiles nothing (torch's own counters, in
summary.json) and builds no C++ kernel again (the file holds them), and refused when its signature
does not verify."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, envkit

QUICK = str(ROOT / "templates" / "train" / "gpt_quick_test.yaml")
STEPS = ["--set", "training.max_steps=4", "--set", "logging.every_steps=1", "--set", "eval.every_steps=0",
         "--set", "checkpoint.every_steps=0", "--set", "model.n_layer=3", "--set", "dataset.num_samples=2000"]


def run(folder: Path, run_id: str, cache: Path, inductor: Path, *args: str):
    """One run with envkit's cache at `cache` and Inductor's local cache at `inductor` (a fresh one: another machine)."""
    env = {"ENVKIT_CACHE_DIR": str(cache), "TORCHINDUCTOR_CACHE_DIR": str(inductor), "TRITON_CACHE_DIR": str(inductor / "triton")}
    res = envkit("run", QUICK, "--run-id", run_id, "--profile", "cpu", *STEPS, *args, cwd=folder, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return folder / "runs" / "gpt-quick-test" / run_id, res.stdout + res.stderr


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def losses(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if "loss" in r]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Eager, then compiled cold (empty caches), then compiled warm (envkit's cache kept, Inductor's fresh)."""
    d = tmp_path_factory.mktemp("cc")
    cache = d / "envkit-cache"
    eager = run(d, "eager", cache, d / "ind0", "--set", "training.compile=false")
    cold = run(d, "cold", cache, d / "ind1", "--set", "training.compile=true")
    warm = run(d, "warm", cache, d / "ind2", "--set", "training.compile=true")
    return {"dir": d, "cache": cache, "eager": eager, "cold": cold, "warm": warm}


def test_blocks_compile_once_and_train_the_eager_losses(runs):
    run_dir, out = runs["cold"]
    s = summary(run_dir)
    assert "per block (3 blocks, one compile)" in s["compile"], s["compile"]
    assert s["derived"]["training.compile_scope"] == "blocks"
    # one graph for the 3 blocks, one for the head with the loss: a block compiled per block would be 4
    assert s["compile_stats"]["graphs"] == 2, s["compile_stats"]
    assert s["compile_stats"]["fxgraph_cache_miss"] > 0, s["compile_stats"]
    eager, compiled = losses(runs["eager"][0]), losses(run_dir)
    assert len(eager) == len(compiled) == 4
    assert max(abs(a - b) for a, b in zip(eager, compiled)) < 2e-3, (eager, compiled)
    assert "compile cache: saved gpt-" in out, out[-2000:]
    assert len(list((runs["cache"] / "compile").glob("gpt-*.bin"))) == 1
    assert "Warning" not in out, out[-2000:]  # torch 2.13's FutureWarning for a deprecated Dynamo flag once leaked here
    assert s["compile_stats"]["seconds"], s["compile_stats"]  # where the compile's time went, by torch's phase timers


def test_second_run_loads_the_cache_and_compiles_nothing(runs):
    run_dir, out = runs["warm"]
    s = summary(run_dir)
    assert "compile cache: loaded gpt-" in out, out[-2000:]
    stats = s["compile_stats"]
    assert stats["fxgraph_cache_miss"] == 0 and stats["autograd_cache_miss"] == 0, stats  # nothing compiled here
    assert stats["fxgraph_cache_hit"] > 0 and stats["autograd_cache_hit"] > 0, stats
    assert not any(n.startswith("saved") for n in s["compile_cache"]["notes"]), s["compile_cache"]
    assert losses(run_dir) == losses(runs["cold"][0])
    # Inductor's cache was empty (another machine): the kernels came from envkit's file, and no
    # compiler built them again (the cold run's g++ builds took most of its compile)
    saved = int(re.search(r"saved gpt-\S+ \(\d+ artifacts, (\d+) C\+\+ kernels", runs["cold"][1]).group(1))
    loaded = re.search(r"loaded gpt-\S+ \(\d+ artifacts, (\d+) C\+\+ kernels.*; (\d+) kernels put in Inductor's cache", out)
    assert saved > 0 and loaded and int(loaded.group(1)) == int(loaded.group(2)) == saved, out[-2000:]
    assert len(list((runs["dir"] / "ind2").glob("*/*.so"))) >= saved
    cold = summary(runs["cold"][0])["compile_stats"]["seconds"]
    assert stats["seconds"].get("compile_file", 0.0) < cold["compile_file"] / 4, (stats["seconds"], cold)


def test_a_changed_cache_file_is_refused_before_any_of_it_loads(runs, tmp_path, monkeypatch):
    """The file the cold run saved, one byte of its generated code changed: the run's load refuses it
    in one line and loads nothing (the run then compiles, as the cold run did)."""
    from envkit.train.run import compile_cache

    cache = tmp_path / "tampered-cache"
    shutil.copytree(runs["cache"], cache)
    (blob,) = (cache / "compile").glob("gpt-*.bin")
    data = bytearray(blob.read_bytes())
    data[-100] ^= 0xFF
    blob.write_bytes(bytes(data))
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(cache))
    lines: list[str] = []
    mine = compile_cache.CompileCache(blob.stem, True, lines.append)
    mine.load()
    assert mine.loaded is None and len(lines) == 1, lines
    assert "refused: its signature does not verify under this machine's key" in lines[0], lines
    shutil.copy(runs["cache"] / "compile" / blob.name, blob)  # the file as saved: it verifies and loads
    again = compile_cache.CompileCache(blob.stem, True, lines.append)
    again.load()
    assert again.loaded is not None and lines[-1].startswith(f"compile cache: loaded {blob.stem}"), lines


def test_a_file_of_the_earlier_format_is_named_and_compiled_over(tmp_path, monkeypatch):
    """A cache file an earlier envkit wrote (torch's blob alone, no C++ kernels): one line, not a
    signature failure, and the run compiles (and saves the new format after its first step)."""
    from envkit.train.run import compile_cache

    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path))
    mine = compile_cache.CompileCache("gpt-k", True, (lines := []).append)
    mine.path.parent.mkdir(parents=True)
    mine.path.write_bytes(compile_cache.OLD_MAGIC + b"0" * 64 + b"\ncode")
    mine.load()
    assert mine.loaded is None and len(lines) == 1 and "an earlier envkit's format" in lines[0], lines


def test_a_file_signed_under_another_machines_key_is_refused(tmp_path, monkeypatch):
    from envkit.train.run import compile_cache

    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "here"))
    mine = compile_cache.pack("gpt-k", b"code")
    assert compile_cache.unpack("gpt-k", mine) == b"code"
    assert compile_cache.unpack("gpt-other", mine) is None  # signed for one key: not loaded as another
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "elsewhere"))  # another machine: another key
    assert compile_cache.unpack("gpt-k", mine) is None
    assert compile_cache.unpack("gpt-k", b"code") is None  # no header at all



def test_a_damaged_machine_key_is_named_not_a_type_error(tmp_path, monkeypatch):
    from envkit.errors import EnvkitError
    from envkit.train.run import compile_cache

    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path))
    key = tmp_path / "keys" / "run-folders.key"
    key.parent.mkdir()
    key.write_text("not hex\n")  # before: machine_key() returned None and hmac raised a TypeError
    with pytest.raises(EnvkitError, match="holds no 32-byte key") as err:
        compile_cache.pack("gpt-k", b"code")
    assert "delete it" in (err.value.fix or "")

def test_compile_scope_auto_picks_blocks_only_where_it_is_safe():
    from envkit.train.run.speed import compile_scope_for

    assert compile_scope_for("auto", True, 1, "default", "gpt") == ("blocks", None)
    assert compile_scope_for("auto", True, 2, "default", "gpt") == ("model", None)  # DDP keeps the whole step
    assert compile_scope_for("auto", True, 1, "reduce-overhead", "gpt") == ("model", None)  # CUDA graphs too
    assert compile_scope_for("auto", False, 1, "default", "resnet18") == ("model", None)
    assert compile_scope_for("model", True, 1, "default", "gpt") == ("model", None)
    scope, line = compile_scope_for("blocks", False, 1, "default", "mlp")
    assert scope == "model" and "model.type mlp is not embed -> repeated blocks -> head" in line


def test_a_bad_compile_scope_is_one_line_and_exit_2(tmp_path):
    res = envkit("run", QUICK, "--set", "training.compile_scope=layers", cwd=tmp_path)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "training.compile_scope" in res.stderr and "blocks" in res.stderr, res.stderr
