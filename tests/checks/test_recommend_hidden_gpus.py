"""CUDA_VISIBLE_DEVICES= on a GPU box (a user training on its CPU, a scheduler that gave the job no
GPU): torch sees no GPU there, so `envkit run` with device auto plans the CPU and the CPU's profile,
instead of a CUDA profile whose run then failed with "device cuda is not usable here". Facts are the
H100 box as recorded (tests/snapshots/real_h100.json), with the variable as the process had it."""

from __future__ import annotations

import pytest

from conftest import snapshot_path
from envkit.checks.device import trainer_device
from envkit.checks.recommend import shipped_recommendation
from envkit.facts import gather


@pytest.mark.parametrize("value, device, profile", [
    (None, "cuda", "cuda-hopper"), ("0", "cuda", "cuda-hopper"), ("", "cpu", "cpu"), ("-1", "cpu", "cpu"),
])
def test_hidden_gpus_plan_a_cpu_run(value, device, profile):
    facts = gather(str(snapshot_path("real_h100")), runtime=False)
    facts.env.pop("CUDA_VISIBLE_DEVICES", None)
    facts.runtime = None
    if value is not None:
        facts.env["CUDA_VISIBLE_DEVICES"] = value
    assert trainer_device(facts) == device
    assert shipped_recommendation(facts)[0] == profile
