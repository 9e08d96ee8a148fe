"""train/step.py: gradient clipping folded into a fused AdamW gives the update clip_grad_norm_ +
step gives (the trainer uses it on CUDA, where AdamW is fused; torch's CPU fused AdamW checks it
here), and leaves the optimizer as it found it."""

import copy

import pytest
import torch

from envkit.train.step import clip_in_fused_optimizer, finish_fused_clip


def _pair():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    return model, copy.deepcopy(model)


@pytest.mark.parametrize("max_norm", [1.0, 1e6])  # clipping on most steps; never clipping
def test_clip_in_fused_adamw_matches_clip_grad_norm(max_norm):
    a, b = _pair()
    try:
        opt_a = torch.optim.AdamW(a.parameters(), lr=1e-2, fused=True)
        opt_b = torch.optim.AdamW(b.parameters(), lr=1e-2, fused=True)
    except RuntimeError as exc:  # a torch without the CPU fused kernel
        pytest.skip(f"fused AdamW on the CPU: {exc}")
    clipped = 0
    for step in range(6):
        x = torch.randn(16, 32) * (10.0 if step % 2 else 0.01)
        for model in (a, b):
            model(x).pow(2).sum().backward()
        norm_a = torch.nn.utils.clip_grad_norm_(a.parameters(), max_norm)
        opt_a.step()
        opt_a.zero_grad()
        norm_b = clip_in_fused_optimizer(opt_b, max_norm)
        assert hasattr(opt_b, "grad_scale")
        opt_b.step()
        finish_fused_clip(opt_b)
        assert not hasattr(opt_b, "grad_scale")
        opt_b.zero_grad()
        clipped += float(norm_a) > max_norm
        assert float(norm_b) == pytest.approx(float(norm_a), rel=1e-5)
        for p, q in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    assert (clipped >= 3) if max_norm == 1.0 else clipped == 0


def test_not_fused_means_the_caller_clips():
    model, _ = _pair()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(4, 32)).sum().backward()
    assert clip_in_fused_optimizer(opt, 1.0) is None
    assert not hasattr(opt, "grad_scale")
