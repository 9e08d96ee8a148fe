"""training.deterministic: the same numbers on every run of a config on one kind of device with one
torch build, as PyTorch's reproducibility notes say to get them
(https://pytorch.org/docs/stable/notes/randomness.html), and at the speed of the same config
without it: only what varies from run to run is given up.

- `torch.use_deterministic_algorithms(True)`: deterministic kernels only; an op that has none
  raises a RuntimeError, which the run turns into one line naming the op (`op_error`);
- CUBLAS_WORKSPACE_CONFIG=:4096:8 in the process's environment before CUDA starts (cuBLAS picks
  its reduction split by workspace otherwise, https://docs.nvidia.com/cuda/cublas/#results-reproducibility);
- cudnn.benchmark off and cudnn.deterministic on (benchmarking picks the fastest convolution
  algorithm by timing, which may differ between runs): a profile's cudnn_benchmark gives way, said
  in one line;
- torch.compile without autotuning by timing: Inductor's deterministic mode
  (TORCHINDUCTOR_DETERMINISTIC=1, torch/_inductor/config.py: "skips any on device benchmarking"),
  and compile_mode max-autotune becomes reduce-overhead (max-autotune-no-cudagraphs: default):
  max-autotune picks matmul and convolution kernels by timing them on the device, a race that may
  end differently on the next run;
- CUDA graphs are kept (compile_mode reduce-overhead stays): a graph replays the kernels it
  captured, with their launch parameters, on the same addresses, so it computes exactly what the
  captured launches would; it only removes their launch cost. ResNet-18 on CIFAR at batch 128 is
  launch-bound (a 3 ms step) and trained at a third of its speed when determinism turned graphs off;
- `torch.utils.deterministic.fill_uninitialized_memory` off for envkit's own models (gpt, mlp,
  cnn, resnet18/34/50), on (torch's default) for a factory's model. The fill writes NaN into every
  tensor torch.empty hands out, so that a kernel reading memory nobody wrote reads the same NaN on
  every run instead of what the allocator left there. It guards a read that envkit's models never
  make: every op of their step writes its whole output before anything reads it (matmuls,
  convolutions, normalisation, attention, embedding lookups, the loss and the element-wise kernels
  Inductor generates), the optimizer's state starts from zeros, and DDP's buckets are written in
  full by the gradients they hold. So the fill changes no number and costs a kernel per
  allocation (GPT-2 small, H100: about 5% a step, measured before this change); tests/train/test_determinism.py trains the
  models with the fill on and off and requires the same, finite, losses (a read of unwritten memory
  would show as NaN with it on). A user's model may call torch.empty and write part of it: there
  the fill stays on.

The seeds (python, torch on every device, the data order) are set on every run already
(trainer.py). On the CPU envkit's runs are bit-identical without this switch; it costs nothing
there but the checks."""

from __future__ import annotations

import contextlib
import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice

CUBLAS_WORKSPACE = ":4096:8"
_CUBLAS_OK = (":4096:8", ":16:8")  # the two settings cuBLAS documents as deterministic
# compile modes that autotune by timing, and what each becomes: CUDA graphs kept, the timing race dropped
WITHOUT_AUTOTUNE = {"max-autotune": "reduce-overhead", "max-autotune-no-cudagraphs": "default"}
# model.type values whose training step never reads memory it did not write (the module docstring says why)
OWN_MODELS = ("gpt", "mlp", "cnn", "resnet18", "resnet34", "resnet50")


def environ_before_cuda(cfg) -> None:
    """The variables CUDA libraries and Inductor read when they start: set in this process before
    torch touches CUDA (the child calls it right after reading its config)."""
    if not cfg.training.deterministic:
        return
    if os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in _CUBLAS_OK:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"


def prepare(cfg, torch_settings: dict | None):
    """(cfg, torch_settings, lines): compile_mode and the profile's cudnn_benchmark made to fit a
    deterministic run, each change said in one line."""
    if not cfg.training.deterministic:
        return cfg, torch_settings, []
    lines = []
    settings = dict(torch_settings or {})
    if settings.get("cudnn_benchmark"):
        settings["cudnn_benchmark"] = False
        lines.append("training.deterministic: the profile's cudnn_benchmark gives way (off: benchmarking picks "
                     "convolution algorithms by timing, run by run)")
    mode = cfg.training.compile_mode
    if mode in WITHOUT_AUTOTUNE:
        other = WITHOUT_AUTOTUNE[mode]
        cfg = cfg.derive("training.compile_mode", other)
        lines.append(f"training.deterministic: compile_mode {mode} -> {other} (no autotuning by timing"
                     + ("; CUDA graphs kept: a replay runs the captured kernels, the same numbers)" if other != "default" else ")"))
    return cfg, settings or torch_settings, lines


FLEX_SWITCH = "ENVKIT_DETERMINISTIC_ATTENTION"  # "sdpa": a deterministic run keeps SDPA's attention (FlashAttention-2's)


def flex_attention_for(cfg, device_type: str) -> bool:
    """Whether a deterministic run trains envkit's gpt with FlexAttention in its compiled step: on CUDA,
    with training.sdpa_backend auto and no dropout, unless ENVKIT_DETERMINISTIC_ATTENTION=sdpa. SDPA's own
    choice on Hopper, cuDNN's attention, has no deterministic backward in PyTorch and is refused under
    use_deterministic_algorithms; what SDPA falls to, FlashAttention-2's deterministic backward, made a
    deterministic GPT-2 small step 1.073x the default's on one H100, FlexAttention's Triton backward (no
    atomics) 1.036x, each identical twice at every logged step (benchmarks/RESULTS.md, 2026-12-07:
    benchmarks/bench_determinism_gpt2.py). A backend named in training.sdpa_backend keeps SDPA with it."""
    t = cfg.training
    return bool(os.environ.get(FLEX_SWITCH) != "sdpa" and t.deterministic and device_type == "cuda" and cfg.model.type == "gpt"
                and t.sdpa_backend in (None, "auto") and not cfg.model.dropout)


def fills_uninitialized(model_type: str) -> bool:
    """Whether torch fills fresh tensors with NaN under determinism: not for envkit's own models,
    whose step never reads memory it did not write (the module docstring), kept for a factory's."""
    return model_type not in OWN_MODELS


def apply(device_type: TrainDevice, model_type: str = "") -> list[str]:
    """Switch torch to deterministic kernels (after the profile's torch settings); one line saying so."""
    import torch

    torch.use_deterministic_algorithms(True)
    fill = fills_uninitialized(model_type)
    with contextlib.suppress(AttributeError):  # torch.utils.deterministic: torch 2.1+
        import torch.utils.deterministic

        torch.utils.deterministic.fill_uninitialized_memory = fill  # pyright: ignore[reportAttributeAccessIssue] - a module property torch sets up at import, not in its stubs
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    with contextlib.suppress(Exception):  # a torch without Inductor compiles nothing
        import torch._inductor.config as inductor  # the variable was read if Inductor was imported before

        inductor.deterministic = True
    where = {"cuda": f"; CUBLAS_WORKSPACE_CONFIG={os.environ.get('CUBLAS_WORKSPACE_CONFIG')}, cudnn.benchmark off",
             "mps": "; MPS kernels that have no deterministic form raise"}.get(device_type, "")
    filled = ("; fresh tensors filled with NaN (a factory's model may read memory it did not write)" if fill else
              f"; fresh tensors not filled (model {model_type} writes all it reads)")
    return [f"training.deterministic: deterministic algorithms on ({device_type}){where}{filled}"]


_OP = re.compile(r"^(\S+) does not have a deterministic implementation")


def op_error(exc: BaseException) -> str | None:
    """The one line for torch's RuntimeError about an op without a deterministic kernel, else None."""
    text = str(exc)
    if not isinstance(exc, RuntimeError) or "deterministic" not in text or "use_deterministic_algorithms" not in text:
        return None
    m = _OP.search(text.strip())
    op = m.group(1) if m else text.strip().splitlines()[0][:120]
    return (f"envkit: error: training.deterministic: {op} has no deterministic kernel on this device, so the run cannot be "
            "deterministic (fix: set training.deterministic: false, or change the model so it does not call that op)")
