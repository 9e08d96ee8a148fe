"""What one micro-step computes, as one module: the model's forward and the cross-entropy.

The loss lives inside the module that torch.compile (and DDP) wrap, so forward and loss are one
graph: with a real vocabulary (GPT-2's 50,304) the (B*T x V) fp32 logits are then fused into the
log-softmax instead of being materialised and read several times in eager mode (issue 11: 0.77x
of a plain loop with the loss outside, on par with it inside).

Also: the speed switches of train.yaml that are neither torch settings nor profile env variables
(the compile mode, the attention backend), applied before the first forward.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
SDPA_BACKENDS = ("auto", "flash", "efficient", "cudnn", "math")


class LossModule(nn.Module):
    """`LossModule(model, accum)(x, y)` -> the mean cross-entropy / accum.

    The same operations in the same order as the loop computed before (logits.float(), then the
    loss, then / accum), so an eager CPU run is bit for bit what it was and resumes exactly."""

    def __init__(self, model: nn.Module, accum: int = 1):
        super().__init__()
        self.model, self.accum = model, accum

    def forward(self, x, y):
        logits = self.model(x)
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1)) / self.accum


def compile_kwargs(mode: str) -> dict:
    return {} if mode in (None, "default") else {"mode": mode}


def apply_sdpa_backend(name: str, device_type: str) -> list[str]:
    """Restrict scaled_dot_product_attention to one backend (plus math as the fallback that always
    works); "auto" leaves PyTorch's own choice. Global switches, so compiled graphs see them too."""
    if name in (None, "auto"):
        return []
    if device_type != "cuda":
        return [f"training.sdpa_backend {name} ignored on {device_type}: the backends are CUDA kernels"]
    b = torch.backends.cuda
    switches = {"flash": "enable_flash_sdp", "efficient": "enable_mem_efficient_sdp", "cudnn": "enable_cudnn_sdp"}
    for backend, fn in switches.items():
        if hasattr(b, fn):
            getattr(b, fn)(backend == name)
    b.enable_math_sdp(True)
    if name != "math" and not hasattr(b, switches[name]):
        return [f"training.sdpa_backend {name}: this torch has no such backend; PyTorch chooses"]
    return [f"attention (SDPA) backend: {name}" + (" (math as fallback)" if name != "math" else "")]
