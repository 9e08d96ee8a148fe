"""Past one machine: two "nodes" as two `envkit run --nnodes 2` processes on 127.0.0.1 whose
trainers meet through torchrun's rendezvous and train with gloo (DDP on the CPU). Node 0 alone
writes the run folder."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from conftest import ROOT

TEMPLATE = str(ROOT / "templates" / "train" / "mlp_quick_test.yaml")
SMALL = ["--set", "training.max_steps=6", "--set", "training.batch_size=8", "--set", "dataset.num_samples=2000",
         "--set", "model.hidden=32", "--set", "eval.every_steps=0", "--set", "checkpoint.every_steps=3",
         "--set", "logging.every_steps=1", "--set", "logging.progress=none"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_train_together_and_node_zero_alone_writes(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}
    env.update(PYTHONUNBUFFERED="1", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    endpoint = f"127.0.0.1:{free_port()}"
    procs = [subprocess.Popen([sys.executable, "-m", "envkit", "run", TEMPLATE, "--profile", "cpu", "--set",
                               "device.type=cpu", *SMALL, "--nnodes", "2", "--node-rank", str(r), "--rdzv-endpoint", endpoint,
                               "--rdzv-id", "two-nodes"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    outs = [p.communicate(timeout=400) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    runs = list((tmp_path / "runs" / "mlp-quick-test").iterdir())
    assert [d.name for d in runs] == ["two-nodes"]  # the rendezvous id names the run on every node
    d = runs[0]
    s = json.loads((d / "summary.json").read_text())
    assert s["status"] == "completed" and s["world_size"] == 2 and s["steps"] == 6
    argv = json.loads((d / "environment.json").read_text())["argv"]
    assert argv[argv.index("--node-rank") + 1] == "0"  # written by node 0
    log = (d / "train.log").read_text()
    assert log.count("training mlp for 6 steps") == 1 and "x 2 proc" in log
    assert "node 1: training process exited with code 0" in outs[1][1]
    assert sorted(p.name for p in (d / "checkpoints").iterdir()) == ["step_00000003.pt", "step_00000006.pt"]
