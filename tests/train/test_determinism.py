"""training.deterministic at full speed: what varies run to run is dropped (autotuning by timing,
cudnn benchmark), what does not is kept (CUDA graphs: compile_mode reduce-overhead stays), and
torch's NaN fill of fresh tensors is off for envkit's own models, whose steps never read memory
they did not write (envkit/train/run/determinism.py says why; the H100 figures are in
benchmarks/RESULTS.md)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from envkit.train.run import determinism
from envkit.config.config import load_config


def _cfg(*sets: str):
    return load_config(None, overrides=list(sets))


SAID_MAX_AUTOTUNE = ("training.deterministic: compile_mode max-autotune -> reduce-overhead (no autotuning by timing; "
                     "CUDA graphs kept: a replay runs the captured kernels, the same numbers)")
SAID_NO_GRAPHS = "training.deterministic: compile_mode max-autotune-no-cudagraphs -> default (no autotuning by timing)"


@pytest.mark.parametrize("asked, kept, said", [("reduce-overhead", "reduce-overhead", []), ("default", "default", []),
                                               ("max-autotune", "reduce-overhead", [SAID_MAX_AUTOTUNE]),
                                               ("max-autotune-no-cudagraphs", "default", [SAID_NO_GRAPHS])])
def test_cuda_graphs_are_kept_and_autotuning_by_timing_is_dropped(asked, kept, said):
    cfg, settings, lines = determinism.prepare(_cfg("training.deterministic=true", f"training.compile_mode={asked}"),
                                               {"cudnn_benchmark": True, "matmul_precision": "high"})
    assert cfg.training.compile_mode == kept
    assert settings == {"cudnn_benchmark": False, "matmul_precision": "high"}  # benchmarking picks kernels by timing
    assert [line for line in lines if "compile_mode" in line] == said  # nothing changed: nothing said
    # without determinism nothing is touched
    plain = _cfg(f"training.compile_mode={asked}")
    assert determinism.prepare(plain, {"cudnn_benchmark": True}) == (plain, {"cudnn_benchmark": True}, [])


@contextlib.contextmanager
def _torch_state_restored():
    import torch.utils.deterministic as det

    before = (torch.are_deterministic_algorithms_enabled(), det.fill_uninitialized_memory,
              torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    try:
        yield det
    finally:
        torch.use_deterministic_algorithms(before[0])
        det.fill_uninitialized_memory = before[1]
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[2], before[3]


def test_the_nan_fill_is_off_for_envkits_models_and_kept_for_a_factorys():
    with _torch_state_restored() as det:
        for model_type, fill in (("gpt", False), ("resnet18", False), ("mlp", False), ("cnn", False),
                                 ("mypkg.models:build", True)):
            line = determinism.apply("cpu", model_type)[0]
            assert torch.are_deterministic_algorithms_enabled()
            assert det.fill_uninitialized_memory is fill, model_type
            assert ("filled with NaN" in line) == fill and ("not filled" in line) != fill, line


def _losses(model, batches, fill: bool) -> list[float]:
    """Three AdamW steps of a copy of `model` in deterministic mode, torch's NaN fill on or off."""
    import copy

    from envkit.train.run.step import LossModule

    with _torch_state_restored() as det:
        torch.use_deterministic_algorithms(True)
        det.fill_uninitialized_memory = fill
        m = copy.deepcopy(model)
        step = LossModule(m)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        out = []
        for x, y in batches:
            loss = step(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            out.append(loss.item())
        return out


class _ReadsUnwritten(torch.nn.Module):
    """A model that reads half a tensor nobody wrote: what the fill exists for."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.empty(x.shape[0], 8)
        h[:, :4] = x[:, :4]
        return self.lin(h + 0 * x)


def test_envkits_models_train_the_same_with_and_without_the_fill():
    """With the fill on, any read of memory the step did not write becomes NaN: envkit's models
    give the same finite losses either way (so turning it off changes no number), while a model
    that reads unwritten memory does not (the check can fail)."""
    from envkit.train.run.models import GPT, ResNet
    from envkit.train.run.resnets import build_resnet

    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    gpt = GPT(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32)
    tokens = [(torch.randint(64, (4, 16), generator=g), torch.randint(64, (4, 16), generator=g)) for _ in range(3)]
    cnn = ResNet(10, 3, 8, 1)
    images = [(torch.randn(4, 3, 16, 16, generator=g), torch.randint(10, (4,), generator=g)) for _ in range(3)]
    resnet18 = build_resnet(18, 10, 3, "cifar", 8)[0].to(memory_format=torch.channels_last)
    for model, batches in ((gpt, tokens), (cnn, images), (resnet18, images)):
        on, off = _losses(model, batches, True), _losses(model, batches, False)
        assert on == off and all(v == v and abs(v) < 1e3 for v in on), (type(model).__name__, on, off)
    leaky = _ReadsUnwritten()
    rows = [(torch.randn(4, 8, generator=g), torch.randint(4, (4,), generator=g)) for _ in range(2)]
    assert all(v != v for v in _losses(leaky, rows, True))  # NaN: the fill reaches what is read unwritten
