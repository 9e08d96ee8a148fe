"""ResNet parameter counts against published figures, Lion and SGD-Nesterov against updates worked
out by hand from their formulas, and `training.epochs` (steps, schedule, log, summary)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from cifar_fixture import write_cifar10
from envkit.config.config import load_config
from envkit.config.origin import Origin
from envkit.train.run.optim import build_optimizer
from envkit.train.run.resnets import build_resnet


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("depth,published", [(18, 11_689_512), (34, 21_797_672), (50, 25_557_032)])
def test_imagenet_form_has_torchvisions_published_parameter_count(depth, published):
    # torchvision's model docs (resnet18/34/50, 1000 classes); envkit's own definition must match
    model, _ = build_resnet(depth, 1000, stem="imagenet", prefer_torchvision=False)
    assert n_params(model) == published


def test_cifar_form_resnet18():
    model, _ = build_resnet(18, 10, stem="cifar", prefer_torchvision=False)
    # 11,173,962: the CIFAR ResNet-18 figure (3x3 stem, 10 classes) reported by the common CIFAR repos
    assert n_params(model) == 11_173_962
    assert isinstance(model.maxpool, torch.nn.Identity)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    # the stem keeps 32x32: layer1 sees 32x32 (the imagenet stem would hand it 8x8)
    seen = {}
    model.layer1.register_forward_hook(lambda m, i, o: seen.update(hw=o.shape[-2:]))
    model(torch.randn(1, 3, 32, 32))
    assert tuple(seen["hw"]) == (32, 32)


def training(**t):
    return load_config(None, data={"training": t}).training


def test_lion_matches_the_papers_update_worked_by_hand():
    """Two steps of Lion (arXiv:2302.06675, Algorithm 2) on w = [1, -2], lr 0.1, wd 0.5, betas 0.9/0.99:
    step 1, g = [0.5, -0.1]: c = 0.1 g -> sign [+1, -1]; w = w(1 - 0.05) - 0.1 sign = [0.85, -1.8]; m = 0.01 g
    step 2, g = [-0.03, 0.3]: c = 0.9 m + 0.1 g = [0.0045 - 0.003, -0.0009 + 0.03] -> sign [+1, +1]
            (the first coordinate follows the momentum, against its gradient); w = [0.85*0.95 - 0.1, -1.8*0.95 - 0.1]"""
    model = torch.nn.Linear(2, 1, bias=False)  # a 2-D weight: weight decay applies to it
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0]]))
    opt = build_optimizer(model, training(optimizer="lion", lr=0.1, weight_decay=0.5), "cpu", origin={})
    for g in ([0.5, -0.1], [-0.03, 0.3]):
        model.weight.grad = torch.tensor([g])
        opt.step()
    assert torch.allclose(model.weight, torch.tensor([[0.7075, -1.81]]), atol=1e-6)
    m = opt.state[model.weight]["exp_avg"]
    assert torch.allclose(m, torch.tensor([[0.99 * 0.005 + 0.01 * -0.03, 0.99 * -0.001 + 0.01 * 0.3]]), atol=1e-7)


def test_adamw_on_the_cpu_matches_the_papers_update_worked_by_hand():
    """Two steps of AdamW (arXiv:1711.05101, Algorithm 2, decoupled decay) on w = [1, -2], lr 0.1,
    wd 0.5, betas 0.9/0.95, eps 1e-8, as the CPU trainer builds it (without torch._dynamo):
    step 1, g = [0.5, -0.1]: m^ = g, v^ = g^2: w = w(1 - 0.05) - 0.1 g/|g| = [0.85, -1.8]
    step 2, g = [-0.03, 0.3]: m = [0.042, 0.021], m^ = m/0.19; v = [0.01192, 0.004975], v^ = v/0.0975;
            w = w(0.95) - 0.1 m^/sqrt(v^) = [0.8075 - 0.0632211, -1.71 - 0.0489294]"""
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0]]))
    opt = build_optimizer(model, training(optimizer="adamw", lr=0.1, weight_decay=0.5, beta1=0.9, beta2=0.95), "cpu")
    for g in ([0.5, -0.1], [-0.03, 0.3]):
        model.weight.grad = torch.tensor([g])
        opt.step()
    assert torch.allclose(model.weight, torch.tensor([[0.7442789, -1.7589294]]), atol=1e-6)
    again = build_optimizer(torch.nn.Linear(2, 1, bias=False), training(optimizer="adamw"), "cpu")
    again.load_state_dict(opt.state_dict())  # a checkpoint's round trip
    assert again.state_dict()["state"][0]["exp_avg"].tolist() == opt.state[model.weight]["exp_avg"].tolist()
    opt.zero_grad()
    assert model.weight.grad is None


def test_a_cpu_run_without_compile_never_imports_torch_dynamo(tmp_path):
    """torch.optim's optimizers import torch._dynamo on their first use (add_param_group, every step),
    compile on or off: as long again as importing torch, before the first step of every CPU run. A
    CPU run without compile trains, checkpoints and resumes without it (python -X importtime lists
    every module the trainer imports)."""
    from conftest import envkit

    cfg = tmp_path / "t.yaml"
    cfg.write_text("experiment: {name: t}\ndataset: {type: synthetic, task: teacher, input_dim: 8, num_samples: 256}\n"
                   "model: {type: mlp, hidden: 16, depth: 1}\ntraining: {max_steps: 2, batch_size: 16}\n"
                   "eval: {every_steps: 0, batches: 1}\ndevice: {type: cpu}\n")
    res = envkit("run", str(cfg), "--run-id", "r", "--profile", "cpu", "--stop-after", "1", cwd=tmp_path,
                 env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert res.returncode == 0, res.stderr[-2000:]
    res = envkit("run", str(cfg), "--run-id", "r", "--profile", "cpu", cwd=tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert res.returncode == 0 and "resuming run" in res.stderr, res.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")]
    assert "torch" in imported and "envkit.train.run.loop" in imported  # the trainer's own imports are listed
    assert [m for m in imported if m.startswith("torch._dynamo")] == []


def test_lion_takes_a_beta2_the_user_set():
    model = torch.nn.Linear(2, 1, bias=False)
    opt = build_optimizer(model, training(optimizer="lion", beta2=0.9), "cpu", origin={"training.beta2": Origin("yaml")})
    assert opt.param_groups[0]["betas"] == (0.9, 0.9)


@pytest.mark.parametrize("nesterov,expected", [(False, 1 - 0.1 * 0.5 - 0.1 * (0.9 * 0.5 + 0.2)),
                                               (True, 1 - 0.1 * (0.5 + 0.9 * 0.5) - 0.1 * (0.2 + 0.9 * (0.9 * 0.5 + 0.2)))])
def test_sgd_momentum_and_nesterov(nesterov, expected):
    """w = 1, lr 0.1, momentum 0.9, grads 0.5 then 0.2: buf1 = 0.5, buf2 = 0.9*0.5 + 0.2;
    plain steps by buf, Nesterov by g + 0.9 buf."""
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    opt = build_optimizer(model, training(optimizer="sgd", lr=0.1, momentum=0.9, nesterov=nesterov, weight_decay=0.0), "cpu")
    for g in (0.5, 0.2):
        model.weight.grad = torch.tensor([[g]])
        opt.step()
    assert float(model.weight.detach()) == pytest.approx(expected, abs=1e-6)


def test_epochs_set_the_steps_schedule_and_summary(tmp_path):
    from envkit.train.run.loop import train

    folder = write_cifar10(tmp_path, per_file=40, test=20)  # 200 training images
    cfg = load_config(None, data={
        "experiment": {"seed": 0}, "dataset": {"type": "cifar10", "path": str(folder)},
        "model": {"type": "cnn", "width": 4}, "device": {"type": "cpu"},
        "training": {"epochs": 2, "batch_size": 32, "lr": 1e-3, "compile": False},
        "eval": {"every_steps": 0, "batches": 1}, "checkpoint": {"every_steps": 0},
        "logging": {"every_steps": 3, "progress": "plain", "device_seconds": 0}})
    run_dir = tmp_path / "runs" / "exp" / "r"
    run_dir.mkdir(parents=True)
    summary = train(cfg, run_dir, resume="never", handle_signals=False).summary()
    # 200 // 32 = 6 full batches an epoch, two epochs: 12 steps (not the default max_steps, 1000)
    assert summary["status"] == "completed" and summary["steps"] == 12 and summary["epochs"] == 2
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "loss" in r][-1]
    assert last["step"] == 12 and last["epoch"] == pytest.approx(2.0)
    # the cosine ends with the epochs: step 12's lr is lr(11) = min + (lr - min)(1 + cos(pi 11/12))/2
    assert last["lr"] == pytest.approx(1e-4 + 0.5 * (1 + math.cos(math.pi * 11 / 12)) * 9e-4, rel=1e-6)
    assert "epoch 2.00/2" in (run_dir / "train.log").read_text()
    beat = json.loads((run_dir / "heartbeat.json").read_text())
    assert beat["max_steps"] == 12 and beat["epochs"] == 2
    from click.testing import CliRunner

    from envkit.commands.runs import runs

    (run_dir / "config.json").write_text(json.dumps(cfg.resolved()))  # what `envkit run` writes: a run folder
    table = CliRunner().invoke(runs, [str(tmp_path / "runs")]).output
    assert "12/12 (ep 2.00/2)" in table
