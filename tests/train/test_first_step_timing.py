"""The first step's breakdown (ENVKIT_TIMING, envkit/train/run/timing.py: off by default, one line per
phase when on, read by benchmarks/bench_time_to_first_step.py) and the attention a deterministic run
trains with (FlexAttention for envkit's gpt on CUDA, SDPA's with ENVKIT_DETERMINISTIC_ATTENTION=sdpa:
envkit/train/run/determinism.py, models.py); the GPU half, the same losses twice with FlexAttention, is
marked gpu and skips without CUDA."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
import torch

from conftest import ROOT
from envkit.config.config import load_config
from envkit.train.run import determinism
from envkit.train.run.compile_cache import key_parts

LINE = re.compile(r"^envkit-timing (?P<t>[0-9.]+) (?P<phase>.+)$")  # as bench_time_to_first_step.py reads them


def _timing(env: dict) -> str:
    code = "from envkit.train.run import timing; timing.child_started(); timing.mark('config read')"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVKIT_TIMING")} | {"PYTHONPATH": str(ROOT)} | env
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=60).stderr


def test_timing_is_off_by_default_and_one_line_a_phase_when_on():
    assert _timing({}) == ""
    before = time.time()
    lines = [LINE.match(line) for line in _timing({"ENVKIT_TIMING": "1"}).splitlines()]
    assert all(lines) and [m["phase"] for m in lines if m] == [
        "child process created (envkit run's parent: start, imports, config, plan, run folder)",
        "child: Python started, envkit's modules imported", "config read"]
    created, started = (float(m["t"]) for m in lines[:2] if m)
    assert before - 1 < created <= started < time.time() + 1  # /proc's start time, on the wall clock


def _cfg(*sets: str):
    return load_config(None, overrides=[*(() if any(s.startswith("model.type=") for s in sets) else ("model.type=gpt",)), *sets])


@pytest.mark.parametrize("sets, device, flex", [
    (["training.deterministic=true"], "cuda", True),
    (["training.deterministic=true"], "cpu", False),  # FlexAttention's backward is CUDA's (and the CPU is deterministic)
    ([], "cuda", False),  # not deterministic: SDPA's fastest (cuDNN's on Hopper)
    (["training.deterministic=true", "training.sdpa_backend=flash"], "cuda", False),  # a backend named keeps SDPA
    (["training.deterministic=true", "model.dropout=0.1"], "cuda", False),  # flex_attention has no dropout
    (["training.deterministic=true", "model.type=mlp", "dataset.task=teacher"], "cuda", False),
])
def test_flex_attention_for_deterministic_gpt_on_cuda_only(sets, device, flex, monkeypatch):
    monkeypatch.delenv(determinism.FLEX_SWITCH, raising=False)
    assert determinism.flex_attention_for(_cfg(*sets), device) is flex
    monkeypatch.setenv(determinism.FLEX_SWITCH, "sdpa")  # the user's way back to SDPA's FlashAttention-2
    assert determinism.flex_attention_for(_cfg(*sets), device) is False


def test_the_compile_cache_key_names_the_attention_only_where_it_is_not_sdpas_choice(monkeypatch):
    shape = dict(device_type="cuda", device_name="NVIDIA H100 80GB HBM3", data_info={"vocab_size": 512}, micro_batch=4,
                 precision="bf16", mode="reduce-overhead", scope="model", world=1, parallel="single")
    monkeypatch.delenv(determinism.FLEX_SWITCH, raising=False)
    assert "attention" not in key_parts(_cfg(), **shape)  # the keys of the runs before this change stay the same
    assert key_parts(_cfg("training.deterministic=true"), **shape)["attention"] == "flex"
    monkeypatch.setenv(determinism.FLEX_SWITCH, "sdpa")
    assert "attention" not in key_parts(_cfg("training.deterministic=true"), **shape)
    assert key_parts(_cfg("training.sdpa_backend=flash"), **shape)["attention"] == "flash"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_flex_attention_trains_the_same_numbers_twice_on_cuda(monkeypatch):
    from envkit.train.run.models import GPT, use_flex_attention
    from envkit.train.run.step import LossModule

    def losses() -> list[float]:
        torch._dynamo.reset()
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = GPT(512, 128, 2, 2, 64)
            x, y = torch.randint(512, (4, 128)), torch.randint(512, (4, 128))
        assert use_flex_attention(model, torch.device("cuda")) == 2
        step = torch.compile(LossModule(model))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        out = []
        for _ in range(3):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            out.append(float(loss))
        return out

    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # what training.deterministic sets before CUDA starts
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        first, second = losses(), losses()
    finally:
        torch.use_deterministic_algorithms(was)
    assert first == second and all(x == x for x in first)
    assert first[-1] < first[0]


@pytest.mark.parametrize("start, world, rank", [(0, 1, 0), (5, 1, 0), (7, 2, 1)])
def test_the_batch_order_is_each_epochs_rows_a_few_batches_at_a_time(start, world, rank, monkeypatch):
    """The sampler lists a few batches at a time (a whole epoch at once held the first step 0.6 s on a 4M-sample
    token set): the same batches in the same order as the epochs' rows, across chunks and epochs."""
    import itertools

    from envkit.train.data.bundle import ResumableBatchSampler

    monkeypatch.setattr(ResumableBatchSampler, "CHUNK", 4)
    sampler = ResumableBatchSampler(100, 3, 11, start=start, rank=rank, world=world)
    got = [(list(b), b.epoch) for b in itertools.islice(iter(sampler), 70)]  # 16 (or 33) batches an epoch: four epochs
    want = [(row, epoch) for epoch, rows in itertools.islice(sampler.epochs(), 6) for row in rows.tolist()][:70]
    assert got == want and len({e for _, e in got}) >= 3


def test_a_compile_that_fails_at_the_first_step_without_a_message_falls_back_to_eager_and_says_so():
    """torch.compile fails lazily, at the first call; an AssertionError from Dynamo may carry no message
    (seen on an H100): the run still falls back to eager and names the error, rather than failing on it."""
    from envkit.train.run.speed import FallbackOnFirstCall

    def compiled(x):
        raise AssertionError()

    said = []
    model = FallbackOnFirstCall(compiled, torch.nn.Identity(), said.append)
    assert model(torch.ones(2)).tolist() == [1.0, 1.0]
    assert said == ["warning: torch.compile failed at the first step (AssertionError); training eager "
                    "(set training.compile: false to skip the attempt)"]
